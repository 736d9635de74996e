"""cleanup: the pre-delete hook. Nothing a hook phase started outlives ``helm uninstall``.

Helm deletes a hook Job only when its phase succeeds (``hook-succeeded``): a failed or timed-out install
leaves its hook Jobs behind, and a convert Job still running after Helm's ``--timeout`` keeps asking for a
GPU for up to its deadline. Uninstall does not touch hook objects. This step deletes every Job and pod
of the release that a hook created (``app.kubernetes.io/component: hook-*``), itself excepted, and waits
on a watch until their pods are gone (not those another controller owns: see ``is_ours``), so the GPU is
free when ``helm uninstall`` returns. It deletes the release's RayClusters too: Helm deletes what the last
revision's manifest lists, and a failed upgrade that renamed the cluster lists a name that never existed.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from miles_hooks.core import kube, log
from miles_hooks.core.errors import HookTimeout
from miles_hooks.core.runspec import RunSpec

LOG = log.get("cleanup")

INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
OWN_COMPONENT = "hook-cleanup"
DEFAULT_TIMEOUT = 240.0


def is_hook_object(obj: dict[str, Any]) -> bool:
    """A Job or pod a hook phase created (the steps' Jobs and their pods, the helm test pods), not this
    step's own."""
    component = str(((obj.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL, ""))
    return component.startswith("hook-") and component != OWN_COMPONENT


def run(spec: RunSpec, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    # kubernetes is imported on use: the CLI that imports this step also runs convert in the miles image
    from kubernetes import client  # noqa: PLC0415

    ns, release = spec.namespace, spec.release
    selector = f"{INSTANCE_LABEL}={release}"
    api = kube.connect()
    batch, core = client.BatchV1Api(api.client), api.core()
    with kube.api_call(f"listing the Jobs of release {release} in namespace {ns}"):
        jobs = [api.to_dict(j) for j in batch.list_namespaced_job(ns, label_selector=selector).items]
    left_jobs = [j for j in jobs if is_hook_object(j)]
    for job in left_jobs:
        status = job.get("status") or {}
        state = "running" if status.get("active") else "failed" if status.get("failed") else "finished"
        LOG.info(
            "deleting a hook Job the release left behind",
            extra={"fields": {"job": job["metadata"]["name"], "state": state}},
        )
        name = str(job["metadata"]["name"])
        kube.optional(
            f"deleting Job {name}",
            functools.partial(batch.delete_namespaced_job, name, ns, propagation_policy="Background"),
        )
    clusters = _delete_rayclusters(api, ns, selector)
    deleted_jobs = {str(j["metadata"]["name"]) for j in left_jobs}
    pods, _ = _list_pods(api, core, ns, selector)
    ours = {name for name, pod in pods.items() if is_ours(pod, deleted_jobs)}
    for name in sorted(ours):
        if not pods[name]["metadata"].get("ownerReferences"):
            LOG.info("deleting a hook pod the release left behind", extra={"fields": {"pod": name}})
            kube.optional(f"deleting pod {name}", functools.partial(core.delete_namespaced_pod, name, ns))
    wait_gone(api, core, ns, selector, ours, time.monotonic() + timeout)
    deleted = sorted(str(j["metadata"]["name"]) for j in left_jobs)
    result = {"jobsDeleted": deleted, "rayClustersDeleted": clusters, "apiRequests": api.requests}
    LOG.info("no hook Job or pod of the release is left", extra={"fields": result})
    return result


def is_ours(pod: dict[str, Any], deleted_jobs: set[str]) -> bool:
    """A hook pod this step answers for: one with no owner (a helm test pod), or one of a Job it deleted.
    A pod another controller owns (the RayJob's submitter, whose Job KubeRay owns) goes with its owner,
    which Helm deletes only after the pre-delete hooks: waiting for it here would wait out the timeout."""
    owners = pod["metadata"].get("ownerReferences") or []
    return not owners or any(o.get("kind") == "Job" and o.get("name") in deleted_jobs for o in owners)


def _delete_rayclusters(api: kube.Api, ns: str, selector: str) -> list[str]:
    """Every RayCluster of the release: Helm deletes only those of the last revision's manifest, and a failed
    upgrade that renamed the cluster (upgradeStrategy nameHash) left the running one out of it, GPUs and
    all. (A RayJob's clusters are owned by the RayJob, which Helm deletes.)"""
    custom = api.custom()
    listed = kube.optional(
        f"listing the RayClusters of {selector}",
        functools.partial(
            custom.list_namespaced_custom_object,
            kube.RAY_GROUP,
            kube.RAY_VERSION,
            ns,
            kube.RAY_PLURAL,
            label_selector=selector,
        ),
    )
    names = sorted(
        str(rc["metadata"]["name"])
        for rc in (listed or {}).get("items", [])
        if not rc["metadata"].get("ownerReferences")
    )
    for name in names:
        LOG.info("deleting a RayCluster of the release", extra={"fields": {"raycluster": name}})
        kube.optional(
            f"deleting RayCluster {name}",
            functools.partial(
                custom.delete_namespaced_custom_object,
                kube.RAY_GROUP,
                kube.RAY_VERSION,
                ns,
                kube.RAY_PLURAL,
                name,
            ),
        )
    return names


def _list_pods(api: kube.Api, core: Any, ns: str, selector: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The release's hook pods by name, and the list's resource version (where a watch starts)."""
    with kube.api_call(f"listing the pods labelled {selector} in namespace {ns}"):
        listed = core.list_namespaced_pod(ns, label_selector=selector)
    pods = (api.to_dict(i) for i in listed.items)
    found = {str(p["metadata"]["name"]): p for p in pods if is_hook_object(p)}
    return found, str(listed.metadata.resource_version)


def wait_gone(api: kube.Api, core: Any, ns: str, selector: str, names: set[str], deadline: float) -> None:
    """Block on a watch of the release's pods until none of the pods ``names`` is left (HookTimeout at
    ``deadline``)."""
    # kubernetes is imported on use (see run)
    from kubernetes import watch  # noqa: PLC0415

    while True:
        listed, version = _list_pods(api, core, ns, selector)
        pods = {name: pod for name, pod in listed.items() if name in names}
        if not pods:
            return
        remaining = int(deadline - time.monotonic())
        if remaining <= 0:
            raise HookTimeout(
                f"hook pod(s) {', '.join(sorted(pods))} still exist; expected them gone. `kubectl -n {ns} "
                f"get pods -l {selector}` shows why (a finalizer, or a node that does not answer)"
            )
        LOG.info("waiting for the hook pods to go", extra={"fields": {"pods": sorted(pods)}})
        w = watch.Watch()
        try:
            with kube.api_call(f"watching the pods labelled {selector}"):
                for event in w.stream(
                    core.list_namespaced_pod,
                    ns,
                    label_selector=selector,
                    resource_version=version,
                    timeout_seconds=min(remaining, 30),
                ):
                    body = api.to_dict(event["object"])
                    if event["type"] == "DELETED":
                        pods.pop(str(body["metadata"]["name"]), None)
                    if not pods:
                        w.stop()
                        return
        except kube.Gone:  # the resource version expired: list again
            continue
