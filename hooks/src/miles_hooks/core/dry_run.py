"""Server-side dry run of the release's objects: what the API server, its admission plugins and webhooks
and a CRD's schema would refuse, found before anything long runs.

A pod template is only turned into Pods later, by its controller (the KubeRay operator, the Job and
Deployment controllers), and the admission plugins that judge Pods (Pod Security, quotas, priority
classes, the ServiceAccount plugin) see it only then; a CRD's schema does not even apply Kubernetes' Pod
rules (toleration shapes, requests above limits, quantities, names). So each pod template of a
RayCluster, RayJob (its cluster and its submitter), Job, CronJob or Deployment is also sent as a Pod of its
own. Every request is a server-side apply with dryRun=All: nothing is stored, and an object the
release already holds (an upgrade) is checked as the update it would get.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from miles_hooks.core import kube, pod_security
from miles_hooks.core.errors import BadInput

FIELD_MANAGER = "miles-preflight"
# controllers whose pod template becomes Pods only later, past the admission plugins that judge Pods
WORKLOADS = ("Job", "Deployment")
# RBAC's denial; any other 403 is an admission plugin refusing the object (Pod Security, quota, priority)
_RBAC_DENIAL = re.compile(r"cannot (create|patch) resource")


@dataclass(frozen=True)
class Candidate:
    """One object to send, and where it came from (what a user's message names)."""

    subject: str  # kind/name, or the RayCluster template it was built from
    body: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    subject: str
    refused: str | None = None  # the API server's reason, naming the field
    unchecked: str | None = None  # why the object could not be checked (no permission, kind not served)


def parse_manifests(text: str, source: str) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise BadInput(f"{source}: expected multi-document YAML, found a parse error: {exc}") from exc
    objects = [d for d in docs if d is not None]
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
            raise BadInput(
                f"{source}: document {i + 1}: expected an object with apiVersion and kind, found {obj!r:.80}"
            )
    return objects


def _subject(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj.get('metadata', {}).get('name', '?')}"


def _pod_templates(obj: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name suffix, where in the object, template) of each pod template a controller turns into Pods."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "RayJob":
        cluster = _ray_cluster_templates(spec.get("rayClusterSpec") or {}, "spec.rayClusterSpec.")
        submitter = [("submitter", "spec.submitterPodTemplate", spec.get("submitterPodTemplate") or {})]
        return cluster + (submitter if spec.get("submitterPodTemplate") else [])
    if obj["kind"] == "RayCluster":
        return _ray_cluster_templates(spec, "spec.")
    if obj["kind"] in WORKLOADS:
        return [("pod", "spec.template", spec.get("template") or {})]
    if obj["kind"] == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return [("pod", "spec.jobTemplate.spec.template", job.get("template") or {})]
    return []


def _ray_cluster_templates(spec: dict[str, Any], where: str) -> list[tuple[str, str, dict[str, Any]]]:
    head = [("head", f"{where}headGroupSpec.template", (spec.get("headGroupSpec") or {}).get("template"))]
    workers = [
        (f"worker-{i}", f"{where}workerGroupSpecs[{i}].template", g.get("template"))
        for i, g in enumerate(spec.get("workerGroupSpecs") or [])
    ]
    return [(s, w, t or {}) for s, w, t in head + workers]


def _template_pods(obj: dict[str, Any], created_accounts: set[str]) -> Iterator[Candidate]:
    name = obj.get("metadata", {}).get("name", obj["kind"].lower())
    for suffix, where, template in _pod_templates(obj):
        meta = dict(template.get("metadata") or {})
        meta["name"] = f"{name}-dry-run-{suffix}"[:63].rstrip("-")
        pod_spec = dict(template.get("spec") or {})
        if pod_spec.get("serviceAccountName") in created_accounts:
            # the release creates that account only after the pre-install hooks, and the ServiceAccount
            # admission plugin refuses a Pod whose account does not exist yet: check the Pod as "default"
            pod_spec["serviceAccountName"] = "default"
        yield Candidate(
            f"{obj['kind']}/{name} {where} (as a Pod)",
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec},
        )


def candidates(objects: list[dict[str, Any]]) -> list[Candidate]:
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    out: list[Candidate] = []
    for obj in objects:
        out.append(Candidate(_subject(obj), obj))
        out.extend(_template_pods(obj, accounts))
    return out


def _refusal(exc: Any) -> str:
    return kube.server_message(exc) or f"HTTP {exc.status}: {exc.reason}"


_POD_SECURITY = re.compile(r'violates PodSecurity "(?P<level>[a-z]+):')


def pod_security_hint(reason: str) -> str:
    """What to change when Pod Security admission refuses a pod: the namespace label that set the level."""
    m = _POD_SECURITY.search(reason)
    return "" if m is None else pod_security.enforce_hint(m.group("level"))


# Server-side apply checks the object against the CRD's schema while building its typed patch and answers a
# field the schema lacks with HTTP 500 (not 422): a refusal of the object all the same, never a server fault.
_UNDECLARED_FIELD = re.compile(r"failed to create typed patch object|field not declared in schema")
# fields older KubeRay CRDs lack that the chart renders for a newer operator (rayCluster.operatorVersion)
# or on request, by their last path element (a RayCluster's spec or a RayJob's spec.rayClusterSpec): the
# release that added each and the values that asked for it
_NEWER_KUBERAY_FIELDS = {
    "upgradeStrategy": (
        "KubeRay 1.6",
        "rayCluster.operatorVersion to the operator's version (below 1.6 the chart renders nameHash), "
        "or set rayCluster.upgradeStrategy.method: nameHash",
    ),
    "authOptions": (
        "KubeRay 1.6, with its secretName",
        "rayCluster.operatorVersion to the operator's version (below 1.6 the chart leaves the token to "
        "the Ray pods' env), or set secrets.rayAuth.key: token",
    ),
}
_FIELD_PATH = re.compile(r"(\.[\w.]+): field not declared in schema")


def schema_hint(reason: str) -> str:
    """What to change when a CRD served here does not declare a field the chart rendered."""
    if not _UNDECLARED_FIELD.search(reason):
        return ""
    path = _FIELD_PATH.search(reason)
    elements = path.group(1).split(".") if path else []
    for field, (since, value) in _NEWER_KUBERAY_FIELDS.items():
        if field in elements:
            return (
                f"the CRD served here has no {path.group(1) if path else field} ({since} added it): upgrade "
                f"the KubeRay operator and its CRDs, or change {value}"
            )
    return (
        "the CRD served here does not declare that field: its operator's CRDs are older than the "
        "chart's (Chart.yaml miles.dev/kuberay-versions names the KubeRay versions it is tested with)"
    )


def send_all(api: kube.Api, batch: list[Candidate], namespace: str) -> list[Outcome]:
    """One dry-run apply per candidate. Refusals (400/409/422 and webhook denials) are outcomes, not
    exceptions; anything else (the API server unreachable, 5xx) raises :class:`kube.ApiError`."""
    # kubernetes is imported on use (as in core.kube): the convert pod's image does not ship it
    from kubernetes.dynamic import DynamicClient  # noqa: PLC0415

    with kube.api_call("API discovery for the dry run"):
        resources = DynamicClient(api.client).resources  # type: ignore[no-untyped-call]
    return [_send(resources, c, namespace) for c in batch]


def _send(resources: Any, candidate: Candidate, namespace: str) -> Outcome:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
    from kubernetes.dynamic.exceptions import ResourceNotFoundError  # noqa: PLC0415

    body = candidate.body
    try:
        resource = resources.get(api_version=body["apiVersion"], kind=body["kind"])
    except ResourceNotFoundError:
        return Outcome(candidate.subject, unchecked=f"{body['apiVersion']} {body['kind']} is not served here")
    try:
        resource.server_side_apply(
            body=body,
            name=body["metadata"]["name"],
            namespace=namespace if resource.namespaced else None,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            dry_run="All",
        )
    except ApiException as exc:
        reason = _refusal(exc)
        if exc.status == 401 or (exc.status == 403 and _RBAC_DENIAL.search(reason)):
            return Outcome(candidate.subject, unchecked=f"the hooks' account may not apply it: {reason}")
        if "does not support dry run" in reason:
            return Outcome(candidate.subject, unchecked=reason)
        if exc.status in (400, 403, 404, 409, 422) or _UNDECLARED_FIELD.search(reason):
            hint = pod_security_hint(reason) or schema_hint(reason)
            return Outcome(candidate.subject, refused=f"{reason}; {hint}" if hint else reason)
        raise kube.translate(f"dry-running {candidate.subject}", exc) from exc
    return Outcome(candidate.subject)
