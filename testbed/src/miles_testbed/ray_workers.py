"""One real Ray worker node (raylet) per simulated KubeRay worker pod: the one imitation of a kubelet the
testbed keeps.

kwok only pretends the Ray worker pods run (they ask for GPUs). So that the release's real Ray head (a
container on the real node) sees the cluster its RayCluster describes (``verify`` checks it), ``RayWorkers``
starts ``ray start --block`` with the pod's own KubeRay-generated start parameters
(``KUBERAY_GEN_RAY_START_CMD``: ``--address`` -- the head Service, resolved through its EndpointSlices --,
``--num-gpus``, ``--resources``; CPUs capped) once the pod is Running on a kwok node, and stops it when the
pod goes. Each runs as a pod would: in the real node's network namespace (it reaches the head and the head
reaches it over the node's bridge), in a PID and mount namespace of its own (Ray finds a driver's local
raylet by listing processes: one that saw the head's would attach to it) with a /tmp dir of its own and the
pod's volumes bound (the stand-in miles checkout at /root/miles, the shared storage), from a Python with the
same Ray and Python version as the stand-in image the head runs (Ray refuses nodes of another).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from miles_testbed.kubelet_env import EnvError

LOG = logging.getLogger("ray-workers")
# Ray node labels of each local Ray worker, naming the simulated worker pod it stands in for
NODE_LABEL_NAMESPACE = "testbed.miles.dev/pod-namespace"
NODE_LABEL_POD = "testbed.miles.dev/pod"
# the start parameters of KubeRay's generated command a local worker keeps (its ports are the runner's own)
KEPT_START_PARAMS = ("--num-gpus", "--resources", "--num-cpus")
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
HEAD_SERVICE_REF = re.compile(
    r"(?<![\w.-])([a-z0-9](?:[-a-z0-9]*[a-z0-9])?-head-svc(?:\.[a-z0-9-]+(?:\.svc(?:\.cluster\.local)?)?)?):(\d+)\b"
)
SHELL_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
RESTARTS = 3  # like the kubelet restarting a failed container, with a back-off


class Cluster(Protocol):
    """What the workers need from the API server (the runner provides it)."""

    def is_kwok_node(self, name: str) -> bool: ...
    def pod_exists(self, pod: Any) -> bool: ...
    def mark_ray_pod_ready(self, pod: Any) -> None: ...
    def container_env(self, pod: Any, container: Any) -> dict[str, str]: ...
    def endpoint_address(self, namespace: str, service: str) -> str | None: ...


def is_worker(pod: Any) -> bool:
    labels = pod.metadata.labels or {}
    return labels.get("ray.io/is-ray-node") == "yes" and labels.get("ray.io/node-type") == "worker"


def generated_start(pod: Any) -> str:
    """The ``ray start`` command KubeRay generated for the pod (empty when it has none)."""
    for container in pod.spec.containers:
        for var in container.env or []:
            if var.name == "KUBERAY_GEN_RAY_START_CMD" and var.value:
                return str(var.value)
    return ""


def start_address(generated: str, env: dict[str, str]) -> str | None:
    """The ``--address`` of a generated start command, its shell variables (KubeRay writes ``$FQ_RAY_IP``)
    expanded from the container's env as its shell would."""
    for token in shlex.split(generated):
        key, _, value = token.partition("=")
        if key == "--address" and value:
            return SHELL_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)
    return None


def head_service(address: str, default_namespace: str) -> tuple[str, str, int] | None:
    """(namespace, Service, port) of a head Service reference (``<name>-head-svc[.<ns>[.svc...]]:<port>``),
    None when the address names no head Service."""
    m = HEAD_SERVICE_REF.search(address)
    if m is None:
        return None
    service, _, rest = m.group(1).partition(".")
    return rest.split(".")[0] or default_namespace, service, int(m.group(2))


def start_params(generated: str, cpus: int) -> list[str]:
    """The parameters of ``generated`` a local worker keeps, its CPUs capped at ``cpus`` (always given)."""
    out = []
    for token in shlex.split(generated):
        key, _, value = token.partition("=")
        if key not in KEPT_START_PARAMS or not value:
            continue
        if key == "--num-cpus":
            value = str(min(cpus, max(1, math.ceil(float(value)))))
        out.append(f"{key}={value}")
    if not any(o.startswith("--num-cpus=") for o in out):
        out.append(f"--num-cpus={cpus}")
    return out


def pod_like(netns: str, binds: list[tuple[str, str]]) -> list[str]:
    """A command prefix running the command as a container on the real node runs: in the node's network
    namespace (``netns``), in PID and mount namespaces of its own with its own /proc, and with each
    ``(local dir, mount point)`` of ``binds`` mounted as the pod's volumes are. A shell is PID 1 there, not
    the command: PID 1 ignores a SIGTERM it has no handler for (``ray start --block`` has none), so the shell
    passes SIGTERM on and waits; when it exits, the kernel ends whatever of the namespace is left, as when a
    container stops."""
    # recursive, as the kubelet binds a hostPath: what is mounted under a source comes along
    mounts = "".join(f"mount --rbind {shlex.quote(src)} {shlex.quote(dst)} || exit 1; " for src, dst in binds)
    script = (
        mounts + '"$@" & child=$!; trap "kill -TERM $child" TERM; wait $child; rc=$?; wait $child; exit $rc'
    )
    return [
        "nsenter",
        f"--net=/var/run/netns/{netns}",
        "unshare",
        "--pid",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
        "--",
        "bash",
        "-c",
        script,
        "pod",
    ]


@dataclass(frozen=True)
class WorkerSettings:
    node_netns: str  # the real node's network namespace
    node_ip: str  # the real node's address in it
    temp_dir: str  # each worker's own /tmp (Ray's temp dir in it) is a dir under it, removed when it stops
    binds: list[tuple[str, str]]  # (local dir, mount point): the worker pod's volumes
    work_dir: Path  # the workers' logs
    venv_bin: Path  # bin dir of the Python with the head image's Ray
    cpus: int  # CPUs a worker advertises at most
    limit: int  # workers at most (each raylet costs ~200 MB); beyond that the pod is only simulated
    port_base: int  # first port of the workers' port ranges (100 per worker)
    # dirs the workers' processes reach by their host path (the checkout with the Ray and contract venvs)
    host_paths: list[str] = field(default_factory=list)


def tmp_binds(s: WorkerSettings, tmp: Path) -> list[tuple[str, str]]:
    """The binds that give a worker ``tmp`` as its /tmp, last of all (a volume's source may lie under the
    host's /tmp). A host path the worker reaches that lies in the host's /tmp (a checkout cloned there) is
    first bound at the same place inside ``tmp``, so the worker's own /tmp does not hide it."""
    out = []
    for path in s.host_paths:
        if Path(path).is_relative_to("/tmp"):
            inside = tmp / Path(path).relative_to("/tmp")
            inside.mkdir(parents=True, exist_ok=True)
            out.append((path, str(inside)))
    return [*out, (str(tmp), "/tmp")]


def worker_tmp(s: WorkerSettings, slot: int) -> Path:
    """The host dir that is a worker's /tmp, as a container's /tmp is its own: what the worker and the jobs
    it runs write there (Ray's session files, a driver's scratch dirs) goes when the worker goes, even
    from a process killed before it could clean up."""
    return Path(s.temp_dir) / f"worker-{slot}"


def ray_start_argv(s: WorkerSettings, pod: Any, address: str, slot: int) -> list[str]:
    base = s.port_base + 100 * slot
    return [
        str(s.venv_bin / "ray"),
        "start",
        "--block",
        "--disable-usage-stats",
        f"--address={address}",
        f"--node-ip-address={s.node_ip}",
        # in the worker's own /tmp (pod_like binds worker_tmp there): raylets started side by side in one
        # temp dir pick the same socket names, and the second fails with "address already in use"
        "--temp-dir=/tmp/ray",
        f"--node-manager-port={base}",
        f"--object-manager-port={base + 1}",
        f"--metrics-export-port={base + 2}",
        f"--dashboard-agent-listen-port={base + 3}",
        f"--dashboard-agent-grpc-port={base + 4}",
        f"--runtime-env-agent-port={base + 5}",
        f"--min-worker-port={base + 10}",
        f"--max-worker-port={base + 99}",
        f"--object-store-memory={128 * 1024 * 1024}",
        # which pod this node stands in for (Ray's node table; the e2e tests find its processes by it)
        "--labels="
        + json.dumps({NODE_LABEL_NAMESPACE: pod.metadata.namespace, NODE_LABEL_POD: pod.metadata.name}),
        *start_params(generated_start(pod), s.cpus),
    ]


class RayWorkers:
    """The local Ray worker processes, keyed by the UID of the pod each stands in for."""

    def __init__(self, settings: WorkerSettings, cluster: Cluster) -> None:
        self.s = settings
        self.cluster = cluster
        self.log_dir = settings.work_dir / "ray-workers"
        self.procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        self.simulated: set[str] = set()
        self.waiting: set[str] = set()
        self.attempts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def head_address(self, pod: Any) -> str | None:
        """The head's GCS address the pod's ``--address`` names, its Service mapped to the head pod's address
        (None while the Service has no endpoint: the head is not up yet)."""
        env: dict[str, str] = {}
        for container in pod.spec.containers:
            env.update(self.cluster.container_env(pod, container))
        address = start_address(generated_start(pod), env)
        ref = head_service(address, pod.metadata.namespace) if address else None
        if ref is None:
            return None
        namespace, service, port = ref
        ip = self.cluster.endpoint_address(namespace, service)
        return f"{ip}:{port}" if ip else None

    def auth_env(self, pod: Any) -> dict[str, str]:
        """The pod's own Ray token settings (resolved from its Secret), so the raylet joins the authenticated
        head only when the chart wires the token into the worker pods; every other pod env is left out."""
        env: dict[str, str] = {}
        for container in pod.spec.containers:
            resolved = self.cluster.container_env(pod, container)
            env.update({k: resolved[k] for k in AUTH_ENV if k in resolved})
        return env

    def on_event(self, kind: str, pod: Any) -> None:
        if not is_worker(pod):
            return
        uid = pod.metadata.uid
        gone = kind == "DELETED" or pod.metadata.deletion_timestamp is not None
        with self.lock:
            known = uid in self.procs
        if gone:
            if known:
                self.stop(uid, f"{pod.metadata.namespace}/{pod.metadata.name}")
            return
        if known or not pod.spec.node_name or pod.status.phase not in ("Pending", "Running"):
            return
        initialized = any(
            c.type == "Initialized" and c.status == "True" for c in (pod.status.conditions or [])
        )
        if not initialized or not pod.status.pod_ip or not self.cluster.is_kwok_node(pod.spec.node_name):
            return
        self.start(pod)

    def only_simulated(self, pod: Any, running: int) -> None:
        LOG.warning(
            "%s/%s: %d local Ray workers run already (--max-ray-workers): only simulated",
            pod.metadata.namespace,
            pod.metadata.name,
            running,
        )
        threading.Thread(target=self.cluster.mark_ray_pod_ready, args=(pod,), daemon=True).start()

    def start(self, pod: Any) -> None:
        with self.lock:
            if len(self.procs) >= self.s.limit:
                if pod.metadata.uid not in self.simulated:
                    self.simulated.add(pod.metadata.uid)
                    self.only_simulated(pod, len(self.procs))
                return
            if pod.metadata.uid in self.waiting:
                return
            self.waiting.add(pod.metadata.uid)
        threading.Thread(target=self.launch_when_head_up, args=(pod,), daemon=True).start()

    def launch_when_head_up(self, pod: Any) -> None:
        """As KubeRay's wait-gcs-ready init container does: the worker starts once its head answers."""
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        try:
            deadline = time.monotonic() + 900
            while (address := self.head_address(pod)) is None:
                if time.monotonic() > deadline or not self.cluster.pod_exists(pod):
                    LOG.error("%s: its Ray head never got an address; no local Ray worker", name)
                    return
                time.sleep(1)
            with self.lock:
                if pod.metadata.uid in self.procs:
                    return
                used = {slot for _, slot in self.procs.values()}
                free = [i for i in range(self.s.limit) if i not in used]
                if not free:
                    # others waiting for their head at the same time took the last slots
                    self.only_simulated(pod, len(used))
                    return
                slot = free[0]
                p, log_path = self.popen(pod, address, slot)
                self.procs[pod.metadata.uid] = (p, slot)
        except EnvError as e:
            LOG.error("%s: %s: its container would not start, and no local Ray worker does", name, e)
            return
        finally:
            with self.lock:
                self.waiting.discard(pod.metadata.uid)
        LOG.info("%s: local Ray worker starting, head %s (slot %d)", name, address, slot)
        self.ready_when_up(pod, p, log_path)

    def popen(self, pod: Any, address: str, slot: int) -> tuple[subprocess.Popen[bytes], Path]:
        env = dict(
            os.environ, PATH=f"{self.s.venv_bin}:{os.environ.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0"
        )
        env.update(self.auth_env(pod))
        log_path = self.log_dir / f"{pod.metadata.namespace}_{pod.metadata.name}.log"
        tmp = worker_tmp(self.s, slot)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tmp.chmod(0o1777)
        binds = [*self.s.binds, *tmp_binds(self.s, tmp)]
        with open(log_path, "ab") as log:
            p = subprocess.Popen(
                [*pod_like(self.s.node_netns, binds), *ray_start_argv(self.s, pod, address, slot)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                process_group=0,
            )
        return p, log_path

    def ready_when_up(self, pod: Any, p: subprocess.Popen[bytes], log_path: Path) -> None:
        """Mark the pod Ready once `ray start` reports the node started (KubeRay's raylet readiness probe)."""
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None:
            if b"Ray runtime started" in log_path.read_bytes():
                self.cluster.mark_ray_pod_ready(pod)
                LOG.info("%s: local Ray worker joined; pod Ready", name)
                self.restart_after_exit(pod, p)
                return
            time.sleep(0.3)
        if p.poll() is not None:
            # `ray start` gave up, but the raylet and agents it spawned may live on in its process group: a
            # raylet left there stays joined to the head, an extra worker nobody stops
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        with self.lock:
            entry = self.procs.get(pod.metadata.uid)
            # this start's worker ended (not one stopped meanwhile, nor a later start's)
            ended = entry is not None and entry[0] is p and p.poll() is not None
            attempts = self.attempts.get(pod.metadata.uid, 0) + 1
            if entry is not None and ended:
                del self.procs[pod.metadata.uid]
        if entry is not None and ended:
            shutil.rmtree(worker_tmp(self.s, entry[1]), ignore_errors=True)
        if ended and attempts <= RESTARTS:
            # never for a pod deleted meanwhile: its DELETED event found nothing to stop, so a restart would
            # run for ever
            self.attempts[pod.metadata.uid] = attempts
            LOG.warning(
                "%s: local Ray worker exited (%s); restart %d of %d", name, p.returncode, attempts, RESTARTS
            )
            time.sleep(2 * attempts)
            if self.cluster.pod_exists(pod):
                self.start(pod)
            else:
                LOG.info("%s: deleted while its local Ray worker was down: not restarted", name)
            return
        LOG.error("%s: local Ray worker did not start (log: %s); the pod stays unready", name, log_path)

    def restart_after_exit(self, pod: Any, p: subprocess.Popen[bytes]) -> None:
        """As the kubelet restarts a container that exits: a joined worker whose `ray start --block` ended
        (its head was lost: a raylet that cannot reach its GCS for 60 s exits) starts again, and joins the
        head its pod's address names by then, as a KubeRay worker pod's restarted container does. A worker
        stopped on purpose (its pod deleted) is not restarted."""
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        p.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        with self.lock:
            entry = self.procs.get(pod.metadata.uid)
            if entry is None or entry[0] is not p:
                return
            del self.procs[pod.metadata.uid]
        shutil.rmtree(worker_tmp(self.s, entry[1]), ignore_errors=True)
        if not self.cluster.pod_exists(pod):
            return
        LOG.warning("%s: local Ray worker exited (%s) after it joined; restarting it", name, p.returncode)
        time.sleep(2)
        if self.cluster.pod_exists(pod):
            self.start(pod)

    def stop(self, uid: str, name: str) -> None:
        with self.lock:
            entry = self.procs.pop(uid, None)
        if entry is None:
            return
        p, slot = entry
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=15)
        # whatever of its process group outlived `ray start` (or the 15 s) goes too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        shutil.rmtree(worker_tmp(self.s, slot), ignore_errors=True)
        LOG.info("%s: local Ray worker stopped", name)

    def stop_absent(self, present: set[str]) -> None:
        """Stop the workers of pods missing from a fresh list (their DELETED event was never seen)."""
        with self.lock:
            absent = [uid for uid in self.procs if uid not in present]
        for uid in absent:
            self.stop(uid, f"pod {uid} (no longer listed)")

    def stop_all(self) -> None:
        with self.lock:
            uids = list(self.procs)
        for uid in uids:
            self.stop(uid, uid)
