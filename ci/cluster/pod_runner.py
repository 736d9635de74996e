#!/usr/bin/env python3
"""Pod runner of the local testbed: the Ray worker nodes behind the simulated GPU worker pods.

Every pod of the chart runs on the testbed's real node (ci/cluster/node.sh) as a container, except the KubeRay
worker pods: they ask for GPUs and land on kwok nodes, where no process runs. So that the release's real Ray
head sees the cluster its RayCluster describes, this runner starts one real Ray worker node per such pod and
marks the pod Ready once it joined (``RayWorkers``): the one imitation of a kubelet left in the testbed.

Its pod watch also feeds the journal of the real node's hook containers (node_journal.py: it only observes).
Only the standard library and the ``kubernetes`` client are used. Exit: 0 on SIGTERM/SIGINT, 2 on bad input.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import logging
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from node_journal import HookPodJournal

LOG = logging.getLogger("pod-runner")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Ray node labels of each local Ray worker, naming the simulated worker pod it stands in for
NODE_LABEL_NAMESPACE = "testbed.miles.dev/pod-namespace"
NODE_LABEL_POD = "testbed.miles.dev/pod"
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
SERVICE_REF = re.compile(
    r"(?<![\w.-])([a-z0-9](?:[-a-z0-9]*[a-z0-9])?-head-svc(?:\.[a-z0-9-]+(?:\.svc(?:\.cluster\.local)?)?)?):(\d+)\b"
)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EnvError(Exception):
    """A worker pod's env names a ConfigMap or Secret key that is not there: the kubelet would not start the
    container (CreateContainerConfigError), so no Ray worker starts either."""


@dataclass
class Settings:
    kubeconfig: str
    work_dir: Path
    # pods with a container of the hooks image, on the real node, are journaled (node_journal.py)
    hooks_image: re.Pattern[str]


def expand_vars(value: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: defined vars are replaced, $$ escapes, unknown refs stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return VAR_REF.sub(sub, value)


class RayWorkers:
    """One real Ray worker node (raylet) per simulated KubeRay worker pod: the imitation that remains.

    kwok only pretends the Ray worker pods run (they need GPUs). So that the release's real Ray head (a
    container on the real node) sees the cluster the RayCluster describes (``verify`` checks it), the runner
    starts ``ray start --block`` with the pod's own KubeRay-generated start parameters
    (``KUBERAY_GEN_RAY_START_CMD``: ``--address`` -- the head Service, resolved through its EndpointSlices --,
    ``--num-gpus``, ``--resources``; CPUs capped at ``cpus``) once the pod is Running on a kwok node, and
    stops it when the pod goes. Each runs as a pod would: in the real node's network namespace (it reaches the
    head and the head reaches it over the node's bridge), in a PID and mount namespace of its own (Ray finds a
    driver's local raylet by listing processes: one that saw the head's would attach to it) with a /tmp dir of
    its own and ``--fake-miles`` at /root/miles, from a Python with the same Ray and Python version as the
    stand-in image the head runs (Ray refuses nodes of another). At most ``limit`` at a time (each raylet
    costs ~200 MB); beyond that a warning is logged.
    """

    KEEP = ("--num-gpus", "--resources", "--num-cpus")

    def __init__(
        self,
        *,
        node_netns: str,
        node_ip: str,
        temp_dir: str,
        binds: list[tuple[str, str]],
        work_dir: Path,
        venv_bin: Path,
        cpus: int,
        limit: int,
        port_base: int,
    ) -> None:
        self.node_netns, self.node_ip, self.temp_dir = node_netns, node_ip, temp_dir
        self.binds = binds
        self.work_dir, self.venv_bin = work_dir / "ray-workers", venv_bin
        self.cpus, self.limit, self.port_base = cpus, limit, port_base
        self.procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        self.simulated: set[str] = set()
        self.waiting: set[str] = set()
        self.attempts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.work_dir.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def is_worker(pod: client.V1Pod) -> bool:
        labels = pod.metadata.labels or {}
        return labels.get("ray.io/is-ray-node") == "yes" and labels.get("ray.io/node-type") == "worker"

    @staticmethod
    def generated_start(pod: client.V1Pod) -> str:
        for c in pod.spec.containers:
            for e in c.env or []:
                if e.name == "KUBERAY_GEN_RAY_START_CMD" and e.value:
                    return str(e.value)
        return ""

    def head_address(self, pod: client.V1Pod, runner: Runner) -> str | None:
        """The head's GCS address the pod's ``--address`` names, its Service mapped to the head pod's address
        (None while the Service has no endpoint: the head is not up yet)."""
        env = {}
        for c in pod.spec.containers:
            env.update(runner.container_env(pod, c))
        for tok in shlex.split(self.generated_start(pod)):
            key, _, value = tok.partition("=")
            if key == "--address" and value:
                # KubeRay writes it with shell variables ($FQ_RAY_IP) the container's shell would expand
                address = re.sub(
                    r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), value
                )
                return runner.head_gcs(address, pod.metadata.namespace)
        return None

    def start_params(self, pod: client.V1Pod) -> list[str]:
        out = []
        for tok in shlex.split(self.generated_start(pod)):
            key, _, value = tok.partition("=")
            if key not in self.KEEP or not value:
                continue
            if key == "--num-cpus":
                value = str(min(self.cpus, max(1, math.ceil(float(value)))))
            out.append(f"{key}={value}")
        if not any(o.startswith("--num-cpus=") for o in out):
            out.append(f"--num-cpus={self.cpus}")
        return out

    AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")

    @classmethod
    def auth_env(cls, pod: client.V1Pod, runner: Runner) -> dict[str, str]:
        """The pod's own Ray token settings (resolved from its Secret), so the raylet joins the authenticated
        head only when the chart wires the token into the worker pods; every other pod env is left out."""
        env: dict[str, str] = {}
        for c in pod.spec.containers:
            resolved = runner.container_env(pod, c)
            env.update({k: resolved[k] for k in cls.AUTH_ENV if k in resolved})
        return env

    def on_event(self, kind: str, pod: client.V1Pod, runner: Runner) -> None:
        if not self.is_worker(pod):
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
        if not initialized or not pod.status.pod_ip or not runner.is_kwok_node(pod.spec.node_name):
            return
        self.start(pod, runner)

    def start(self, pod: client.V1Pod, runner: Runner) -> None:
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        with self.lock:
            if len(self.procs) >= self.limit:
                if pod.metadata.uid not in self.simulated:
                    self.simulated.add(pod.metadata.uid)
                    LOG.warning(
                        "%s: %d local Ray workers run already (--max-ray-workers): only simulated",
                        name,
                        len(self.procs),
                    )
                    threading.Thread(target=runner.mark_ray_pod_ready, args=(pod,), daemon=True).start()
                return
            if pod.metadata.uid in self.waiting:
                return
            self.waiting.add(pod.metadata.uid)
        threading.Thread(target=self.launch_when_head_up, args=(pod, runner), daemon=True).start()

    def launch_when_head_up(self, pod: client.V1Pod, runner: Runner) -> None:
        """As KubeRay's wait-gcs-ready init container does: the worker starts once its head answers."""
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        try:
            deadline = time.monotonic() + 900
            while (address := self.head_address(pod, runner)) is None:
                if time.monotonic() > deadline or not runner.pod_exists(pod):
                    LOG.error("%s: its Ray head never got an address; no local Ray worker", name)
                    return
                time.sleep(1)
            with self.lock:
                if pod.metadata.uid in self.procs:
                    return
                used = {slot for _, slot in self.procs.values()}
                free = [i for i in range(self.limit) if i not in used]
                if not free:
                    # others waiting for their head at the same time took the last slots
                    LOG.warning("%s: %d local Ray workers run already: only simulated", name, len(used))
                    threading.Thread(target=runner.mark_ray_pod_ready, args=(pod,), daemon=True).start()
                    return
                slot = free[0]
                p, log_path = self.popen(pod, runner, address, slot)
                self.procs[pod.metadata.uid] = (p, slot)
        except EnvError as e:
            LOG.error("%s: %s: its container would not start, and no local Ray worker does", name, e)
            return
        finally:
            with self.lock:
                self.waiting.discard(pod.metadata.uid)
        LOG.info("%s: local Ray worker starting, head %s (slot %d)", name, address, slot)
        self.ready_when_up(pod, p, log_path, runner)

    def popen(
        self, pod: client.V1Pod, runner: Runner, address: str, slot: int
    ) -> tuple[subprocess.Popen[bytes], Path]:
        base = self.port_base + 100 * slot
        ray_start = [
            str(self.venv_bin / "ray"),
            "start",
            "--block",
            "--disable-usage-stats",
            f"--address={address}",
            f"--node-ip-address={self.node_ip}",
            # a temp dir of its own, as each pod has its own /tmp: raylets started side by side in one
            # temp dir pick the same socket names, and the second fails with "address already in use"
            f"--temp-dir={self.temp_dir}/worker-{slot}",
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
            *self.start_params(pod),
        ]
        env = dict(
            os.environ, PATH=f"{self.venv_bin}:{os.environ.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0"
        )
        env.update(self.auth_env(pod, runner))
        log_path = self.work_dir / f"{pod.metadata.namespace}_{pod.metadata.name}.log"
        with open(log_path, "ab") as log:
            p = subprocess.Popen(
                [*pod_like(self.node_netns, self.binds), *ray_start],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                process_group=0,
            )
        return p, log_path

    def ready_when_up(
        self, pod: client.V1Pod, p: subprocess.Popen[bytes], log_path: Path, runner: Runner
    ) -> None:
        """Mark the pod Ready once `ray start` reports the node started (KubeRay's raylet readiness probe)."""
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None:
            if b"Ray runtime started" in log_path.read_bytes():
                runner.mark_ray_pod_ready(pod)
                LOG.info("%s: local Ray worker joined; pod Ready", name)
                return
            time.sleep(0.3)
        if p.poll() is not None:
            # `ray start` gave up, but the raylet and agents it spawned may live on in its process group: a
            # raylet left there stays joined to the head, an extra worker nobody stops
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        with self.lock:
            entry = self.procs.get(pod.metadata.uid)
            mine = entry is not None and entry[0] is p
            attempts = self.attempts.get(pod.metadata.uid, 0) + 1
            if mine and p.poll() is not None:
                del self.procs[pod.metadata.uid]
        if mine and p.poll() is not None and attempts < 4:
            # like the kubelet restarting a failed container: try again, with a back-off; but never for a pod
            # deleted meanwhile (its DELETED event found nothing to stop, so a restart would run for ever)
            self.attempts[pod.metadata.uid] = attempts
            LOG.warning("%s: local Ray worker exited (%s); restart %d of 3", name, p.returncode, attempts)
            time.sleep(2 * attempts)
            if runner.pod_exists(pod):
                self.start(pod, runner)
            else:
                LOG.info("%s: deleted while its local Ray worker was down: not restarted", name)
            return
        LOG.error("%s: local Ray worker did not start (log: %s); the pod stays unready", name, log_path)

    def stop(self, uid: str, name: str) -> None:
        with self.lock:
            entry = self.procs.pop(uid, None)
        if entry is None:
            return
        p = entry[0]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=15)
        # whatever of its process group outlived `ray start` (or the 15 s) goes too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
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


class Runner:
    def __init__(self, s: Settings, ray_workers: RayWorkers) -> None:
        self.s = s
        self.ray_workers = ray_workers
        config.load_kube_config(config_file=s.kubeconfig)
        self.core = client.CoreV1Api()
        self.discovery = client.DiscoveryV1Api()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.kwok_nodes: dict[str, bool] = {}
        self.node_journal = HookPodJournal(
            self.core, s.work_dir / "node-logs", s.hooks_image, self.is_kwok_node, self.journal
        )

    def is_kwok_node(self, name: str) -> bool:
        if name not in self.kwok_nodes:
            try:
                node = self.core.read_node(name)
                ann = node.metadata.annotations or {}
                self.kwok_nodes[name] = ann.get(KWOK_NODE_ANNOTATION) == "fake"
            except ApiException:
                return False
        return self.kwok_nodes[name]

    # ------------------------------------------------------------------ the pod watch
    def run_forever(self) -> None:
        """List, reconcile, then watch from the list's resourceVersion; list again when the watch ends.

        A watch started afresh (no resourceVersion) misses every deletion between the old watch's end and the
        new one's start, and a missed DELETED leaks that pod's Ray worker (it holds its memory and stays
        joined to its head). Like an informer, each list is reconciled against what runs: the worker of a pod
        that is no longer listed is stopped.
        """
        (self.s.work_dir / "ready").write_text(now() + "\n")
        LOG.info(
            "watching pods: Ray workers on kwok nodes, %r pods on the others", self.s.hooks_image.pattern
        )
        while not self.stopping.is_set():
            w = watch.Watch()
            try:
                listed = self.core.list_pod_for_all_namespaces(_request_timeout=90)
                self.reconcile(listed.items)
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=60,
                    _request_timeout=90,
                ):
                    if self.stopping.is_set():
                        break
                    if ev["type"] == "ERROR":
                        LOG.info("watch expired (%s); listing again", ev["raw_object"].get("message"))
                        break
                    self.on_event(ev["type"], ev["object"])
            except Exception as e:
                if not self.stopping.is_set():
                    LOG.warning("watch interrupted (%s); listing again", e)
                    time.sleep(1)
            finally:
                w.stop()

    def reconcile(self, pods: list[client.V1Pod]) -> None:
        """Stop the Ray workers of pods that are gone, then treat every listed pod as a fresh event."""
        self.ray_workers.stop_absent({p.metadata.uid for p in pods})
        for pod in pods:
            self.on_event("ADDED", pod)

    def on_event(self, kind: str, pod: client.V1Pod) -> None:
        self.ray_workers.on_event(kind, pod, self)
        self.node_journal.on_event(kind, pod)

    def pod_exists(self, pod: client.V1Pod) -> bool:
        """The pod, this very one (same UID), is still there and not being deleted."""
        try:
            live = self.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return bool(live.metadata.uid == pod.metadata.uid and live.metadata.deletion_timestamp is None)

    def shutdown(self) -> None:
        self.stopping.set()
        self.ray_workers.stop_all()

    def mark_ray_pod_ready(self, pod: client.V1Pod) -> None:
        """The status kwok's pod-ready stage would write, for a Ray worker pod whose local node runs."""
        t = now()
        conds = [
            {"type": k, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
            for k in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        statuses = [
            {
                "name": c.name,
                "image": c.image,
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": t}},
            }
            for c in pod.spec.containers
        ]
        body = {
            "status": {"phase": "Running", "conditions": conds, "containerStatuses": statuses, "startTime": t}
        }
        try:
            self.core.patch_namespaced_pod_status(
                pod.metadata.name, pod.metadata.namespace, body, _content_type="application/merge-patch+json"
            )
        except ApiException as e:
            if e.status != 404:
                LOG.warning(
                    "%s/%s: status update failed: %s", pod.metadata.namespace, pod.metadata.name, e.reason
                )

    # ------------------------------------------------------------------ what a worker pod's container gets
    def config_data(self, kind: str, ns: str, name: str, optional: bool) -> dict[str, str] | None:
        """A ConfigMap's or Secret's data, decoded; None for a missing optional one."""
        try:
            if kind == "Secret":
                raw = self.core.read_namespaced_secret(name, ns).data or {}
                return {k: base64.b64decode(v).decode(errors="replace") for k, v in raw.items()}
            return dict(self.core.read_namespaced_config_map(name, ns).data or {})
        except ApiException as e:
            if e.status == 404 and optional:
                return None
            if e.status == 404:
                raise EnvError(f'{kind.lower()} "{name}" not found') from e
            raise

    def container_env(self, pod: client.V1Pod, c: client.V1Container) -> dict[str, str]:
        """The container's env as the kubelet resolves it: envFrom, then env (``value`` with ``$(VAR)``
        expansion, ``configMapKeyRef``, ``secretKeyRef``). Downward-API values are left out: the Ray worker
        needs none of them (its address and its token are values and Secret keys)."""
        ns = pod.metadata.namespace
        env: dict[str, str] = {}
        for ef in c.env_from or []:
            ref, kind = (ef.config_map_ref, "ConfigMap") if ef.config_map_ref else (ef.secret_ref, "Secret")
            if ref is not None:
                data = self.config_data(kind, ns, ref.name, bool(ref.optional)) or {}
                env.update({(ef.prefix or "") + k: v for k, v in data.items()})
        for e in c.env or []:
            vf = e.value_from
            if vf is None:
                env[e.name] = expand_vars(e.value or "", env)
                continue
            key_ref, kind = (
                (vf.config_map_key_ref, "ConfigMap")
                if vf.config_map_key_ref
                else (vf.secret_key_ref, "Secret")
            )
            if key_ref is None:
                continue
            data = self.config_data(kind, ns, key_ref.name, bool(key_ref.optional))
            if data is not None and key_ref.key in data:
                env[e.name] = data[key_ref.key]
            elif not key_ref.optional:
                raise EnvError(f"couldn't find key {key_ref.key} in {kind} {ns}/{key_ref.name}")
        return env

    def head_gcs(self, value: str, ns: str) -> str | None:
        """The GCS address of a head Service reference, as a pod on the real node reaches it: the address the
        Service's EndpointSlices hold now (None while it has none)."""
        m = SERVICE_REF.search(value)
        if m is None:
            return None
        service, _, rest = m.group(1).partition(".")
        address = self.endpoint_address(rest.split(".")[0] or ns, service)
        return f"{address}:{m.group(2)}" if address else None

    def endpoint_address(self, ns: str, service: str) -> str | None:
        """The first ready endpoint address of the Service (None when it has none, or is not there)."""
        try:
            slices = self.discovery.list_namespaced_endpoint_slice(
                ns, label_selector=f"kubernetes.io/service-name={service}"
            ).items
        except ApiException as e:
            LOG.warning("%s/%s: cannot read its EndpointSlices (%s)", ns, service, e.reason)
            return None
        for sl in slices:
            for ep in sl.endpoints or []:
                if ep.addresses and (ep.conditions is None or ep.conditions.ready is not False):
                    return str(ep.addresses[0])
        return None

    def journal(self, entry: dict[str, Any]) -> None:
        """One JSON line per finished hook container in <work-dir>/journal.jsonl (the tests read it)."""
        with self.lock, open(self.s.work_dir / "journal.jsonl", "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


def pod_like(netns: str, binds: list[tuple[str, str]]) -> list[str]:
    """A command prefix running the command as a container on the real node runs: in the node's network
    namespace (``netns``), in PID and mount namespaces of its own with its own /proc, and with each
    ``(local dir, mount point)`` of ``binds`` mounted as the pod's volumes are (fake-miles at /root/miles, the
    shared storage's dir at its mount path). A shell is PID 1 there, not the command: PID 1 ignores a SIGTERM
    it has no handler for (``ray start --block`` has none), so the shell passes SIGTERM on and waits; when it
    exits, the kernel ends whatever of the namespace is left, as when a container stops."""
    mounts = "".join(f"mount --bind {shlex.quote(src)} {shlex.quote(dst)} || exit 1; " for src, dst in binds)
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


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the testbed")
    ap.add_argument("--work-dir", required=True, type=Path, help="logs, the journal and the ready marker")
    ap.add_argument(
        "--hooks-image-regex",
        default="miles-hooks",
        help="journal the pods on the real node with a (init) container image matching this",
    )
    ap.add_argument("--ray-temp-dir", required=True, help="the local Ray workers' temp dirs go under it")
    ap.add_argument(
        "--ray-worker-venv-bin",
        type=Path,
        default=root / ".tools" / "ray-worker-venv" / "bin",
        help="bin dir of the Python the local Ray workers run (same Ray and Python as the head's image)",
    )
    ap.add_argument(
        "--node-netns", required=True, help="network namespace of the real node (under /var/run/netns)"
    )
    ap.add_argument("--node-ip", required=True, help="the real node's address in it (the workers' node IP)")
    ap.add_argument("--max-ray-workers", type=int, default=8, help="local Ray worker nodes at most")
    ap.add_argument(
        "--ray-worker-cpus", type=int, default=2, help="CPUs a local Ray worker advertises at most"
    )
    ap.add_argument(
        "--ray-worker-port-base", type=int, default=12000, help="first port of the workers' ranges"
    )
    ap.add_argument(
        "--fake-miles", default="", help="dir bind-mounted at /root/miles for the Ray workers (none: empty)"
    )
    ap.add_argument(
        "--storage-map",
        action="append",
        default=[],
        metavar="MOUNT_PATH=LOCAL_DIR",
        help="the shared storage's mount path and its local dir, bound there for the Ray worker nodes (the "
        "worker pods mount the claim); repeatable",
    )
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout
    )

    def bad(message: str) -> int:
        print(f"pod_runner: {message}", file=sys.stderr)
        return 2

    try:
        hooks_image = re.compile(args.hooks_image_regex)
    except re.error as e:
        return bad(f"--hooks-image-regex {args.hooks_image_regex!r} is not a valid regex: {e}")
    if not Path(args.kubeconfig).is_file():
        return bad(f"kubeconfig {args.kubeconfig} not found (is the testbed up?)")
    if args.max_ray_workers < 0 or args.ray_worker_cpus < 1:
        return bad(
            f"--max-ray-workers must be >= 0 and --ray-worker-cpus >= 1, not {args.max_ray_workers} and "
            f"{args.ray_worker_cpus}"
        )
    if not (args.ray_worker_venv_bin / "ray").is_file():
        return bad(f"no ray in {args.ray_worker_venv_bin}: run `ci/install-tools.sh rayworker`")
    binds = []
    for sm in args.storage_map:
        mount, sep, local = sm.partition("=")
        if not sep or not mount.startswith("/") or not local.startswith("/"):
            return bad(f"--storage-map {sm!r}: expected /mount/path=/local/dir")
        binds.append((local, mount.rstrip("/") or "/"))
    # the worker pod's volumes as its container would see them: the shared storage and the miles checkout the
    # image carries (FAKE_MILES=0: none, and the submitted jobs fail)
    if args.fake_miles:
        binds.append((str(Path(args.fake_miles).resolve()), "/root/miles"))
    work_dir = args.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "ready").unlink(missing_ok=True)
    ray_workers = RayWorkers(
        node_netns=args.node_netns,
        node_ip=args.node_ip,
        temp_dir=args.ray_temp_dir,
        binds=binds,
        work_dir=work_dir,
        venv_bin=args.ray_worker_venv_bin,
        cpus=args.ray_worker_cpus,
        limit=args.max_ray_workers,
        port_base=args.ray_worker_port_base,
    )
    runner = Runner(Settings(args.kubeconfig, work_dir, hooks_image), ray_workers)

    def stop(_sig: int, _frm: Any) -> None:
        runner.shutdown()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
