"""wait-ready: watch the RayCluster until it is current and fully Ready, then its pods, then the GCS.

Two watches drive the wait, so the number of API requests does not grow with the number of nodes or
with the time waited; it is logged as ``api_requests``. First the RayCluster (field-selected by name):
``status.observedGeneration == metadata.generation``, ``HeadPodReady`` and ``RayClusterProvisioned``
True (or ``state: ready`` on operators without conditions), and ``readyWorkerReplicas ==
desiredWorkerReplicas == topology.workerReplicas`` (RayClusterProvisioned stays True after the first
time, so the replica counts are what an upgrade waits on). Then its pods (label ``ray.io/cluster``):
one head and ``workerReplicas`` workers Ready among the pods not being deleted, because after a
template change with upgradeStrategy ``crd`` the cluster keeps its name and KubeRay's status can still
count the old pods while they terminate. Then ``<dashboard>/api/gcs_healthz`` must answer ``success``.
On timeout (exit 3) the pods of the cluster that are not Ready are listed with their Pending reasons and
Warning events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from miles_hooks.core import kube, log
from miles_hooks.core.errors import HookTimeout
from miles_hooks.core.pod_diagnosis import CLUSTER_LABEL, NODE_TYPE_LABEL, diagnose_cluster_pods, pod_is_ready
from miles_hooks.core.raycluster import admission_wait, cluster_readiness, gcs_health
from miles_hooks.core.runspec import RunSpec

LOG = log.get("wait-ready")


# --------------------------------------------------------------------------- pure


def current_pods_readiness(pods: list[dict[str, Any]], expected_workers: int) -> tuple[bool, list[str]]:
    """(ready, reasons it is not) for the pods of one RayCluster: one head and ``expected_workers``
    workers, all Ready, counting only pods that are not being deleted. With upgradeStrategy crd KubeRay
    keeps the cluster's name and replaces every pod after a template change; the status it reports in
    between may still count the old pods, which stay Ready until they are gone."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    by_type: dict[str, list[dict[str, Any]]] = {"head": [], "worker": []}
    for pod in live:
        node_type = ((pod.get("metadata") or {}).get("labels") or {}).get(NODE_TYPE_LABEL)
        by_type.setdefault(str(node_type), []).append(pod)
    heads, workers = by_type["head"], by_type["worker"]
    reasons: list[str] = []
    if not heads:
        reasons.append("no head pod yet")
    elif not any(pod_is_ready(p) for p in heads):
        reasons.append("the head pod is not Ready")
    ready_workers = sum(1 for p in workers if pod_is_ready(p))
    if ready_workers != expected_workers or len(workers) != expected_workers:
        reasons.append(f"{ready_workers} of {expected_workers} worker pod(s) Ready ({len(workers)} exist)")
    if reasons and len(live) < len(pods):
        reasons.append(f"{len(pods) - len(live)} pod(s) of an earlier template still terminating")
    return not reasons, reasons


# --------------------------------------------------------------------------- API side


Judge = Callable[[list[dict[str, Any]]], tuple[bool, list[str]]]


@dataclass
class ReadinessClock:
    """checks.waitReadyTimeoutSeconds, not counting the time a queue holds the cluster back: while
    held, the time left stays where it was, so a run Kueue admits hours later still gets its whole
    readiness timeout (the hook Job's activeDeadlineSeconds and Helm's --timeout still bound it)."""

    limit: float
    now: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    held_since: float | None = field(default=None, init=False)
    held_before: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.started = self.now()

    def hold(self, held: bool) -> None:
        t = self.now()
        if held and self.held_since is None:
            self.held_since = t
        elif not held and self.held_since is not None:
            self.held_before += t - self.held_since
            self.held_since = None

    def held(self) -> float:
        """Seconds held so far."""
        ongoing = self.now() - self.held_since if self.held_since is not None else 0.0
        return self.held_before + ongoing

    def remaining(self) -> float:
        return self.started + self.held() + self.limit - self.now()


def _watch_until(
    api: kube.Api,
    what: str,
    list_call: Callable[..., Any],
    list_args: tuple[Any, ...],
    selector: dict[str, str],
    judge: Judge,
    clock: ReadinessClock,
) -> list[str]:
    """Keep the objects one watch selects (``list_call`` with ``selector``) and block until ``judge``
    says they are ready: returns [] then, else the last reasons at the deadline. A watch without a
    resource version replays every existing object as ADDED, so a fresh (or, after 410 Gone, renewed)
    watch starts from an empty set; later watches resume from the last resource version seen."""
    # kubernetes is imported on use: the CLI that imports this step also runs convert in the miles image
    from kubernetes import watch  # noqa: PLC0415

    objects: dict[str, dict[str, Any]] = {}
    reasons = judge([])[1]
    last_logged: list[str] = []
    resource_version: str | None = None
    while True:
        remaining = int(clock.remaining())
        if remaining <= 0:
            return reasons
        w = watch.Watch()
        kwargs: dict[str, Any] = {**selector, "timeout_seconds": remaining}
        if resource_version:
            kwargs["resource_version"] = resource_version
        else:
            objects.clear()
        try:
            with kube.api_call(f"watching {what}"):
                for event in w.stream(list_call, *list_args, **kwargs):
                    kind, obj = event.get("type"), event.get("object")
                    if kind == "ERROR":
                        resource_version = None  # 410 Gone: list again
                        break
                    if obj is None:
                        continue
                    body = obj if isinstance(obj, dict) else api.to_dict(obj)
                    meta = body.get("metadata") or {}
                    resource_version = meta.get("resourceVersion") or resource_version
                    key = str(meta.get("name"))
                    if kind == "DELETED":
                        objects.pop(key, None)
                    else:
                        objects[key] = body
                    ready, reasons = judge(list(objects.values()))
                    if ready:
                        w.stop()
                        return []
                    if reasons != last_logged:
                        LOG.info(f"waiting for the {what}", extra={"fields": {"reasons": reasons}})
                        last_logged = reasons
                    if clock.remaining() <= 0:
                        w.stop()
                        return reasons
        except kube.Gone:  # the resource version expired: list again
            resource_version = None


def watch_until_ready(api: kube.Api, spec: RunSpec, clock: ReadinessClock) -> list[str]:
    """Block on a watch of the RayCluster; returns [] when ready, else the last reasons at the deadline.
    While a queue holds the cluster back (admission_wait) the clock is held."""
    name = spec.raw["rayCluster"]["name"]
    expected = int(spec.raw["topology"]["workerReplicas"])

    def judge(found: list[dict[str, Any]]) -> tuple[bool, list[str]]:
        if not found:
            clock.hold(False)
            return False, [f"RayCluster {name} not found in namespace {spec.namespace}"]
        waiting = admission_wait(found[0])
        clock.hold(bool(waiting))
        if waiting:
            return False, [waiting]
        return cluster_readiness(found[0], expected)

    return _watch_until(
        api,
        f"RayCluster {name}",
        api.custom().list_namespaced_custom_object,
        (kube.RAY_GROUP, kube.RAY_VERSION, spec.namespace, kube.RAY_PLURAL),
        {"field_selector": f"metadata.name={name}"},
        judge,
        clock,
    )


def watch_pods_until_current(api: kube.Api, spec: RunSpec, clock: ReadinessClock) -> list[str]:
    """Block on a watch of the cluster's pods until its current pods are Ready (current_pods_readiness);
    returns [] then, else the last reasons at the deadline."""
    name = spec.raw["rayCluster"]["name"]
    expected = int(spec.raw["topology"]["workerReplicas"])
    return _watch_until(
        api,
        f"pods of RayCluster {name}",
        api.core().list_namespaced_pod,
        (spec.namespace,),
        {"label_selector": f"{CLUSTER_LABEL}={name}"},
        lambda pods: current_pods_readiness(pods, expected),
        clock,
    )


def wait_gcs(dashboard_url: str, deadline: float) -> str:
    delay = 0.5
    while True:
        healthy, detail = gcs_health(dashboard_url)
        if healthy:
            return detail
        if time.monotonic() + delay >= deadline:
            raise HookTimeout(
                f"Ray GCS at {dashboard_url} not healthy before the deadline: {detail}; check the "
                "head pod's logs (and the run spec's rayCluster.dashboardUrl)"
            )
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def run(spec: RunSpec, timeout: float | None = None) -> dict[str, Any]:
    raw = spec.raw
    limit = float(timeout if timeout is not None else raw["checks"]["waitReadyTimeoutSeconds"])
    started = time.monotonic()
    clock = ReadinessClock(limit)
    requests = 0
    if raw["rayCluster"]["enabled"]:
        api = kube.connect()
        reasons = watch_until_ready(api, spec, clock) or watch_pods_until_current(api, spec, clock)
        held = f" (not counting {clock.held():.0f}s waiting for admission)" if clock.held() >= 1 else ""
        if reasons:
            details = reasons + diagnose_cluster_pods(api, spec)
            LOG.info("api usage", extra={"fields": {"api_requests": api.requests}})
            raise HookTimeout(
                f"RayCluster {raw['rayCluster']['name']} not ready after {limit:.0f}s "
                f"(checks.waitReadyTimeoutSeconds){held}:",
                details,
            )
        requests = api.requests
        LOG.info(
            "RayCluster ready",
            extra={
                "fields": {
                    "raycluster": raw["rayCluster"]["name"],
                    "seconds": round(time.monotonic() - started, 1),
                    "admission_wait_seconds": round(clock.held(), 1),
                    "api_requests": requests,
                }
            },
        )
    else:
        LOG.info("mode singleNode: waiting for the pod-local Ray only")
    detail = wait_gcs(spec.dashboard_url, time.monotonic() + clock.remaining())
    LOG.info("Ray GCS healthy", extra={"fields": {"detail": detail}})
    return {"ready": True, "seconds": round(time.monotonic() - started, 2), "apiRequests": requests}
