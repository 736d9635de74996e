"""wait-ready: watch the RayCluster until it is current and fully Ready, then check the GCS.

One watch (``list`` + ``watch`` on the single object, field-selected by name) drives the wait, so the
number of API requests does not grow with the number of nodes or with the time waited; it is logged as
``api_requests``. Ready means: ``status.observedGeneration == metadata.generation``, ``HeadPodReady`` and
``RayClusterProvisioned`` True (or ``state: ready`` on operators without conditions), and
``readyWorkerReplicas == desiredWorkerReplicas == topology.workerReplicas`` (RayClusterProvisioned stays
True after the first time, so the replica counts are what an upgrade waits on). Then
``<dashboard>/api/gcs_healthz`` must answer ``success``. On timeout (exit 3) the pods of the cluster
that are not Ready are listed with their Pending reasons and Warning events.
"""

from __future__ import annotations

import time
from typing import Any

from miles_hooks.core import kube, log
from miles_hooks.core.errors import HookTimeout
from miles_hooks.core.raycluster import cluster_readiness, gcs_health
from miles_hooks.core.runspec import RunSpec

LOG = log.get("wait-ready")

CLUSTER_LABEL = "ray.io/cluster"
BAD_WAITING = (
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "RunContainerError",
)


# --------------------------------------------------------------------------- pure


def pod_reasons(pod: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """Why one pod is not Ready: scheduling, image pulls, crashes, probes, plus its Warning events."""
    status = pod.get("status") or {}
    reasons: list[str] = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            reasons.append(f"unschedulable: {cond.get('message') or cond.get('reason')}")
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            state = cs.get("state") or {}
            waiting = state.get("waiting") or {}
            if waiting.get("reason") in BAD_WAITING or (waiting and waiting.get("message")):
                reasons.append(
                    f"container {cs.get('name')}: {waiting.get('reason')}: "
                    f"{(waiting.get('message') or '').strip()[:300]}".rstrip(": ")
                )
            term = state.get("terminated") or {}
            if term and term.get("exitCode", 0) != 0:
                reasons.append(
                    f"container {cs.get('name')} exited {term.get('exitCode')} ({term.get('reason')})"
                )
    if not reasons and status.get("phase") == "Running":
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready and ready.get("status") != "True":
            reasons.append("running but not Ready (readiness probe failing)")
    if not reasons and status.get("phase") == "Pending":
        reasons.append("Pending")
    name = (pod.get("metadata") or {}).get("name")
    seen: set[str] = set()
    mine = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("name") == name and e.get("type") == "Warning"
    ]
    mine.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    for ev in reversed(mine):
        message = (ev.get("message") or "").strip()[:300]
        text = f"event {ev.get('reason')}: {message}"
        if any(message and message in r for r in reasons):
            continue  # the scheduler's condition already says it
        if text not in seen and len(seen) < 3:
            seen.add(text)
            reasons.append(text)
    return reasons


def pod_is_ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def diagnose(pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[str]:
    out = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        if pod_is_ready(pod):
            continue
        name = (pod.get("metadata") or {}).get("name")
        out.append(f"pod {name}: " + "; ".join(pod_reasons(pod, events) or ["not Ready"]))
    return out


# --------------------------------------------------------------------------- API side


def watch_until_ready(api: kube.Api, spec: RunSpec, deadline: float) -> list[str]:
    """Block on a watch of the RayCluster; returns [] when ready, else the last reasons at the deadline."""
    # kubernetes is imported on use: the CLI that imports this step also runs convert in the miles image
    from kubernetes import watch  # noqa: PLC0415

    name = spec.raw["rayCluster"]["name"]
    expected = int(spec.raw["topology"]["workerReplicas"])
    reasons = [f"RayCluster {name} not found in namespace {spec.namespace}"]
    last_logged: list[str] = []
    resource_version: str | None = None
    while True:
        remaining = int(deadline - time.monotonic())
        if remaining <= 0:
            return reasons
        w = watch.Watch()
        kwargs: dict[str, Any] = {"field_selector": f"metadata.name={name}", "timeout_seconds": remaining}
        if resource_version:
            kwargs["resource_version"] = resource_version
        try:
            with kube.api_call(f"watching raycluster/{name}"):
                for event in w.stream(
                    api.custom().list_namespaced_custom_object,
                    kube.RAY_GROUP,
                    kube.RAY_VERSION,
                    spec.namespace,
                    kube.RAY_PLURAL,
                    **kwargs,
                ):
                    kind, obj = event.get("type"), event.get("object")
                    if kind == "ERROR":
                        resource_version = None  # 410 Gone: re-list
                        break
                    if not isinstance(obj, dict):
                        continue
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    ready, reasons = cluster_readiness(None if kind == "DELETED" else obj, expected)
                    if ready:
                        w.stop()
                        return []
                    if reasons != last_logged:
                        LOG.info(
                            "waiting for the RayCluster",
                            extra={"fields": {"raycluster": name, "reasons": reasons}},
                        )
                        last_logged = reasons
                    if time.monotonic() >= deadline:
                        w.stop()
                        return reasons
        except kube.Gone:  # the resource version expired: list again
            resource_version = None


def wait_gcs(dashboard_url: str, deadline: float) -> str:
    delay = 0.5
    while True:
        healthy, detail = gcs_health(dashboard_url)
        if healthy:
            return detail
        if time.monotonic() + delay >= deadline:
            raise HookTimeout(
                f"Ray GCS at {dashboard_url} not healthy before the deadline: {detail}; check the "
                "head pod's logs (and rayCluster.dashboardUrl)"
            )
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _diagnose_via_api(api: kube.Api, spec: RunSpec) -> list[str]:
    core = api.core()
    name = spec.raw["rayCluster"]["name"]
    try:
        pods = [
            api.to_dict(p)
            for p in core.list_namespaced_pod(spec.namespace, label_selector=f"{CLUSTER_LABEL}={name}").items
        ]
        events = [
            api.to_dict(e)
            for e in core.list_namespaced_event(spec.namespace, field_selector="type=Warning").items
        ]
    except Exception as exc:
        return [f"(could not read pods/events for diagnosis: {str(exc).splitlines()[0]})"]
    if not pods:
        return [f"no pods with label {CLUSTER_LABEL}={name} exist (is the KubeRay operator running?)"]
    return diagnose(pods, events) or ["all pods Ready; the RayCluster status has not caught up"]


def run(spec: RunSpec, timeout: float | None = None) -> dict[str, Any]:
    raw = spec.raw
    limit = float(timeout if timeout is not None else raw["checks"]["waitReadyTimeoutSeconds"])
    started = time.monotonic()
    deadline = started + limit
    requests = 0
    if raw["rayCluster"]["enabled"]:
        api = kube.connect()
        reasons = watch_until_ready(api, spec, deadline)
        if reasons:
            details = reasons + _diagnose_via_api(api, spec)
            LOG.info("api usage", extra={"fields": {"api_requests": api.requests}})
            raise HookTimeout(
                f"RayCluster {raw['rayCluster']['name']} not ready after {limit:.0f}s "
                "(checks.waitReadyTimeoutSeconds):",
                details,
            )
        requests = api.requests
        LOG.info(
            "RayCluster ready",
            extra={
                "fields": {
                    "raycluster": raw["rayCluster"]["name"],
                    "seconds": round(time.monotonic() - started, 1),
                    "api_requests": requests,
                }
            },
        )
    else:
        LOG.info("rayCluster.enabled is false (singleNode): waiting for the pod-local Ray only")
    detail = wait_gcs(spec.dashboard_url, deadline)
    LOG.info("Ray GCS healthy", extra={"fields": {"detail": detail}})
    return {"ready": True, "seconds": round(time.monotonic() - started, 2), "apiRequests": requests}
