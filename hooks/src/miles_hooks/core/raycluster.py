"""The RayCluster's health: readiness as its Kubernetes object reports it, the GCS as the dashboard does.

Shared by ``wait-ready`` (which waits for both), ``status`` (which reports both) and ``verify`` (which
needs a healthy GCS before it probes the workers).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from miles_hooks.core import kube
from miles_hooks.core.runspec import RunSpec


def gcs_health(dashboard_url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """(healthy, detail) from the dashboard's ``/api/gcs_healthz`` endpoint."""
    url = dashboard_url.rstrip("/") + "/api/gcs_healthz"
    if not url.startswith(("http://", "https://")):
        return False, f"dashboard URL {dashboard_url!r} is not http(s)"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - scheme checked above
            body = resp.read(256).decode("utf-8", "replace").strip()
            return (resp.status == 200 and body == "success"), f"HTTP {resp.status}: {body}"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code} from {url}"
    except (urllib.error.URLError, OSError) as exc:
        return False, f"{url} unreachable: {getattr(exc, 'reason', exc)}"


def gcs_health_settled(dashboard_url: str, within: float = 20.0) -> tuple[bool, str]:
    """gcs_health, retried for up to ``within`` seconds: a loaded dashboard answers 503 now and then."""
    deadline = time.monotonic() + within
    delay = 0.5
    while True:
        healthy, detail = gcs_health(dashboard_url)
        if healthy or time.monotonic() + delay > deadline:
            return healthy, detail
        time.sleep(delay)
        delay = min(delay * 2, 4.0)


def _condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SUSPENDED_CONDITIONS = ("RayClusterSuspended", "RayClusterSuspending")


def admission_wait(obj: dict[str, Any] | None) -> str:
    """Why the RayCluster waits for a queue to admit it, or "" when it does not: it is suspended
    (``spec.suspend``, or KubeRay's suspended/suspending condition) and carries Kueue's queue label, so
    Kueue resumes it once the LocalQueue admits it (and suspends it again when it is preempted). A
    suspended cluster without the label is not waiting for anyone: that is cluster_readiness's case."""
    if obj is None:
        return ""
    queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
    suspended = (obj.get("spec") or {}).get("suspend") is True or any(
        (_condition(obj, ctype) or {}).get("status") == "True" for ctype in SUSPENDED_CONDITIONS
    )
    if not (queue and suspended):
        return ""
    return (
        f"waiting for admission: suspended until Kueue's LocalQueue {queue!r} admits it "
        f"(kubectl get workloads -n {(obj.get('metadata') or {}).get('namespace')}); "
        "the readiness timeout starts once it is admitted"
    )


def cluster_readiness(obj: dict[str, Any] | None, expected_workers: int) -> tuple[bool, list[str]]:
    """(ready, reasons it is not) for a RayCluster object as the API returns it."""
    if obj is None:
        return False, ["RayCluster not found"]
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    reasons: list[str] = []
    gen, observed = meta.get("generation"), status.get("observedGeneration")
    if gen is not None and observed != gen:
        reasons.append(
            f"operator has not reconciled generation {gen} yet (status.observedGeneration={observed})"
        )
    conditions = status.get("conditions") or []
    if conditions:
        for ctype in ("HeadPodReady", "RayClusterProvisioned"):
            cond = _condition(obj, ctype)
            if not cond or cond.get("status") != "True":
                words = " ".join(str(cond.get(k)) for k in ("reason", "message") if cond and cond.get(k))
                detail = f": {words}" if words else ""
                reasons.append(f"condition {ctype} is not True{detail}")
        failure = _condition(obj, "RayClusterReplicaFailure")
        if failure and failure.get("status") == "True":
            reasons.append(
                f"RayClusterReplicaFailure: {failure.get('reason')} {failure.get('message') or ''}".rstrip()
            )
    elif status.get("state") != "ready":
        reasons.append(f"status.state is {status.get('state')!r}, expected 'ready'")
    if (obj.get("spec") or {}).get("suspend") is True:
        reasons.append(
            f"spec.suspend is true and no {QUEUE_LABEL} label: nothing will resume it; set "
            "scheduling.kueueQueue, or resume it (spec.suspend: false)"
        )
    desired = status.get("desiredWorkerReplicas")
    ready = status.get("readyWorkerReplicas", 0) or 0
    if desired is None:
        reasons.append("status.desiredWorkerReplicas not reported yet")
    else:
        if desired != expected_workers:
            reasons.append(f"desiredWorkerReplicas is {desired}, the run spec expects {expected_workers}")
        if ready < desired:
            reasons.append(f"{ready} of {desired} worker(s) Ready")
    return not reasons, reasons


def get_cluster(api: kube.Api, spec: RunSpec) -> dict[str, Any] | None:
    """The release's RayCluster as the API returns it, or None when it does not exist."""
    name = spec.raw["rayCluster"]["name"]
    obj = kube.optional(
        f"reading raycluster/{name}",
        lambda: api.custom().get_namespaced_custom_object(
            kube.RAY_GROUP, kube.RAY_VERSION, spec.namespace, kube.RAY_PLURAL, name
        ),
    )
    return obj if isinstance(obj, dict) else None


def read_cluster_health(spec: RunSpec) -> dict[str, Any]:
    """``{"ready": bool, "reasons": [...]}`` of the release's RayCluster (connects to the API)."""
    api = kube.connect()
    ready, reasons = cluster_readiness(get_cluster(api, spec), int(spec.raw["topology"]["workerReplicas"]))
    return {"ready": ready, "reasons": reasons}
