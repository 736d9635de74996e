"""What the hook pods on the real node ran, for the tests, `make demo` and the benchmark to read afterwards.

The real node's kubelet runs the chart's hook Jobs and helm-test pods as containers, and Helm deletes each
one that succeeded (``hook-succeeded``) within a second of its end, its logs with it. This journal watches
them through the API server (the pod runner's watch hands it every pod event): it follows each container's
log while the container runs (into ``<work-dir>/node-logs/``), and when the kubelet reports the container
terminated it writes an entry (the runner appends it to ``<work-dir>/journal.jsonl``): namespace, pod, uid,
container, image, argv (the container's command and args), start (when this journal first saw the pod, by
this machine's clock: the kubelet's own times have whole seconds only), end (when it saw the container
terminated), exitCode, reason, labels, log, node. It observes and never changes a pod.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

LOG = logging.getLogger("node-journal")
# how long an entry waits for its container's log stream to end once the container terminated
LOG_DRAIN_SECONDS = 10.0


@dataclass
class Followed:
    """One container's log being copied to ``path`` by ``thread``."""

    path: Path
    thread: threading.Thread


@dataclass
class HookPodJournal:
    core: client.CoreV1Api
    log_dir: Path
    image_regex: re.Pattern[str]
    # whether a node is simulated (kwok's): no container runs there, so there is nothing to journal
    is_simulated_node: Callable[[str], bool]
    write: Callable[[dict[str, Any]], None]
    first_seen: dict[str, float] = field(default_factory=dict)
    followed: dict[tuple[str, str, int], Followed] = field(default_factory=dict)
    journaled: set[tuple[str, str, int]] = field(default_factory=set)

    def watches(self, pod: Any) -> bool:
        """A pod with a hooks-image container, bound to a node the kubelet runs (not a simulated one)."""
        spec = pod.spec
        if not spec or not spec.node_name:
            return False
        images = [c.image or "" for c in [*(spec.init_containers or []), *spec.containers]]
        return any(self.image_regex.search(i) for i in images) and not self.is_simulated_node(spec.node_name)

    def on_event(self, kind: str, pod: Any) -> None:
        if kind == "DELETED" or not self.watches(pod):
            return
        uid = pod.metadata.uid
        self.first_seen.setdefault(uid, time.time())
        status = pod.status
        containers = {c.name: c for c in [*(pod.spec.init_containers or []), *pod.spec.containers]}
        for st in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
            key = (uid, st.name, st.restart_count or 0)
            if (st.state.running or st.state.terminated) and key not in self.followed:
                self.follow(pod, st.name, key)
            if st.state.terminated and key not in self.journaled:
                self.journaled.add(key)
                self.record(pod, containers[st.name], st.state.terminated, key)

    def follow(self, pod: Any, container: str, key: tuple[str, str, int]) -> None:
        meta = pod.metadata
        path = self.log_dir / f"{meta.namespace}_{meta.name}_{meta.uid}" / f"{container}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        thread = threading.Thread(
            target=self.copy_log, args=(meta.namespace, meta.name, container, path), daemon=True
        )
        self.followed[key] = Followed(path, thread)
        thread.start()

    def copy_log(self, namespace: str, name: str, container: str, path: Path) -> None:
        """The container's log from its start until it ends (the kubelet closes the stream then)."""
        try:
            stream: Any = self.core.read_namespaced_pod_log(
                name, namespace, container=container, follow=True, _preload_content=False
            )
            with open(path, "wb") as out:
                for chunk in stream.stream(4096):
                    out.write(chunk)
                    out.flush()
        except (ApiException, OSError) as exc:
            LOG.warning("log of %s/%s[%s] not followed to its end: %s", namespace, name, container, exc)

    def record(self, pod: Any, c: Any, terminated: Any, key: tuple[str, str, int]) -> None:
        ended = time.time()
        followed = self.followed[key]
        threading.Thread(
            target=self.write_when_drained,
            args=(followed, self.entry(pod, c, terminated, followed.path, ended)),
            daemon=True,
        ).start()

    def entry(self, pod: Any, c: Any, terminated: Any, log: Path, ended: float) -> dict[str, Any]:
        meta = pod.metadata
        return {
            "namespace": meta.namespace,
            "pod": meta.name,
            "uid": meta.uid,
            "container": c.name,
            "image": c.image,
            "argv": [*(c.command or []), *(c.args or [])],
            "start": self.first_seen[meta.uid],
            "end": ended,
            "exitCode": terminated.exit_code,
            "reason": terminated.reason,
            "labels": meta.labels or {},
            "log": str(log),
            "node": pod.spec.node_name,
        }

    def write_when_drained(self, followed: Followed, entry: dict[str, Any]) -> None:
        followed.thread.join(LOG_DRAIN_SECONDS)
        LOG.info("%(namespace)s/%(pod)s[%(container)s] exited %(exitCode)d", entry)
        self.write(entry)
