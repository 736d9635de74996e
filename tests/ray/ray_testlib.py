"""A real local Ray cluster for the submit/status/verify tests (session-scoped).

Two Ray nodes on loopback, shaped like the chart's RayCluster: a head with 0 CPUs and 0 GPUs, and one
"GPU worker" advertising the custom ``gpu_node`` resource and one GPU (Ray accepts a declared GPU count
on a machine without GPUs; tasks see CUDA_VISIBLE_DEVICES set by Ray). Both run with token
authentication on, as the chart starts them (``secrets.rayAuth``): ``AUTH_ENV`` is what the chart gives
the Ray pods and the hooks that call Ray. Every port is picked free so the
cluster never collides with another Ray on this machine, and each node runs under ``ray start --block``
so that terminating that one process stops exactly the processes it started (no global ``ray stop``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "run-spec.json"
BIN = Path(sys.executable).parent
AUTH_ENV = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_urlsafe(32)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_args(metrics_port: int | None = None) -> list[str]:
    return [
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--metrics-export-port={metrics_port or free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]


# How long one Ray node may take to come up, all attempts together: generous, as it only bounds a failure
# (a quiet machine needs about 10 s, one kept busy by other work a few minutes).
NODE_START_SECONDS = 300.0
# `ray start` gives its raylet a fixed 30 s to register with the GCS (ray/_private/node.py) and exits 1
# past that: on a busy machine it can, so a node that gave up is started again, as a kubelet would.
NODE_START_ATTEMPTS = 4


class LocalRay:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="mrt-", dir="/tmp"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self._pick_head_ports()
        self.env = dict(
            os.environ,
            RAY_USAGE_STATS_ENABLED="0",
            RAY_DISABLE_DOCKER_CPU_WARNING="1",
            PATH=f"{BIN}:{os.environ.get('PATH', '')}",
            **AUTH_ENV,
        )

    def _pick_head_ports(self) -> None:
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        # where the head exports its Prometheus metrics (KubeRay's port 8080 in a pod)
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> None:
        self._start_node("head", self._head_args, self._dashboard_answers, retry=self._pick_head_ports)
        self._start_node("worker", self._worker_args, lambda: True)
        self._wait_alive_nodes(2)

    def _head_args(self, attempt: int) -> list[str]:
        return [
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}",
            "--num-cpus=0",
            "--num-gpus=0",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={self.tmp}/head-{attempt}",
            "--disable-usage-stats",
            *_port_args(self.metrics_port),
        ]

    def _worker_args(self, attempt: int) -> list[str]:
        # no temp dir of its own: the worker takes the head's, where the head reads the job logs
        return [
            f"--address={self.address}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--num-gpus=1",
            '--resources={"gpu_node": 1}',
            "--disable-usage-stats",
            *_port_args(),
        ]

    def _start_node(
        self,
        name: str,
        args: Callable[[int], list[str]],
        serving: Callable[[], bool],
        retry: Callable[[], None] | None = None,
    ) -> None:
        """Runs `ray start --block` for one node until it reports the node started and ``serving()``
        holds; a start that gave up is killed with all it spawned and tried again."""
        deadline = time.monotonic() + NODE_START_SECONDS
        for attempt in range(1, NODE_START_ATTEMPTS + 1):
            log = self.tmp / f"{name}-{attempt}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [str(BIN / "ray"), "start", "--block", *args(attempt)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            self.procs.append(proc)
            while proc.poll() is None and time.monotonic() < deadline:
                if b"Ray runtime started" in log.read_bytes() and serving():
                    return
                time.sleep(0.5)
            tail = log.read_bytes().decode(errors="replace").strip().splitlines()[-8:]
            _kill_group(proc)
            self.procs.remove(proc)
            if time.monotonic() >= deadline:
                break
            print(f"ray start ({name}) exited with {proc.returncode}, attempt {attempt}: " + " | ".join(tail))
            if retry is not None:
                retry()
        raise RuntimeError(
            f"local Ray {name} did not start in {NODE_START_SECONDS:g}s ({attempt} attempt(s)); "
            "last lines of its `ray start`:\n" + "\n".join(tail)
        )

    def _dashboard_answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.dashboard_url + "/api/gcs_healthz", timeout=2) as r:
                return bool(r.read().decode().strip() == "success")
        except OSError:
            return False

    def _wait_alive_nodes(self, count: int) -> None:
        """Until the GCS counts exactly ``count`` alive nodes: a raylet of a start that gave up may
        have registered, and stays listed alive until the GCS's health check finds it gone."""
        deadline = time.monotonic() + NODE_START_SECONDS
        alive: list[Any] = []
        while time.monotonic() < deadline:
            try:
                req = urllib.request.Request(
                    self.dashboard_url + "/nodes?view=summary",
                    headers={"Authorization": "Bearer " + AUTH_ENV["RAY_AUTH_TOKEN"]},
                )
                with urllib.request.urlopen(req, timeout=2) as r:
                    data = json.loads(r.read())
                summary = data.get("data", {}).get("summary", [])
                alive = [n for n in summary if n.get("raylet", {}).get("state") == "ALIVE"]
                if len(alive) == count:
                    return
            except (OSError, ValueError):
                pass
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"ray start exited with {proc.returncode}; see logs in {self.tmp}")
            time.sleep(0.5)
        raise RuntimeError(f"expected {count} alive Ray nodes, found {len(alive)}; see logs in {self.tmp}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
            _kill_group(proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kills what `ray start` spawned in its session (raylet, GCS, agents), whether or not it still runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


FAKE_TRAIN = """\
import json, os, sys, time
print("ARGV=" + json.dumps(sys.argv[1:]), flush=True)
names = ("PROMETHEUS_PORT", "NCCL_NVLS_ENABLE", "HF_TOKEN")
print("ENV=" + json.dumps({k: os.environ.get(k) for k in names}), flush=True)
args = sys.argv[1:]
if "--sleep" in args:
    time.sleep(float(args[args.index("--sleep") + 1]))
print("TRAIN DONE", flush=True)
"""


def stand_in_run_identity(raw: dict[str, Any]) -> dict[str, Any]:
    """Gives ``raw`` the run identity a chart render of it would carry. The chart computes the real one (a
    SHA-256 over the job-defining sections, miles.runDefinition); here each distinct release and train argv
    gets a distinct id of the same shape, so a changed spec is a new run as it is after `helm upgrade`."""
    tag = json.dumps([raw["release"]["name"], raw["release"]["namespace"], raw["train"]["args"]])
    run_id = hashlib.sha256(tag.encode()).hexdigest()
    raw["run"]["id"] = run_id
    raw["submit"]["submissionId"] = f"{raw['release']['fullname'][:40].rstrip('-')}-{run_id[:12]}"
    return raw


def make_spec(
    tmp: Path, dashboard_url: str, release: str = "rt", args: list[str] | None = None, **overrides: Any
) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(json.loads(FIXTURE.read_text()))
    import ray

    workdir = tmp / "miles"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "train.py").write_text(FAKE_TRAIN)
    raw["release"]["name"] = release
    raw["release"]["fullname"] = release
    raw["rayCluster"]["dashboardUrl"] = dashboard_url
    raw["rayCluster"]["rayVersion"] = ray.__version__
    raw["train"]["workdir"] = str(workdir)
    raw["train"]["modelArgsCommand"] = "echo --num-layers 2 --hidden-size 64"
    raw["train"]["args"] = args if args is not None else ["--sleep", "0"]
    raw["output"].update(
        dir=str(tmp / "run"),
        checkpointDir=str(tmp / "run/ckpt"),
        tensorboardDir=str(tmp / "run/tb"),
        provenanceFile=str(tmp / "run/provenance.json"),
    )
    raw["model"]["hfPath"] = str(tmp / "model")
    topo = raw["topology"]
    topo.update(
        {
            "actorGpusPerNode": 1,
            "actorGpus": 1,
            "rolloutGpus": 1,
            "rolloutEngines": 1,
            "gpusPerWorker": 1,
            "enginesPerWorker": 1,
            "clusterGpus": 1,
            "tensorParallel": 1,
            "expertTensorParallel": 1,
            "sequenceParallel": False,
            "dataParallel": 1,
        }
    )
    raw["checks"]["nodes"]["gpusPerNode"] = 1
    for key, value in overrides.items():
        raw[key] = value
    return stand_in_run_identity(raw)


def write_spec(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(json.dumps(raw, indent=1))
    return path
