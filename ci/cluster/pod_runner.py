#!/usr/bin/env python3
"""Pod runner of the local testbed: the imitation of a kubelet on the simulated GPU nodes.

Every pod of the chart that runs a process on a CPU node runs on the testbed's real node (ci/cluster/node.sh).
What asks for GPUs is scheduled on a kwok node, where no process runs. Two kinds of those pods run here:

* pods with a container or init container of an image matching ``--image-regex`` (the hooks image): the
  convert pod. kwok is told to leave them alone (kwok-stages.yaml); this runner, once the pod is bound:

  - materialises its volumes into a per-pod work dir: ConfigMap, Secret, emptyDir and PersistentVolumeClaim
    (through the bound PV's hostPath/local path); another volume type, or a pod that would get a
    service-account token, fails the pod (nothing it does not need is imitated);
  - resolves the container env like the kubelet (``value`` with ``$(VAR)`` expansion, ``configMapKeyRef``,
    ``secretKeyRef``, ``fieldRef``/``resourceFieldRef``, ``envFrom``) through the API;
  - runs the init containers, then the containers, as local processes: every mount path in the command,
    args, env values and mounted ConfigMap files is rewritten to the local dir that backs it; image paths
    from ``--path-map`` likewise; a container of another image than the hooks image (the miles image) runs in
    a private mount namespace with ``--fake-miles`` at ``/root/miles``, the checkout that image carries;
  - writes the pod status back (Running, then each container terminated with its exit code; phase
    Succeeded/Failed); ``kubectl logs`` works through kwok's kubelet server (a kwok ``Logs`` object per pod),
    and the last lines are in the pod annotation ``testbed.miles.dev/log-tail``;
  - kills the process group when the pod is deleted;

* KubeRay worker pods: one real Ray worker node each, joined to the release's head (``RayWorkers``).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity
from node_journal import HookPodJournal

LOG = logging.getLogger("pod-runner")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
LOG_TAIL_ANNOTATION = "testbed.miles.dev/log-tail"
LOG_FILE_ANNOTATION = "testbed.miles.dev/log-file"
# Ray node labels of each local Ray worker, naming the simulated worker pod it stands in for
NODE_LABEL_NAMESPACE = "testbed.miles.dev/pod-namespace"
NODE_LABEL_POD = "testbed.miles.dev/pod"
TAIL_BYTES = 16 * 1024
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
SERVICE_REF = re.compile(
    r"(?<![\w.-])([a-z0-9](?:[-a-z0-9]*[a-z0-9])?-head-svc(?:\.[a-z0-9-]+(?:\.svc(?:\.cluster\.local)?)?)?):(\d+)\b"
)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodError(Exception):
    """The pod cannot be run as specified (a missing ConfigMap key, an unbound claim, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Settings:
    kubeconfig: str
    work_dir: Path
    image_regex: re.Pattern[str]
    venv_bin: Path
    path_map: list[tuple[str, str]]
    api_server: str
    default_entrypoint: list[str]
    grace_seconds: float = 5.0
    ray_workers: RayWorkers | None = None
    storage_map: list[tuple[str, str]] = field(default_factory=list)
    # dir bind-mounted at /root/miles for containers of another image than the hooks image ("" = none)
    fake_miles: str = ""


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    thread: threading.Thread | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    deleted: threading.Event = field(default_factory=threading.Event)


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
    def __init__(self, s: Settings) -> None:
        self.s = s
        config.load_kube_config(config_file=s.kubeconfig)
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.discovery = client.DiscoveryV1Api()
        self.runs: dict[str, PodRun] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.kwok_nodes: dict[str, bool] = {}
        self.kwok_logs = self._has_kwok_logs_crd()
        self.node_journal = HookPodJournal(
            self.core, s.work_dir / "node-logs", s.image_regex, self.is_kwok_node, self.journal
        )

    # ------------------------------------------------------------------ discovery
    def _has_kwok_logs_crd(self) -> bool:
        try:
            client.ApiextensionsV1Api().read_custom_resource_definition("logs.kwok.x-k8s.io")
            return True
        except ApiException:
            LOG.warning("kwok Logs CRD not installed: `kubectl logs` will not reach runner pods")
            return False

    def is_kwok_node(self, name: str) -> bool:
        if name not in self.kwok_nodes:
            try:
                node = self.core.read_node(name)
                ann = node.metadata.annotations or {}
                self.kwok_nodes[name] = ann.get(KWOK_NODE_ANNOTATION) == "fake"
            except ApiException:
                return False
        return self.kwok_nodes[name]

    def wants(self, pod: client.V1Pod) -> bool:
        spec = pod.spec
        if not spec or not spec.node_name or pod.metadata.deletion_timestamp:
            return False
        if (pod.status.phase or "Pending") != "Pending":
            return False
        images = [c.image or "" for c in (spec.init_containers or [])] + [
            c.image or "" for c in spec.containers
        ]
        if not any(self.s.image_regex.search(i) for i in images):
            return False
        return self.is_kwok_node(spec.node_name)

    # ------------------------------------------------------------------ main loop
    def run_forever(self) -> None:
        """List, reconcile, then watch from the list's resourceVersion; list again when the watch ends.

        A watch started afresh (no resourceVersion) misses every deletion between the old watch's end and the
        new one's start, and a missed DELETED leaks that pod's processes (a local Ray worker left running
        holds its memory and stays joined to its head). Like an informer, each list is reconciled against
        what runs: whatever belongs to a pod that is no longer listed is stopped.
        """
        (self.s.work_dir / "ready").write_text(now() + "\n")
        LOG.info("watching pods (images matching %r on kwok nodes)", self.s.image_regex.pattern)
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
        """Stop what runs for pods that are gone, then treat every listed pod as a fresh event."""
        present = {p.metadata.uid for p in pods}
        with self.lock:
            gone = [r for uid, r in self.runs.items() if uid not in present]
        for run in gone:
            if not run.deleted.is_set():
                LOG.info("%s/%s no longer listed: stopping its processes", run.namespace, run.name)
                run.deleted.set()
                self.kill(run)
        if self.s.ray_workers is not None:
            self.s.ray_workers.stop_absent(present)
        for pod in pods:
            self.on_event("ADDED", pod)

    def pod_exists(self, pod: client.V1Pod) -> bool:
        """The pod, this very one (same UID), is still there and not being deleted."""
        try:
            live = self.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return bool(live.metadata.uid == pod.metadata.uid and live.metadata.deletion_timestamp is None)

    def on_event(self, kind: str, pod: client.V1Pod) -> None:
        uid = pod.metadata.uid
        if self.s.ray_workers is not None:
            self.s.ray_workers.on_event(kind, pod, self)
        self.node_journal.on_event(kind, pod)
        with self.lock:
            run = self.runs.get(uid)
        if run is not None:
            if (kind == "DELETED" or pod.metadata.deletion_timestamp) and not run.deleted.is_set():
                LOG.info("%s/%s deleted: stopping its processes", run.namespace, run.name)
                run.deleted.set()
                self.kill(run)
            return
        if kind in ("ADDED", "MODIFIED") and self.wants(pod):
            run = PodRun(uid, pod.metadata.namespace, pod.metadata.name)
            with self.lock:
                self.runs[uid] = run
            run.thread = threading.Thread(
                target=self.run_pod, args=(run, pod), daemon=True, name=f"pod-{run.name}"
            )
            run.thread.start()

    def kill(self, run: PodRun) -> None:
        for p in run.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)

        def later() -> None:
            time.sleep(self.s.grace_seconds)
            for p in run.procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)

        threading.Thread(target=later, daemon=True).start()

    def shutdown(self) -> None:
        self.stopping.set()
        if self.s.ray_workers is not None:
            self.s.ray_workers.stop_all()
        with self.lock:
            runs = list(self.runs.values())
        for r in runs:
            r.deleted.set()
            self.kill(r)

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

    # ------------------------------------------------------------------ one pod
    def run_pod(self, run: PodRun, pod: client.V1Pod) -> None:
        ns, name = run.namespace, run.name
        pod_dir = self.s.work_dir / "pods" / ns / f"{name}-{run.uid[:8]}"
        try:
            pod_dir.mkdir(parents=True, exist_ok=True)
            LOG.info("running %s/%s on %s", ns, name, pod.spec.node_name)
            self.set_status(
                pod,
                phase="Pending",
                initialized=False,
                ready=False,
                init_statuses=None,
                statuses=None,
                start=True,
            )
            if pod.spec.automount_service_account_token is not False:
                # the pods it runs (the convert pod) call no API; a token it would imitate untested
                raise PodError(
                    "CreateContainerConfigError",
                    "the testbed's pod runner mounts no service-account token: this pod needs "
                    "automountServiceAccountToken: false (or a place on the real node)",
                )
            vols = self.materialise_volumes(pod, pod_dir)
            init_statuses: list[dict[str, Any]] = []
            for c in pod.spec.init_containers or []:
                st = self.waiting_status(c)
                init_statuses.append(st)
            statuses = [self.waiting_status(c) for c in pod.spec.containers]
            for i, c in enumerate(pod.spec.init_containers or []):
                init_statuses[i] = self.running_status(c)
                self.set_status(
                    pod,
                    phase="Pending",
                    initialized=False,
                    ready=False,
                    init_statuses=init_statuses,
                    statuses=statuses,
                )
                code, tail = self.run_container(run, pod, c, vols, pod_dir)
                init_statuses[i] = self.terminated_status(c, init_statuses[i], code, tail)
                if code != 0 or run.deleted.is_set():
                    self.finish(pod, run, init_statuses, statuses, failed=True)
                    return
            statuses = [self.running_status(c) for c in pod.spec.containers]
            self.set_status(
                pod,
                phase="Running",
                initialized=True,
                ready=True,
                init_statuses=init_statuses,
                statuses=statuses,
            )
            results: dict[int, tuple[int, str]] = {}
            threads = []
            for i, c in enumerate(pod.spec.containers):

                def target(i: int = i, c: client.V1Container = c) -> None:
                    results[i] = self.run_container(run, pod, c, vols, pod_dir)

                t = threading.Thread(target=target, daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
            for i, c in enumerate(pod.spec.containers):
                code, tail = results.get(i, (137, ""))
                statuses[i] = self.terminated_status(c, statuses[i], code, tail)
            failed = any(results.get(i, (1, ""))[0] != 0 for i in range(len(pod.spec.containers)))
            self.finish(pod, run, init_statuses, statuses, failed=failed)
        except PodError as e:
            LOG.error("%s/%s cannot run: %s", ns, name, e.message)
            self.fail_pod(pod, e.reason, e.message)
        except Exception as e:
            LOG.exception("%s/%s: runner error", ns, name)
            self.fail_pod(pod, "TestbedRunnerError", f"pod runner error: {e}")

    # ------------------------------------------------------------------ status
    def waiting_status(self, c: client.V1Container) -> dict[str, Any]:
        return {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": {"reason": "PodInitializing"}},
        }

    def running_status(self, c: client.V1Container) -> dict[str, Any]:
        return {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "containerID": f"testbed://{c.name}",
            "state": {"running": {"startedAt": now()}},
        }

    def terminated_status(
        self, c: client.V1Container, prev: dict[str, Any], code: int, tail: str
    ) -> dict[str, Any]:
        started = (prev.get("state", {}).get("running") or {}).get("startedAt") or now()
        term = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": now(),
            "containerID": f"testbed://{c.name}",
        }
        if code != 0 and tail:
            term["message"] = tail[-4000:]
        return {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "containerID": f"testbed://{c.name}",
            "state": {"terminated": term},
        }

    def set_status(
        self,
        pod: client.V1Pod,
        *,
        phase: str,
        initialized: bool,
        ready: bool,
        init_statuses: list[dict[str, Any]] | None,
        statuses: list[dict[str, Any]] | None,
        start: bool = False,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        t = now()

        def cond(kind: str, ok: bool, why: str | None = None) -> dict[str, Any]:
            c = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": t,
            }
            if why and not ok:
                c["reason"] = why
            return c

        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [
                cond("PodScheduled", True),
                cond("Initialized", initialized, "ContainersNotInitialized"),
                cond("ContainersReady", ready, "ContainersNotReady"),
                cond("Ready", ready, "ContainersNotReady"),
            ],
        }
        # like the kubelet, keep the conditions others own (DisruptionTarget, set by an eviction or a
        # preemption, is what a Job's podFailurePolicy reads): a merge patch replaces the whole list
        status["conditions"] += self.foreign_conditions(pod, {c["type"] for c in status["conditions"]})
        if start:
            status["startTime"] = t
            status["hostIP"] = "127.0.0.1"
            status["hostIPs"] = [{"ip": "127.0.0.1"}]
        if init_statuses is not None:
            status["initContainerStatuses"] = init_statuses
        if statuses is not None:
            status["containerStatuses"] = statuses
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        try:
            self.core.patch_namespaced_pod_status(
                pod.metadata.name,
                pod.metadata.namespace,
                {"status": status},
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            if e.status != 404:
                LOG.warning(
                    "%s/%s: status update failed: %s", pod.metadata.namespace, pod.metadata.name, e.reason
                )

    def foreign_conditions(self, pod: client.V1Pod, managed: set[str]) -> list[dict[str, Any]]:
        try:
            current = self.core.read_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace)
        except ApiException:
            return []
        conditions = (current.status and current.status.conditions) or []
        return [
            self.core.api_client.sanitize_for_serialization(c) for c in conditions if c.type not in managed
        ]

    def finish(
        self,
        pod: client.V1Pod,
        run: PodRun,
        init_statuses: list[dict[str, Any]],
        statuses: list[dict[str, Any]],
        failed: bool,
    ) -> None:
        phase = "Failed" if failed else "Succeeded"
        self.set_status(
            pod, phase=phase, initialized=True, ready=False, init_statuses=init_statuses, statuses=statuses
        )
        LOG.info("%s/%s %s", run.namespace, run.name, phase)

    def fail_pod(self, pod: client.V1Pod, reason: str, message: str) -> None:
        statuses = []
        for c in pod.spec.containers:
            statuses.append(
                {
                    "name": c.name,
                    "image": c.image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {
                        "terminated": {
                            "exitCode": 128,
                            "reason": reason,
                            "message": message,
                            "startedAt": now(),
                            "finishedAt": now(),
                        }
                    },
                }
            )
        self.set_status(
            pod,
            phase="Failed",
            initialized=False,
            ready=False,
            init_statuses=None,
            statuses=statuses,
            start=True,
            reason=reason,
            message=message,
        )
        self.annotate(pod, {LOG_TAIL_ANNOTATION: f"[testbed pod runner] {reason}: {message}\n"})

    def annotate(self, pod: client.V1Pod, ann: dict[str, str]) -> None:
        try:
            self.core.patch_namespaced_pod(
                pod.metadata.name,
                pod.metadata.namespace,
                {"metadata": {"annotations": ann}},
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            if e.status != 404:
                LOG.warning("annotate %s/%s failed: %s", pod.metadata.namespace, pod.metadata.name, e.reason)

    # ------------------------------------------------------------------ volumes
    @staticmethod
    def _read_or_missing(kind: str, name: str, optional: bool, read: Any) -> Any:
        """read() the object; a missing one is None when optional, else the kubelet's config error."""
        try:
            return read()
        except ApiException as e:
            if e.status == 404:
                if optional:
                    return None
                raise PodError("CreateContainerConfigError", f'{kind} "{name}" not found') from e
            raise

    def read_cm(self, ns: str, name: str, optional: bool) -> dict[str, bytes] | None:
        cm = self._read_or_missing(
            "configmap", name, optional, lambda: self.core.read_namespaced_config_map(name, ns)
        )
        if cm is None:
            return None
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
        return data

    def read_secret(self, ns: str, name: str, optional: bool) -> dict[str, bytes] | None:
        sec = self._read_or_missing(
            "secret", name, optional, lambda: self.core.read_namespaced_secret(name, ns)
        )
        if sec is None:
            return None
        return {k: base64.b64decode(v) for k, v in (sec.data or {}).items()}

    def write_items(
        self,
        target: Path,
        data: dict[str, bytes],
        items: list[Any] | None,
        what: str,
        optional: bool,
    ) -> None:
        target.mkdir(parents=True, exist_ok=True)
        if items:
            for it in items:
                if it.key not in data:
                    if optional:
                        continue
                    raise PodError("CreateContainerConfigError", f"{what}: key {it.key!r} not found")
                self.write_file(target / it.path, data[it.key])
        else:
            for k, v in data.items():
                self.write_file(target / k, v)

    def write_file(self, path: Path, content: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)

    def field_value(self, pod: client.V1Pod, field_path: str) -> str:
        md = pod.metadata
        simple = {
            "metadata.name": md.name,
            "metadata.namespace": md.namespace,
            "metadata.uid": md.uid,
            "spec.nodeName": pod.spec.node_name,
            "spec.serviceAccountName": pod.spec.service_account_name or "default",
            "status.hostIP": "127.0.0.1",
            "status.podIP": "127.0.0.1",
            "status.podIPs": "127.0.0.1",
            "status.hostIPs": "127.0.0.1",
        }
        if field_path in simple:
            return simple[field_path] or ""
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", field_path)
        if m:
            d = (md.labels if m.group(1) == "labels" else md.annotations) or {}
            return d.get(m.group(2), "")
        if field_path in ("metadata.labels", "metadata.annotations"):
            d = (md.labels if field_path == "metadata.labels" else md.annotations) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
        raise PodError("CreateContainerConfigError", f"unsupported fieldRef {field_path!r}")

    def resource_value(
        self,
        pod: client.V1Pod,
        container_name: str | None,
        resource: str,
        divisor: str | None,
        default_container: client.V1Container,
    ) -> str:
        c = default_container
        if container_name:
            c = next(
                (
                    x
                    for x in pod.spec.containers + (pod.spec.init_containers or [])
                    if x.name == container_name
                ),
                c,
            )
        kind, _, res = resource.partition(".")
        rr = c.resources
        values = (rr.limits if kind == "limits" else rr.requests) if rr else None
        raw = (values or {}).get(res)
        if raw is None and kind == "limits":
            node_alloc = self.core.read_node(pod.spec.node_name).status.allocatable or {}
            raw = node_alloc.get(res, "0")
        if raw is None:
            raw = "0"
        value = parse_quantity(raw) / parse_quantity(divisor or "1")
        return str(math.ceil(value))

    def materialise_volumes(self, pod: client.V1Pod, pod_dir: Path) -> dict[str, Path]:
        ns = pod.metadata.namespace
        out: dict[str, Path] = {}
        for v in pod.spec.volumes or []:
            d = pod_dir / "volumes" / v.name
            if v.persistent_volume_claim:
                out[v.name] = self.claim_dir(ns, v.persistent_volume_claim.claim_name)
                continue
            if v.config_map:
                opt = bool(v.config_map.optional)
                data = self.read_cm(ns, v.config_map.name, opt) or {}
                self.write_items(d, data, v.config_map.items, f'configmap "{v.config_map.name}"', opt)
            elif v.secret:
                opt = bool(v.secret.optional)
                data = self.read_secret(ns, v.secret.secret_name, opt) or {}
                self.write_items(d, data, v.secret.items, f'secret "{v.secret.secret_name}"', opt)
                for f in d.rglob("*"):
                    if f.is_file():
                        f.chmod(0o600)
            elif v.empty_dir is not None:
                d.mkdir(parents=True, exist_ok=True)
            else:
                # what the pods it runs (the convert pod) mount is above; anything else would be imitated
                # untested, so the pod fails as a kubelet's does on a volume it cannot mount
                raise PodError(
                    "FailedMount",
                    f"volume {v.name!r}: the testbed's pod runner mounts persistentVolumeClaim, configMap, "
                    "secret and emptyDir volumes only",
                )
            out[v.name] = d
        return out

    def claim_dir(self, ns: str, claim: str) -> Path:
        try:
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, ns)
        except ApiException as e:
            if e.status == 404:
                raise PodError("FailedMount", f'persistentvolumeclaim "{claim}" not found') from e
            raise
        if pvc.status.phase != "Bound" or not pvc.spec.volume_name:
            raise PodError(
                "FailedMount", f'persistentvolumeclaim "{claim}" is not bound (phase {pvc.status.phase})'
            )
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        if pv.spec.host_path:
            p = Path(pv.spec.host_path.path)
        elif pv.spec.local:
            p = Path(pv.spec.local.path)
        else:
            # e.g. an FSx for Lustre CSI volume: no such hardware here; a local dir per PV stands in.
            p = self.s.work_dir / "pv" / pv.metadata.name
        p.mkdir(parents=True, exist_ok=True)
        return p

    # ------------------------------------------------------------------ env and paths
    def container_env(self, pod: client.V1Pod, c: client.V1Container) -> dict[str, str]:
        ns = pod.metadata.namespace
        env: dict[str, str] = {}
        for ef in c.env_from or []:
            prefix = ef.prefix or ""
            if ef.config_map_ref:
                data = self.read_cm(ns, ef.config_map_ref.name, bool(ef.config_map_ref.optional)) or {}
            elif ef.secret_ref:
                data = self.read_secret(ns, ef.secret_ref.name, bool(ef.secret_ref.optional)) or {}
            else:
                continue
            for k, v in data.items():
                env[prefix + k] = v.decode(errors="replace")
        for e in c.env or []:
            if e.value_from is None:
                env[e.name] = expand_vars(e.value or "", env)
                continue
            vf = e.value_from
            if vf.field_ref:
                env[e.name] = self.field_value(pod, vf.field_ref.field_path)
            elif vf.resource_field_ref:
                r = vf.resource_field_ref
                env[e.name] = self.resource_value(pod, r.container_name, r.resource, r.divisor, c)
            elif vf.config_map_key_ref:
                ref = vf.config_map_key_ref
                data = self.read_cm(ns, ref.name, bool(ref.optional))
                if data is None or ref.key not in data:
                    if ref.optional:
                        continue
                    raise PodError(
                        "CreateContainerConfigError",
                        f"couldn't find key {ref.key} in ConfigMap {ns}/{ref.name}",
                    )
                env[e.name] = data[ref.key].decode(errors="replace")
            elif vf.secret_key_ref:
                ref = vf.secret_key_ref
                data = self.read_secret(ns, ref.name, bool(ref.optional))
                if data is None or ref.key not in data:
                    if ref.optional:
                        continue
                    raise PodError(
                        "CreateContainerConfigError", f"couldn't find key {ref.key} in Secret {ns}/{ref.name}"
                    )
                env[e.name] = data[ref.key].decode(errors="replace")
        return env

    def mounts(
        self, pod: client.V1Pod, c: client.V1Container, vols: dict[str, Path]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(mapped, bound) as (mount path, local dir) pairs: a claim is bound at its mount path in the
        container's mount namespace, so the run spec's storage paths resolve as in a pod; the other volumes
        (ConfigMaps, emptyDirs) and the image paths of ``--path-map`` are mapped in the command and env."""
        claims = {v.name for v in pod.spec.volumes or [] if v.persistent_volume_claim}
        mapped: list[tuple[str, str]] = []
        bound: list[tuple[str, str]] = []
        for m in c.volume_mounts or []:
            base = vols.get(m.name)
            if base is None:
                raise PodError(
                    "CreateContainerConfigError", f"volume {m.name!r} not found for mount {m.mount_path}"
                )
            local = base / m.sub_path if m.sub_path else base
            if m.sub_path:
                local.mkdir(parents=True, exist_ok=True)
            (bound if m.name in claims else mapped).append((m.mount_path.rstrip("/") or "/", str(local)))
        mapped += self.s.path_map
        mapped.sort(key=lambda p: len(p[0]), reverse=True)
        return mapped, bound

    @staticmethod
    def map_paths(value: str, pairs: list[tuple[str, str]]) -> str:
        """Rewrite each path that starts with a mount path (longest match wins, each occurrence once)."""
        table = {src: dst for src, dst in pairs if src != "/"}
        if not table:
            return value
        alts = "|".join(re.escape(s) for s in sorted(table, key=len, reverse=True))
        pattern = r"(?<![\w.\-/])(" + alts + r")(?=/|$|[\s:;,\"'=)\]}])"
        return re.sub(pattern, lambda m: table[m.group(1)], value)

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

    # ------------------------------------------------------------------ processes
    def run_container(
        self,
        run: PodRun,
        pod: client.V1Pod,
        c: client.V1Container,
        vols: dict[str, Path],
        pod_dir: Path,
    ) -> tuple[int, str]:
        ns, name = run.namespace, run.name
        pairs, bound = self.mounts(pod, c, vols)
        env = self.container_env(pod, c)
        env = {k: self.map_paths(v, pairs) for k, v in env.items()}
        home = pod_dir / "home" / c.name
        home.mkdir(parents=True, exist_ok=True)
        tmp = next((d for s, d in pairs if s == "/tmp"), None)
        api_host, _, api_port = self.s.api_server.removeprefix("https://").partition(":")
        base = {
            "PATH": f"{self.s.venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "HOSTNAME": name,
            "LANG": "C.UTF-8",
            "TMPDIR": tmp or str(home),
            "PYTHONUNBUFFERED": "1",
            "MILES_TESTBED": "1",
            # what the kubelet injects into every container for the `kubernetes` Service
            "KUBERNETES_SERVICE_HOST": api_host,
            "KUBERNETES_SERVICE_PORT": api_port,
            "KUBERNETES_SERVICE_PORT_HTTPS": api_port,
            "KUBERNETES_PORT": f"tcp://{api_host}:{api_port}",
        }
        base.update(env)
        if "PATH" in env:
            base["PATH"] = f"{self.s.venv_bin}:{env['PATH']}"
        argv = list(c.command or []) or list(self.s.default_entrypoint)
        argv += list(c.args or [])
        argv = [self.map_paths(expand_vars(a, base), pairs) for a in argv]
        if not argv:
            raise PodError(
                "CreateContainerError", f"container {c.name}: no command and no default entrypoint"
            )
        # The miles image carries the miles checkout at /root/miles: its containers see the stand-in there.
        binds = [(local, mount) for mount, local in bound]
        miles_image = bool(self.s.fake_miles) and not self.s.image_regex.search(c.image or "")
        if miles_image:
            binds.append((self.s.fake_miles, "/root/miles"))
            base["MILES_TESTBED_FAKE_MILES"] = self.s.fake_miles
        wrapper = in_mount_namespace(binds)
        cwd = self.map_paths(c.working_dir, pairs) if c.working_dir else str(home)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        log_path = pod_dir / f"{c.name}.log"
        cri_path = pod_dir / f"{c.name}.cri.log"
        self.register_logs(pod, pod_dir)
        LOG.info(
            "%s/%s[%s]: %s%s",
            ns,
            name,
            c.name,
            " ".join(argv),
            "".join(f" ({src} at {dst})" for src, dst in binds),
        )
        started = time.time()
        with open(log_path, "ab", buffering=0) as logf, open(cri_path, "ab", buffering=0) as crif:
            try:
                p = subprocess.Popen(
                    [*wrapper, *argv],
                    env=base,
                    cwd=cwd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    process_group=0,
                )
            except OSError as e:
                msg = f"[testbed pod runner] cannot start {argv[0]!r}: {e}\n".encode()
                logf.write(msg)
                crif.write(cri_line(msg))
                tail = self.tail(log_path)
                self.annotate(pod, {LOG_TAIL_ANNOTATION: tail, LOG_FILE_ANNOTATION: str(log_path)})
                return 128, tail
            run.procs.append(p)
            if run.deleted.is_set():
                self.kill(run)
            assert p.stdout is not None
            for line in iter(p.stdout.readline, b""):
                logf.write(line)
                crif.write(cri_line(line))
            code = p.wait()
        if code < 0:
            code = 128 - code
        tail = self.tail(log_path)
        self.annotate(pod, {LOG_TAIL_ANNOTATION: tail, LOG_FILE_ANNOTATION: str(log_path)})
        LOG.info("%s/%s[%s] exited %d", ns, name, c.name, code)
        self.journal(
            {
                "namespace": ns,
                "pod": name,
                "uid": run.uid,
                "container": c.name,
                "image": c.image,
                "argv": argv,
                "start": started,
                "end": time.time(),
                "exitCode": code,
                "labels": pod.metadata.labels or {},
                "log": str(log_path),
                "rootMiles": self.s.fake_miles if miles_image else None,
            }
        )
        return code, tail

    def journal(self, entry: dict[str, Any]) -> None:
        """One JSON line per finished container in <work-dir>/journal.jsonl (tests read the hook order)."""
        with self.lock, open(self.s.work_dir / "journal.jsonl", "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    @staticmethod
    def tail(path: Path) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - TAIL_BYTES))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def register_logs(self, pod: client.V1Pod, pod_dir: Path) -> None:
        """Point kwok's kubelet server at the container log files (CRI format) so `kubectl logs` (and Helm's
        hook-output-log-policy) can read them; one kwok Logs object per pod, owned by the pod."""
        containers = (pod.spec.init_containers or []) + pod.spec.containers
        for c in containers:
            (pod_dir / f"{c.name}.cri.log").touch()
            (pod_dir / f"{c.name}.log").touch()
        if not self.kwok_logs:
            return
        name = pod.metadata.name
        ns = pod.metadata.namespace
        logs = [
            {"containers": [c.name], "logsFile": str(pod_dir / f"{c.name}.cri.log"), "follow": False}
            for c in containers
        ]
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {
                "name": name,
                "namespace": ns,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod.metadata.uid}
                ],
            },
            "spec": {"logs": logs},
        }
        try:
            self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", ns, "logs", body)
        except ApiException as e:
            if e.status != 409:
                LOG.warning("%s/%s: kwok Logs object not created: %s", ns, name, e.reason)


def cri_line(line: bytes) -> bytes:
    """One line in the CRI container log format the kubelet (and kwok) serve: `<time> stdout F <msg>`."""
    ts = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
    if line.endswith(b"\n"):
        return ts + b" stdout F " + line
    return ts + b" stdout P " + line + b"\n"


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


def in_mount_namespace(binds: list[tuple[str, str]]) -> list[str]:
    """A command prefix running the command in a private mount namespace with each ``(local dir, mount
    point)`` of ``binds`` bound there (nothing when there is none)."""
    if not binds:
        return []
    mounts = " && ".join(f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}" for src, dst in binds)
    return ["unshare", "-m", "--propagation", "private", "--", "bash", "-c", mounts + ' && exec "$@"', "pod"]


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the testbed")
    ap.add_argument("--work-dir", required=True, type=Path, help="per-pod dirs, logs and the ready marker")
    ap.add_argument(
        "--image-regex", default="miles-hooks", help="run pods with a (init) container image matching this"
    )
    ap.add_argument(
        "--venv-bin", type=Path, default=root / ".venv" / "bin", help="first on PATH of every process"
    )
    ap.add_argument(
        "--path-map",
        action="append",
        default=[],
        metavar="IMAGE_PATH=LOCAL_PATH",
        help="map a path inside the image to a local one (repeatable); "
        "default: /opt/miles-hooks/pkg=<repo>/hooks/src",
    )
    ap.add_argument(
        "--default-entrypoint",
        default="miles-hooks",
        help="command for containers without `command` (the hooks image ENTRYPOINT), space-separated",
    )
    ap.add_argument(
        "--ray-temp-dir", default="", help="the local Ray workers' temp dirs go under it; empty: no workers"
    )
    ap.add_argument(
        "--ray-worker-venv-bin",
        type=Path,
        default=root / ".tools" / "ray-worker-venv" / "bin",
        help="bin dir of the Python the local Ray workers run (same Ray and Python as the head's image)",
    )
    ap.add_argument(
        "--node-netns", default="", help="network namespace of the real node (under /var/run/netns)"
    )
    ap.add_argument("--node-ip", default="", help="the real node's address in it (the workers' node IP)")
    ap.add_argument("--max-ray-workers", type=int, default=8, help="local Ray worker nodes at most")
    ap.add_argument(
        "--ray-worker-cpus", type=int, default=2, help="CPUs a local Ray worker advertises at most"
    )
    ap.add_argument(
        "--ray-worker-port-base", type=int, default=12000, help="first port of the workers' ranges"
    )
    ap.add_argument(
        "--fake-miles",
        default="",
        help="dir bind-mounted at /root/miles (mount namespace) for the Ray workers and for hook-pod "
        "containers of another image than the hooks image (the convert pod's miles image)",
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

    try:
        regex = re.compile(args.image_regex)
    except re.error as e:
        print(f"pod_runner: --image-regex {args.image_regex!r} is not a valid regex: {e}", file=sys.stderr)
        return 2
    if not Path(args.kubeconfig).is_file():
        print(f"pod_runner: kubeconfig {args.kubeconfig} not found (is the testbed up?)", file=sys.stderr)
        return 2
    path_map = []
    for pm in args.path_map or [f"/opt/miles-hooks/pkg={root / 'hooks' / 'src'}"]:
        src, sep, dst = pm.partition("=")
        if not sep or not src.startswith("/") or not dst:
            print(f"pod_runner: --path-map {pm!r}: expected /image/path=/local/path", file=sys.stderr)
            return 2
        path_map.append((src.rstrip("/"), dst))
    storage_map = []
    for sm in args.storage_map:
        src, sep, dst = sm.partition("=")
        if not sep or not src.startswith("/") or not dst.startswith("/"):
            print(f"pod_runner: --storage-map {sm!r}: expected /mount/path=/local/dir", file=sys.stderr)
            return 2
        storage_map.append((src.rstrip("/"), dst))
    kc = yaml.safe_load(Path(args.kubeconfig).read_text())
    cluster = kc["clusters"][0]["cluster"]
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / "ready").unlink(missing_ok=True)
    s = Settings(
        kubeconfig=args.kubeconfig,
        work_dir=args.work_dir.resolve(),
        image_regex=regex,
        venv_bin=args.venv_bin,
        path_map=path_map,
        api_server=cluster["server"],
        default_entrypoint=args.default_entrypoint.split(),
        storage_map=storage_map,
    )
    if args.fake_miles:
        s.fake_miles = str(Path(args.fake_miles).resolve())
    if args.ray_temp_dir:
        if args.max_ray_workers < 0 or args.ray_worker_cpus < 1:
            print("pod_runner: --max-ray-workers must be >= 0 and --ray-worker-cpus >= 1", file=sys.stderr)
            return 2
        if not args.node_netns or not args.node_ip:
            print(
                "pod_runner: local Ray workers need --node-netns and --node-ip (the real node)",
                file=sys.stderr,
            )
            return 2
        if not (args.ray_worker_venv_bin / "ray").is_file():
            print(
                f"pod_runner: no ray in {args.ray_worker_venv_bin}: run `ci/install-tools.sh rayworker`",
                file=sys.stderr,
            )
            return 2
        s.ray_workers = RayWorkers(
            node_netns=args.node_netns,
            node_ip=args.node_ip,
            temp_dir=args.ray_temp_dir,
            # the worker pod's volumes as its container would see them: the shared storage and the miles
            # checkout the image carries (FAKE_MILES=0: none, and the submitted jobs fail)
            binds=[
                *((local, mount) for mount, local in s.storage_map),
                *([(s.fake_miles, "/root/miles")] if s.fake_miles else []),
            ],
            work_dir=s.work_dir,
            venv_bin=args.ray_worker_venv_bin,
            cpus=args.ray_worker_cpus,
            limit=args.max_ray_workers,
            port_base=args.ray_worker_port_base,
        )
    runner = Runner(s)

    def stop(_sig: int, _frm: Any) -> None:
        runner.shutdown()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
