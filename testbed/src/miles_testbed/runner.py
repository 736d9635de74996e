"""The pod watch of the testbed's pod runner, and the API reads and writes its parts need.

Every pod event goes to the Ray workers (``ray_workers``: a local Ray worker node per simulated worker pod)
and to the hook journal (``journal``: what the real node's hook containers ran).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from miles_testbed.journal import HookPodJournal
from miles_testbed.kubelet_env import EnvError, container_env
from miles_testbed.ray_workers import RayWorkers, WorkerSettings

LOG = logging.getLogger("pod-runner")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_status(pod: Any, at: str) -> dict[str, Any]:
    """The status kwok's pod-ready stage would write, for a Ray worker pod whose local node runs."""
    conditions = [
        {"type": k, "status": "True", "lastProbeTime": None, "lastTransitionTime": at}
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
            "state": {"running": {"startedAt": at}},
        }
        for c in pod.spec.containers
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": statuses,
            "startTime": at,
        }
    }


@dataclass(frozen=True)
class RunnerSettings:
    kubeconfig: str
    work_dir: Path  # the ready marker, the journal, the logs
    hooks_image: re.Pattern[str]  # pods with a container of the hooks image, on the real node, are journaled


class Runner:
    def __init__(self, s: RunnerSettings, workers: WorkerSettings) -> None:
        self.s = s
        config.load_kube_config(config_file=s.kubeconfig)
        self.core = client.CoreV1Api()
        self.discovery = client.DiscoveryV1Api()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.kwok_nodes: dict[str, bool] = {}
        self.ray_workers = RayWorkers(workers, self)
        self.node_journal = HookPodJournal(
            self.core, s.work_dir / "node-logs", s.hooks_image, self.is_kwok_node, self.journal
        )

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
                listed: Any = self.core.list_pod_for_all_namespaces(_request_timeout=90)
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

    def reconcile(self, pods: list[Any]) -> None:
        """Stop the Ray workers of pods that are gone, then treat every listed pod as a fresh event."""
        self.ray_workers.stop_absent({p.metadata.uid for p in pods})
        for pod in pods:
            self.on_event("ADDED", pod)

    def on_event(self, kind: str, pod: Any) -> None:
        self.ray_workers.on_event(kind, pod)
        self.node_journal.on_event(kind, pod)

    def shutdown(self) -> None:
        self.stopping.set()
        self.ray_workers.stop_all()

    # ------------------------------------------------------------------ ray_workers.Cluster
    def is_kwok_node(self, name: str) -> bool:
        if name not in self.kwok_nodes:
            try:
                node: Any = self.core.read_node(name)
            except ApiException:
                return False
            annotations = node.metadata.annotations or {}
            self.kwok_nodes[name] = annotations.get(KWOK_NODE_ANNOTATION) == "fake"
        return self.kwok_nodes[name]

    def pod_exists(self, pod: Any) -> bool:
        """The pod, this very one (same UID), is still there and not being deleted."""
        try:
            live: Any = self.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return bool(live.metadata.uid == pod.metadata.uid and live.metadata.deletion_timestamp is None)

    def mark_ray_pod_ready(self, pod: Any) -> None:
        try:
            self.core.patch_namespaced_pod_status(
                pod.metadata.name,
                pod.metadata.namespace,
                ready_status(pod, now()),
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            if e.status != 404:
                LOG.warning(
                    "%s/%s: status update failed: %s", pod.metadata.namespace, pod.metadata.name, e.reason
                )

    def config_data(self, kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
        """A ConfigMap's or Secret's data, decoded; None for a missing optional one."""
        try:
            if kind == "Secret":
                raw = self.core.read_namespaced_secret(name, namespace).data or {}
                return {k: base64.b64decode(v).decode(errors="replace") for k, v in raw.items()}
            return dict(self.core.read_namespaced_config_map(name, namespace).data or {})
        except ApiException as e:
            if e.status == 404 and optional:
                return None
            if e.status == 404:
                raise EnvError(f'{kind.lower()} "{name}" not found') from e
            raise

    def container_env(self, pod: Any, container: Any) -> dict[str, str]:
        return container_env(pod.metadata.namespace, container, self.config_data)

    def endpoint_address(self, namespace: str, service: str) -> str | None:
        """The first ready endpoint address of the Service (None when it has none, or is not there)."""
        try:
            slices = self.discovery.list_namespaced_endpoint_slice(
                namespace, label_selector=f"kubernetes.io/service-name={service}"
            ).items
        except ApiException as e:
            LOG.warning("%s/%s: cannot read its EndpointSlices (%s)", namespace, service, e.reason)
            return None
        for endpoint_slice in slices:
            for ep in endpoint_slice.endpoints or []:
                if ep.addresses and (ep.conditions is None or ep.conditions.ready is not False):
                    return str(ep.addresses[0])
        return None

    # ------------------------------------------------------------------ the journal's sink
    def journal(self, entry: dict[str, Any]) -> None:
        """One JSON line per finished hook container in <work-dir>/journal.jsonl (the tests read it)."""
        with self.lock, open(self.s.work_dir / "journal.jsonl", "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
