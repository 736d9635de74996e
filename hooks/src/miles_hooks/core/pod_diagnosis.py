"""Why the pods of a RayCluster are not Ready, in words a person can act on: the scheduler's message
(capacity, taints, selectors), image pulls, crashes, failing probes, and the pod's Warning events.

Shared by wait-ready (its timeout message) and status (`helm test`: a run waiting for capacity shows the
scheduler's reason there).
"""

from __future__ import annotations

from typing import Any

from miles_hooks.core import kube
from miles_hooks.core.runspec import RunSpec

CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
BAD_WAITING = (
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "RunContainerError",
)


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


def diagnose_cluster_pods(api: kube.Api, spec: RunSpec) -> list[str]:
    """Why each pod of the release's RayCluster is not Ready (its own conditions and Warning events), read
    from the API; a line saying the read failed instead of an exception."""
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
