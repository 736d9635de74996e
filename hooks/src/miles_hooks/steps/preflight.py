"""preflight: will this release work on this cluster? Fails fast, naming the value to change.

Pure functions (node matching, capacity, storage, secrets) take plain dicts in the shape the
Kubernetes API returns; ``run`` gathers those objects through the API and reports every finding at once.
Checks: the ``rayclusters.ray.io`` CRD is served at v1 (and a KubeRay operator pod is seen, when the
cluster-scope read is granted); enough schedulable nodes match the worker selector and tolerations, each
with allocatable GPUs >= GPUs per worker and an EFA request equal to its allocatable EFA count; a node
exists for the head, and one for the GPU convert pod when it runs; the storage claim is bound (or created
by the chart) and ReadWriteMany; each referenced Secret and key exists; a ``prometheus`` Service is
neutralised by ``PROMETHEUS_PORT``; the API server accepts every object of the release that is still to
come (a server-side dry run, see ``core.dry_run``; without it, the namespace's Pod Security label, see
``core.pod_security``). The values rules (topology arithmetic included) live in the chart alone:
preflight reads the derived numbers from the run spec and checks only what needs the live cluster.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miles_hooks.core import (
    capacity,
    dry_run,
    image_pull,
    kube,
    kuberay_operator,
    log,
    pod_security,
    probe_pods,
    ray_token,
)
from miles_hooks.core.errors import CheckFailed
from miles_hooks.core.fsutil import human_bytes
from miles_hooks.core.quantity import parse_count, parse_exact
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import NodePoolSpec, RawSpec, TolerationSpec

LOG = log.get("preflight")
MANIFESTS_FILE = "manifests.yaml"  # beside run.json in the run-hook ConfigMap

ERROR, WARNING, INFO = "error", "warning", "info"
HYPERPOD_HEALTH = "sagemaker.amazonaws.com/node-health-status"
OPERATOR_SELECTORS = (
    "app.kubernetes.io/name=kuberay-operator",
    "app.kubernetes.io/component=kuberay-operator",
)


@dataclass(frozen=True)
class Finding:
    level: str
    subject: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "subject": self.subject, "message": self.message}

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"


# --------------------------------------------------------------------------- nodes (pure)


def toleration_matches(toleration: TolerationSpec, taint: dict[str, Any]) -> bool:
    """Kubernetes toleration semantics for one taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(node: dict[str, Any], tolerations: list[TolerationSpec]) -> list[dict[str, Any]]:
    taints = (node.get("spec") or {}).get("taints") or []
    return [
        t
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not any(toleration_matches(tol, t) for tol in tolerations)
    ]


def node_name(node: dict[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", "?"))


def selector_matches(node: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def unschedulable_reasons(node: dict[str, Any], pool: NodePoolSpec) -> list[str]:
    """Why a node matching the pool's selector still cannot take its pods (empty: it can)."""
    reasons = []
    if (node.get("spec") or {}).get("unschedulable"):
        reasons.append("cordoned (spec.unschedulable)")
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        reasons.append("not Ready")
    health = ((node.get("metadata") or {}).get("labels") or {}).get(HYPERPOD_HEALTH)
    if health is not None and health != "Schedulable":
        reasons.append(f"{HYPERPOD_HEALTH}={health}")
    for taint in untolerated_taints(node, pool.get("tolerations") or []):
        value = f"={taint['value']}" if taint.get("value") else ""
        reasons.append(f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated")
    return reasons


def allocatable(node: dict[str, Any], resource: str) -> int:
    return parse_count(((node.get("status") or {}).get("allocatable") or {}).get(resource))


def capacity_reasons(
    node: dict[str, Any], gpu_resource: str, gpus: int, efa_resource: str, efa: int
) -> list[str]:
    """GPU and EFA fit of one worker pod on the node. A partial EFA request is a reason, not a warning."""
    reasons = []
    have_gpu = allocatable(node, gpu_resource)
    if have_gpu < gpus:
        reasons.append(f"allocatable {gpu_resource} is {have_gpu}, a worker needs {gpus}")
    have_efa = allocatable(node, efa_resource)
    if efa > 0:
        if have_efa < efa:
            reasons.append(f"allocatable {efa_resource} is {have_efa}, a worker requests {efa}")
        elif have_efa > efa:
            reasons.append(
                f"partial EFA request: a worker requests {efa} of the node's {have_efa} {efa_resource}"
            )
    return reasons


def evaluate_workers(nodes: list[dict[str, Any]], raw: RawSpec) -> list[Finding]:
    pool = raw["rayCluster"]["worker"]
    chk = raw["checks"]["nodes"]
    topo = raw["topology"]
    need = int(topo["workerReplicas"])
    gpus = int(topo["gpusPerWorker"])
    efa = int(chk["efaPerNode"])
    selector = pool.get("nodeSelector") or {}
    matching = [n for n in nodes if selector_matches(n, selector)]
    usable: list[str] = []
    rejected: list[str] = []
    findings: list[Finding] = []
    partial: dict[int, list[str]] = {}
    for node in matching:
        reasons = unschedulable_reasons(node, pool) + capacity_reasons(
            node, chk["gpuResource"], gpus, chk["efaResource"], efa
        )
        have_efa = allocatable(node, chk["efaResource"])
        if efa > 0 and have_efa > efa:
            partial.setdefault(have_efa, []).append(node_name(node))
        if reasons:
            rejected.append(f"{node_name(node)}: " + "; ".join(reasons))
        else:
            usable.append(node_name(node))
            if efa == 0 and have_efa > 0:
                findings.append(
                    Finding(
                        WARNING,
                        f"node/{node_name(node)}",
                        f"EFA is off (gpuPods.efa.count=0) but the node has {have_efa} "
                        f"{chk['efaResource']}; inter-node NCCL will use TCP sockets",
                    )
                )
    for have, names in sorted(partial.items()):
        findings.append(
            Finding(
                ERROR,
                "gpuPods.efa.count",
                f"workers request {efa} {chk['efaResource']} but node(s) {', '.join(names[:5])} "
                f"have {have}: a partial EFA request passes all-reduce but fails point-to-point "
                f"('Unexpected number of remote rails'); set it to {have}",
            )
        )
    sel = json.dumps(selector, sort_keys=True)
    if len(usable) < need:
        detail = "; ".join(rejected[:10]) + (f"; and {len(rejected) - 10} more" if len(rejected) > 10 else "")
        findings.append(
            Finding(
                ERROR,
                "topology.actorNodes",
                f"need {need} schedulable worker node(s) matching nodeSelector {sel} with >= {gpus} "
                f"{chk['gpuResource']}"
                + (f" and exactly {efa} {chk['efaResource']}" if efa else "")
                + f"; found {len(usable)} usable of {len(matching)} matching (of {len(nodes)} nodes)"
                + (f": {detail}" if detail else "")
                + "; lower the node count (topology actor/rollout nodes) or fix the nodeSelector/tolerations",
            )
        )
    else:
        findings.append(
            Finding(
                INFO,
                "topology.actorNodes",
                f"{len(usable)} worker node(s) with the GPUs installed for {need} worker(s) (whether they "
                "are free: the capacity check): "
                + ", ".join(usable[:10])
                + (" ..." if len(usable) > 10 else ""),
            )
        )
    return findings


def can_run_on(subject: str, what: str, names: list[str]) -> Finding:
    others = f" and {len(names) - 1} other node(s)" if len(names) > 1 else ""
    return Finding(INFO, subject, f"{what} can run on {names[0]}{others}")


def evaluate_head(nodes: list[dict[str, Any]], raw: RawSpec) -> list[Finding]:
    pool = raw["rayCluster"]["head"]
    selector = pool.get("nodeSelector") or {}
    matching = [n for n in nodes if selector_matches(n, selector)]
    ok = [n for n in matching if not unschedulable_reasons(n, pool)]
    head_gpus = int(raw["rayCluster"]["headGpus"])
    if head_gpus:
        ok = [n for n in ok if allocatable(n, raw["checks"]["nodes"]["gpuResource"]) >= head_gpus]
    if ok:
        return [can_run_on("rayCluster.head", "head", [node_name(n) for n in ok])]
    why = "; ".join(
        f"{node_name(n)}: {', '.join(unschedulable_reasons(n, pool)) or 'too few GPUs'}" for n in matching[:5]
    )
    return [
        Finding(
            ERROR,
            "rayCluster.head",
            f"no schedulable node for the Ray head: nodeSelector {json.dumps(selector, sort_keys=True)} "
            f"matches {len(matching)} node(s)"
            + (f" ({why})" if why else "")
            + "; set the head's nodeSelector/tolerations to an existing CPU pool",
        )
    ]


def fit_pool(
    nodes: list[dict[str, Any]], pool: NodePoolSpec, wants: dict[str, str], who: str
) -> tuple[list[str], str, list[dict[str, Any]]]:
    """The nodes of ``pool`` that can take a pod asking ``wants`` (allocatable, not what is free): their
    names, why the others cannot (the first five), and the pool's nodes."""
    matching = [n for n in nodes if selector_matches(n, pool.get("nodeSelector") or {})]
    usable: list[str] = []
    rejected: list[str] = []
    for node in matching:
        reasons = unschedulable_reasons(node, pool)
        have = (node.get("status") or {}).get("allocatable") or {}
        for resource, want in wants.items():
            if parse_exact(have.get(resource)) < parse_exact(want):
                reasons.append(f"allocatable {resource} is {have.get(resource, 0)}, {who} asks {want}")
        (rejected if reasons else usable).append(
            node_name(node) + (f": {'; '.join(reasons)}" if reasons else "")
        )
    detail = "; ".join(rejected[:5]) + (f"; and {len(rejected) - 5} more" if len(rejected) > 5 else "")
    return usable, detail, matching


def evaluate_convert(nodes: list[dict[str, Any]], raw: RawSpec) -> list[Finding]:
    """A node for the GPU convert pod, when it runs in this phase: it selects the GPU pool's nodes (with
    hooks.convert's labels and tolerations added) and asks for nprocPerNode GPUs and its own CPU and
    memory, which a GPU worker's size does not cover. Without such a node its Job would wait, Pending,
    until its deadline (hours)."""
    convert = raw["convert"]
    if not convert["runsThisPhase"]:
        return []
    pool = convert["pool"]
    gpu_resource = raw["checks"]["nodes"]["gpuResource"]
    wants: dict[str, str] = {gpu_resource: str(convert["nprocPerNode"])}
    wants.update({k: v for k, v in convert["requests"].items() if k in ("cpu", "memory")})
    selector = pool.get("nodeSelector") or {}
    usable, detail, matching = fit_pool(nodes, pool, wants, "the convert pod")
    if usable:
        return [can_run_on("hooks.convert", "convert pod", usable)]
    asks = ", ".join(f"{want} {resource}" for resource, want in wants.items())
    return [
        Finding(
            ERROR,
            "hooks.convert",
            f"no node can take the convert pod: it asks {asks} (hooks.convert.nprocPerNode, "
            f"hooks.convert.resources.requests) on a schedulable node matching nodeSelector "
            f"{json.dumps(selector, sort_keys=True)}; found {len(matching)} matching of {len(nodes)} nodes"
            + (f": {detail}" if detail else "")
            + "; point hooks.convert.nodeSelector/tolerations (added to gpuPods') at GPU nodes that have it, "
            "or lower hooks.convert.resources.requests",
        )
    ]


def evaluate_export(nodes: list[dict[str, Any]], raw: RawSpec) -> list[Finding]:
    """A node for the export pod: it holds the whole model in host memory (its memory request), on the GPU
    pool's nodes with hooks.export's labels and tolerations added. Without one, every export Job would wait,
    Pending, until its deadline, and the run's end would publish no model: said now, before the run."""
    export = raw["export"]
    if not export["enabled"]:
        return []
    pool = export["pool"]
    wants = {k: v for k, v in export["requests"].items() if k in ("cpu", "memory")}
    selector = pool.get("nodeSelector") or {}
    usable, detail, matching = fit_pool(nodes, pool, wants, "the export pod")
    if usable:
        return [can_run_on("hooks.export", "export pod", usable)]
    asks = ", ".join(f"{want} {resource}" for resource, want in wants.items())
    return [
        Finding(
            ERROR,
            "hooks.export",
            f"no node can hold the export pod: it asks {asks} (the model's tensors twice in bf16, "
            f"model.parameterCount={raw['model']['parameterCount']} x 4 bytes, plus 8 GiB; or "
            f"hooks.export.resources.requests) on a schedulable node matching nodeSelector "
            f"{json.dumps(selector, sort_keys=True)}; found {len(matching)} matching of {len(nodes)} nodes"
            + (f": {detail}" if detail else "")
            + "; point hooks.export.nodeSelector/tolerations (added to gpuPods') at nodes with that memory, "
            "set a memory request in hooks.export.resources, or hooks.export.enabled=false",
        )
    ]


# --------------------------------------------------------------------------- spec-only checks (pure)


def image_findings(raw: RawSpec) -> list[Finding]:
    if raw["images"]["milesRollingTag"]:
        return [
            Finding(
                WARNING,
                "image.digest",
                f"{raw['images']['miles']} is a rolling tag: the Ray version and code can change under "
                "the release; pin a digest (image.digest) for reproducible runs",
            )
        ]
    return []


def crd_served(discovery: Any) -> bool:
    """Does the ``/apis/ray.io/v1`` discovery document list ``rayclusters``?"""
    if not isinstance(discovery, dict):
        return False
    return any(
        r.get("name") == "rayclusters" for r in discovery.get("resources") or [] if isinstance(r, dict)
    )


def pvc_findings(pvc: dict[str, Any] | None, raw: RawSpec) -> list[Finding]:
    st = raw["storage"]
    subject = f"persistentvolumeclaim/{st['claimName']}"
    if st["createdByChart"]:
        return [Finding(INFO, subject, f"created by the chart ({st['kind']})")]
    if pvc is None:
        return [
            Finding(
                ERROR,
                subject,
                f"not found in namespace {raw['release']['namespace']}; create it or set "
                "the chart's storage to create one (storage.type, storage.existingClaim)",
            )
        ]
    out = []
    phase = (pvc.get("status") or {}).get("phase")
    if phase == "Pending":
        out.append(
            Finding(
                WARNING,
                subject,
                "Pending: fine for WaitForFirstConsumer storage classes, else check the provisioner",
            )
        )
    elif phase != "Bound":
        out.append(Finding(ERROR, subject, f"phase {phase}, expected Bound"))
    modes = (pvc.get("spec") or {}).get("accessModes") or []
    if "ReadWriteMany" not in modes:
        out.append(
            Finding(
                ERROR,
                subject,
                f"access modes {modes}; expected ReadWriteMany (every pod mounts the shared volume)",
            )
        )
    if not out:
        out.append(Finding(INFO, subject, "Bound, ReadWriteMany"))
    return out


def space_findings(pvc: dict[str, Any] | None, raw: RawSpec) -> list[Finding]:
    """The claim's capacity against the space the run needs (output.checkpointBudget, computed by the
    chart: the most checkpoints on disk at once, the HF checkpoint and the torch_dist conversion).
    A claim the chart creates is checked at render time instead."""
    budget = raw["output"]["checkpointBudget"]
    subject = f"persistentvolumeclaim/{raw['storage']['claimName']}"
    if pvc is None or raw["storage"]["createdByChart"] or budget["totalBytes"] <= 0:
        return []
    status_capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
    requested = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    capacity = parse_count(status_capacity or requested)
    if capacity <= 0:
        return [Finding(WARNING, subject, "no capacity on the claim; the checkpoint space was not checked")]
    need = budget["totalBytes"]
    breakdown = (
        f"{budget['savedCheckpoints']} checkpoint(s) on disk at once x "
        f"{human_bytes(budget['checkpointBytes'])} "
        f"+ HF {human_bytes(budget['hfBytes'])} + torch_dist {human_bytes(budget['torchDistBytes'])} "
        f"(model.parameterCount {raw['model']['parameterCount']:,})"
    )
    if need > capacity:
        return [
            Finding(
                ERROR,
                subject,
                f"capacity {human_bytes(capacity)}, expected at least {human_bytes(need)} for this run: "
                f"{breakdown}; use a larger claim, set recipe.checkpoint.retainInterval, or raise "
                "recipe.saveInterval",
            )
        ]
    return [
        Finding(
            INFO,
            subject,
            f"capacity {human_bytes(capacity)} holds the run's {human_bytes(need)}: {breakdown}",
        )
    ]


def secret_findings(found: dict[str, dict[str, Any] | None], raw: RawSpec) -> list[Finding]:
    """``found`` maps Secret name → the Secret (only its ``data`` keys are looked at) or None."""
    out = []
    for ref in raw["secrets"]:
        subject = f"secret/{ref['name']}"
        level = ERROR if ref["required"] else WARNING
        secret = found.get(ref["name"])
        if secret is None and ref.get("generate"):
            out.append(
                Finding(
                    INFO,
                    subject,
                    f"absent: created with a random token once every check passes (for {ref['purpose']}, "
                    f"env {ref['env']})",
                )
            )
            continue
        if secret is None:
            out.append(
                Finding(
                    level,
                    subject,
                    f"not found in namespace {raw['release']['namespace']} (for "
                    f"{ref['purpose']}, env {ref['env']}); create it or change the secret name in values",
                )
            )
            continue
        keys = set((secret.get("data") or {}).keys()) | set((secret.get("stringData") or {}).keys())
        copied = ray_token.key_to_copy(ref, raw, secret.get("labels"), keys)
        if copied is not None:
            out.append(
                Finding(
                    INFO,
                    subject,
                    f"has no key {ref['key']!r}: generated by an earlier chart version under key {copied!r}; "
                    f"its value is added under {ref['key']!r} (KubeRay's key) once every check passes",
                )
            )
        elif ref["key"] not in keys:
            out.append(
                Finding(
                    level,
                    subject,
                    f"has no key {ref['key']!r} (keys: {', '.join(sorted(keys)) or 'none'}); "
                    "set the secret key in values",
                )
            )
        elif ref["purpose"] == "rayAuth" and ref["key"] in (secret.get("untrimmed") or []):
            out.append(
                Finding(
                    ERROR,
                    subject,
                    f"key {ref['key']!r}: expected the Ray token alone, found whitespace or a line break "
                    "around or in it (a file written with echo, say); Ray and KubeRay send it in an HTTP "
                    "header, which refuses that. Recreate the Secret from a value without a trailing newline "
                    "(printf '%s' \"$TOKEN\" > token)",
                )
            )
        else:
            out.append(Finding(INFO, subject, f"key {ref['key']!r} present"))
    return out


def clean_token(encoded: str | None) -> bool:
    """Whether a Secret's base64 ``data`` value is one printable token without whitespace (an HTTP header
    value as Go's net/http accepts it, which KubeRay sends)."""
    try:
        value = base64.b64decode(encoded or "", validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return False
    return bool(value) and all(33 <= ord(c) <= 126 for c in value)


def prometheus_findings(service_exists: bool, raw: RawSpec) -> list[Finding]:
    if not service_exists:
        return []
    if raw["runtimeEnv"]["envVars"].get("PROMETHEUS_PORT"):
        return [
            Finding(
                INFO,
                "service/prometheus",
                "exists; Kubernetes injects PROMETHEUS_PORT=tcp://... into "
                "pods, which would crash miles' argument parsing: the chart overrides it with "
                f"PROMETHEUS_PORT={raw['runtimeEnv']['envVars']['PROMETHEUS_PORT']}",
            )
        ]
    return [
        Finding(
            ERROR,
            "the run spec's runtimeEnv.envVars",
            "a Service named prometheus exists in the namespace, so pods get PROMETHEUS_PORT=tcp://...; "
            "miles crashes on it: expected PROMETHEUS_PORT=9090 in the runtime env, found none",
        )
    ]


def summarize(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == ERROR]


# --------------------------------------------------------------------------- gathering through the API


def _node_dicts(api: kube.Api) -> list[dict[str, Any]] | None:
    """Every node as a dict, or None when the hooks may not list nodes (403)."""
    nodes = kube.optional("listing nodes", lambda: api.core().list_node(limit=5000), absent=(kube.Forbidden,))
    return None if nodes is None else [api.to_dict(n) for n in nodes.items]


def gather(spec: RunSpec, api: kube.Api) -> list[Finding]:
    raw = spec.raw
    ns = spec.namespace
    core = api.core()
    findings: list[Finding] = image_findings(raw)

    if raw["mode"] == "rayCluster":
        group = f"{kube.RAY_GROUP}/{kube.RAY_VERSION}"
        served = kube.optional(f"discovery of {group}", lambda: crd_served(api.get_json(f"/apis/{group}")))
        if served:
            findings.append(Finding(INFO, "crd/rayclusters.ray.io", "served at ray.io/v1"))
        else:
            findings.append(
                Finding(
                    ERROR,
                    "crd/rayclusters.ray.io",
                    "not served at ray.io/v1: install the KubeRay operator (its CRDs) first, "
                    "or use mode: singleNode",
                )
            )
        findings.extend(_operator_findings(api, raw))

    if raw["checks"]["nodes"]["enabled"]:
        nodes = _node_dicts(api)
        if nodes is None:
            findings.append(
                Finding(
                    ERROR,
                    "hooks.preflight.nodeChecks",
                    "node checks are on but the hook cannot list nodes (403); enable the chart's "
                    "node-reader ClusterRole or set hooks.preflight.nodeChecks=false",
                )
            )
        else:
            findings.extend(evaluate_workers(nodes, raw))
            if raw["mode"] == "rayCluster":
                findings.extend(evaluate_head(nodes, raw))
            findings.extend(evaluate_convert(nodes, raw))
            findings.extend(evaluate_export(nodes, raw))
    else:
        findings.append(Finding(INFO, "hooks.preflight.nodeChecks", "node checks disabled"))

    pvc = None
    claim = raw["storage"]["claimName"]
    if not raw["storage"]["createdByChart"]:
        found_claim = kube.optional(
            f"reading persistentvolumeclaim/{claim}",
            lambda: core.read_namespaced_persistent_volume_claim(claim, ns),
        )
        pvc = None if found_claim is None else api.to_dict(found_claim)
    findings.extend(pvc_findings(pvc, raw))
    findings.extend(space_findings(pvc, raw))

    found: dict[str, dict[str, Any] | None] = {}
    for name in dict.fromkeys(ref["name"] for ref in raw["secrets"]):
        secret = kube.optional(
            f"reading secret/{name}", functools.partial(core.read_namespaced_secret, name, ns)
        )
        # keep only key names, and which values are not a clean single token: values never leave this function
        data = (secret.data or {}) if secret is not None else {}
        found[name] = (
            None
            if secret is None
            else {
                "data": dict.fromkeys(data.keys(), ""),
                "labels": dict(secret.metadata.labels or {}),
                "untrimmed": sorted(k for k, v in data.items() if not clean_token(v)),
            }
        )
    findings.extend(secret_findings(found, raw))

    if raw["checks"]["apiDryRun"]:
        findings.extend(dry_run_findings(api, spec))
    else:
        findings.extend(_pod_security_by_label(api, spec))

    prometheus = kube.optional(
        "reading service/prometheus",
        lambda: core.read_namespaced_service("prometheus", ns),
        absent=(kube.NotFound, kube.Forbidden),
    )
    findings.extend(prometheus_findings(prometheus is not None, raw))
    return findings


def _release_pods_and_objects(spec: RunSpec) -> list[dry_run.Candidate] | Finding:
    """The release's objects still to come, each pod template also as a Pod; or why they are missing."""
    manifests = Path(spec.path).parent / MANIFESTS_FILE
    try:
        text = manifests.read_text("utf-8")
    except OSError as exc:
        return Finding(
            ERROR,
            "hooks.preflight",
            f"expected the release's manifests at {manifests} (the chart's run-hook ConfigMap carries "
            f"them whenever preflight runs), found none: {exc.strerror}",
        )
    return dry_run.candidates(dry_run.parse_manifests(text, str(manifests)))


def dry_run_findings(api: kube.Api, spec: RunSpec) -> list[Finding]:
    """The release's objects to come, each sent to the API server as a server-side dry run."""
    batch = _release_pods_and_objects(spec)
    if isinstance(batch, Finding):
        return [batch]
    outcomes = dry_run.send_all(api, batch, spec.namespace)
    findings = [
        Finding(ERROR, o.subject, f"the API server refuses it: {o.refused}") for o in outcomes if o.refused
    ]
    findings += [Finding(WARNING, o.subject, f"not dry-run: {o.unchecked}") for o in outcomes if o.unchecked]
    accepted = sum(1 for o in outcomes if not o.refused and not o.unchecked)
    findings.append(
        Finding(
            INFO,
            "hooks.preflight.apiDryRun",
            f"the API server accepts {accepted} of {len(outcomes)} object(s) (dry run)",
        )
    )
    return findings


def pod_security_findings(
    namespace: str, namespace_labels: dict[str, str] | None, batch: list[dry_run.Candidate]
) -> list[Finding]:
    """Without the dry run: the namespace's enforced Pod Security level against the release's pods, for
    the rules ``restricted`` holds that the miles image breaks (``core.pod_security``)."""
    subject = f"namespace/{namespace}"
    if namespace_labels is None:
        return [
            Finding(
                INFO,
                subject,
                "Pod Security not checked: the hooks may not read the namespace, and "
                "hooks.preflight.apiDryRun is off",
            )
        ]
    level = pod_security.enforced_level(namespace_labels)
    if level != pod_security.RESTRICTED:
        return [
            Finding(
                INFO,
                subject,
                f"enforces Pod Security level {level or 'none (the cluster default applies)'}; only "
                "hooks.preflight.apiDryRun has the API server judge each pod against it",
            )
        ]
    pods = [c for c in batch if c.body["kind"] == "Pod"]
    findings = [
        Finding(ERROR, c.subject, f"{'; '.join(problems)}: {pod_security.enforce_hint(level)}")
        for c in pods
        if (problems := pod_security.restricted_user_violations(c.body.get("spec") or {}))
    ]
    findings.append(
        Finding(
            INFO,
            subject,
            f"enforces Pod Security level restricted: {len(pods) - len(findings)} of {len(pods)} pod(s) "
            "run as non-root (its other rules are judged only with hooks.preflight.apiDryRun)",
        )
    )
    return findings


def _pod_security_by_label(api: kube.Api, spec: RunSpec) -> list[Finding]:
    batch = _release_pods_and_objects(spec)
    if isinstance(batch, Finding):
        return [batch]
    namespace = kube.optional(
        f"reading namespace/{spec.namespace}",
        lambda: api.core().read_namespace(spec.namespace),
        absent=(kube.Forbidden,),
    )
    labels = None if namespace is None else dict(namespace.metadata.labels or {})
    return pod_security_findings(spec.namespace, labels, batch)


def status_check_findings(raw: RawSpec, pod: Any) -> list[Finding]:
    """Mode rayJob under KubeRay 1.7 or newer: the operator's RayJob status-check timeout against the time
    the chart gives a Ray cluster to become ready (checks.waitReadyTimeoutSeconds): a head that comes back
    slower than the timeout ends the run for good."""
    version = kuberay_operator.version(pod)
    if raw["mode"] != "rayJob" or version is None or version < kuberay_operator.FIRST_WITH_STATUS_CHECK:
        return []
    subject = f"kuberay-operator {pod.metadata.namespace}/{pod.metadata.name}"
    seconds, source = kuberay_operator.status_check_timeout(pod)
    allowed = int(raw["checks"]["waitReadyTimeoutSeconds"])
    rule = (
        f"KubeRay {version[0]}.{version[1]} fails a RayJob for good (JobStatusCheckTimeoutExceeded, no retry "
        "whatever rayJob.backoffLimit) when its dashboard does not answer for "
        f"{kuberay_operator.STATUS_CHECK_ENV}"
    )
    if seconds is None:
        return [Finding(INFO, subject, f"{rule}; {source}: compare it with {allowed}s yourself")]
    if seconds < allowed:
        return [
            Finding(
                WARNING,
                subject,
                f"{rule} ({source}: {seconds}s), shorter than the {allowed}s this release gives a Ray "
                "cluster to become ready (checks.waitReadyTimeoutSeconds): a head that restarts slower than "
                "that (a new node pulling the miles image) ends the run. Set the operator Deployment's env "
                f"{kuberay_operator.STATUS_CHECK_ENV} to at least {allowed}, or lower "
                "checks.waitReadyTimeoutSeconds to what a head restart takes on this cluster",
            )
        ]
    return [Finding(INFO, subject, f"{rule} ({source}: {seconds}s, at least checks.waitReadyTimeoutSeconds)")]


def _operator_findings(api: kube.Api, raw: RawSpec) -> list[Finding]:
    running = []
    for selector in OPERATOR_SELECTORS:
        try:
            with kube.api_call("listing the KubeRay operator's pods"):
                pods = api.core().list_pod_for_all_namespaces(label_selector=selector, limit=50)
        except kube.Forbidden:
            return [Finding(INFO, "kuberay-operator", "not checked: no cluster-scope pod read for the hooks")]
        running += [p for p in pods.items if (p.status and p.status.phase == "Running")]
    if running:
        pod = running[0]
        return [
            Finding(INFO, "kuberay-operator", f"running: {pod.metadata.namespace}/{pod.metadata.name}"),
            *status_check_findings(raw, pod),
        ]
    return [
        Finding(
            WARNING,
            "kuberay-operator",
            "no Running pod labelled app.kubernetes.io/name=kuberay-operator found; the RayCluster will "
            "not be reconciled unless the operator runs elsewhere",
        )
    ]


def report(findings: list[Finding]) -> None:
    for f in findings:
        level = {"error": "error", "warning": "warning"}.get(f.level, "info")
        getattr(LOG, level)(str(f))


def pull_findings(raw: RawSpec, outcomes: list[image_pull.Outcome]) -> list[Finding]:
    """What the image check pods found, as findings naming the values that pick the image."""
    image = raw["images"]["miles"]
    subject = "image.digest" if "@sha256:" in image else "image.tag"
    seconds = raw["checks"]["image"]["timeoutSeconds"]
    out = []
    for o in outcomes:
        where = f"on the {o.pool} pool (pod {o.pod})"
        if o.state == "failed":
            out.append(
                Finding(
                    ERROR,
                    subject,
                    f"{image} cannot be pulled {where}: {o.detail}; expected an image its nodes can pull: "
                    "check image.repository, image.tag or image.digest, and imagePullSecrets",
                )
            )
        elif o.state == "pulled":
            out.append(Finding(INFO, subject, f"{image} runs {where}: {o.detail}"))
        elif o.state == "unscheduled":
            out.append(
                Finding(WARNING, subject, f"{image} not checked {where}: no node took the pod ({o.detail})")
            )
        elif o.state == probe_pods.DELETED:
            out.append(Finding(WARNING, subject, f"{image} not checked {where}: {o.detail}"))
        else:
            out.append(
                Finding(
                    WARNING,
                    subject,
                    f"{image} still pulling {where} after {seconds}s ({o.detail}); a reference the registry "
                    "cannot serve fails within seconds, so it is taken as pullable",
                )
            )
    return out


def waiting_bound(raw: RawSpec) -> str:
    """What ends a run that waits for capacity, in its mode."""
    if raw["mode"] == "rayJob":
        return "rayJob.activeDeadlineSeconds (0: never; set one) ends the RayJob"
    return (
        f"wait-ready fails the release after checks.waitReadyTimeoutSeconds "
        f"({raw['checks']['waitReadyTimeoutSeconds']}s) and the workers stay Pending until uninstall"
    )


def capacity_findings(raw: RawSpec, verdict: capacity.Verdict) -> list[Finding]:
    """The scheduler's verdict on the stand-ins, as findings naming what to change."""
    subject = "hooks.preflight.capacityCheck"
    cap = raw["checks"]["capacity"]
    if not verdict.demands:
        return [Finding(INFO, subject, "no Ray pod of the release asks for GPUs: nothing to place")]
    if not verdict.placed and not verdict.unschedulable and not verdict.undecided:
        return [Finding(INFO, subject, f"the release's {verdict.held} GPU pod(s) already hold their nodes")]
    wanted = len(verdict.placed) + len(verdict.unschedulable) + len(verdict.undecided)
    nodes = sorted(set(verdict.placed.values()))
    where = ", ".join(d.subject for d in verdict.demands)
    if verdict.unschedulable:
        said = sorted(set(verdict.unschedulable.values()))
        text = (
            f"{len(verdict.placed)} of {wanted} GPU pod(s) ({where}) fit now"
            + (f" (on {', '.join(nodes[:10])})" if nodes else "")
            + f"; the scheduler on the rest: {'; '.join(said[:3])}. The nodes exist but are in use or "
            "closed to these pods now: free them, lower the node count (topology actor/rollout nodes), "
        )
        if cap["whenFull"] == "wait":
            return [
                Finding(
                    WARNING,
                    "hooks.preflight.whenFull",
                    text + f"or wait: hooks.preflight.whenFull is 'wait', so the run is installed and its "
                    f"workers stay Pending until nodes free up; {waiting_bound(raw)}",
                )
            ]
        return [
            Finding(
                ERROR,
                subject,
                text + "or set hooks.preflight.whenFull=wait to install anyway and let the run wait for "
                f"capacity ({waiting_bound(raw)})",
            )
        ]
    if verdict.undecided:
        return [
            Finding(
                WARNING,
                subject,
                f"the scheduler had placed {len(verdict.placed)} of {wanted} GPU pod stand-in(s) after "
                f"{cap['timeoutSeconds']}s and judged none unschedulable; taken as fitting "
                "(hooks.preflight.capacityCheckTimeoutSeconds)",
            )
        ]
    return [
        Finding(
            INFO,
            subject,
            f"the scheduler placed all {wanted} GPU pod stand-in(s) now, on {', '.join(nodes[:10])}"
            + (" ..." if len(nodes) > 10 else "")
            + (f"; {verdict.held} GPU pod(s) of the release already hold theirs" if verdict.held else ""),
        )
    ]


def _capacity(api: kube.Api, spec: RunSpec) -> list[Finding]:
    raw = spec.raw
    if raw["checks"]["capacity"]["queued"]:
        return [
            Finding(
                INFO,
                "scheduling.kueueQueue",
                "the run is queued by Kueue: its admission decides when the workers start (capacity is "
                "not checked here)",
            )
        ]
    batch = _release_pods_and_objects(spec)
    if isinstance(batch, Finding):
        return [batch]
    objects = [c.body for c in batch if c.body.get("kind") != "Pod"]
    return capacity_findings(raw, capacity.check(api, raw, objects))


def run(spec: RunSpec) -> list[Finding]:
    api = kube.connect()
    findings = gather(spec, api)
    if spec.raw["checks"]["image"]["enabled"] and not summarize(findings):
        # last and only on an otherwise clean spec: it starts pods (one per pool), the other checks only read
        findings += pull_findings(spec.raw, image_pull.check(api, spec.raw))
    if spec.raw["checks"]["capacity"]["enabled"] and not summarize(findings):
        findings += _capacity(api, spec)
    report(findings)
    errors = summarize(findings)
    LOG.info("preflight finished", extra={"fields": {"errors": len(errors), "api_requests": api.requests}})
    if errors:
        raise CheckFailed(f"preflight found {len(errors)} problem(s):", [str(e) for e in errors])
    # only now: a refused release leaves nothing behind
    for line in ray_token.ensure(api, spec.raw):
        LOG.info(line)
    return findings
