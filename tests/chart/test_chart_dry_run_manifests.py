"""What preflight's server-side dry run sees is what Helm will create: the `manifests.yaml` of the run-hook
ConfigMap holds, object for object, every release object that exists only after preflight, and the
dry-run Role lets the hooks' account apply each of those kinds."""

from __future__ import annotations

import json

import pytest
import yaml
from chartlib import NAMESPACE, RELEASE, SCENARIOS, docs, find, render

HOOK = "helm.sh/hook"
# created before preflight, or the hooks' own RBAC of the uninstall's cleanup (like the rest of the hooks'
# RBAC, left out of the dry run; the cleanup Job itself is sent): not dry-run
BEFORE_PREFLIGHT = {
    ("Role", f"{RELEASE}-hooks-cleanup"),
    ("RoleBinding", f"{RELEASE}-hooks-cleanup"),
    ("ConfigMap", f"{RELEASE}-run"),
    ("ConfigMap", f"{RELEASE}-run-hook"),
    ("ServiceAccount", f"{RELEASE}-hooks"),
    ("Role", f"{RELEASE}-hooks"),
    ("Role", f"{RELEASE}-hooks-preflight"),
    ("RoleBinding", f"{RELEASE}-hooks"),
    ("RoleBinding", f"{RELEASE}-hooks-preflight"),
    ("Job", f"{RELEASE}-preflight"),
    ("NetworkPolicy", f"{RELEASE}-egress-hooks"),
    # the submitter's RBAC (hooks.export.onRunEnd): a dry-run Role is held to RBAC's escalation check, which
    # would need the hooks' account to hold the rights it grants
    ("Role", f"{RELEASE}-submitter"),
    ("RoleBinding", f"{RELEASE}-submitter"),
}
# values that add objects no shipped scenario renders
OPTIONAL_OBJECTS = {"egress policy": ("--set", "networkPolicy.egress.enabled=true")}
HOOKS_CLUSTER_RBAC = ("ClusterRole", "ClusterRoleBinding")  # the node reader, created before preflight


def key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def dry_run_objects(rendered: list[dict]) -> list[dict]:
    (hook_copy,) = find(rendered, "ConfigMap", f"{RELEASE}-run-hook")
    return [d for d in yaml.safe_load_all(hook_copy["data"]["manifests.yaml"]) if d]


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [(s, ()) for s in SCENARIOS] + [("colocated", e) for e in OPTIONAL_OBJECTS.values()],
)
def test_the_dry_run_covers_every_object_created_after_preflight(
    scenario: str, extra: tuple[str, ...]
) -> None:
    rendered = docs(render("helm4", scenario, extra))
    expected = {
        key(d): d
        for d in rendered
        if key(d) not in BEFORE_PREFLIGHT
        and not str(d["metadata"].get("annotations", {}).get(HOOK, "")).startswith("test")
        and d["kind"] not in HOOKS_CLUSTER_RBAC
    }
    sent = {key(d): d for d in dry_run_objects(rendered)}
    assert sorted(sent) == sorted(expected)
    for k, obj in expected.items():
        assert sent[k] == obj, f"{k}: the dry run would check another object than Helm creates"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_dry_run_role_grants_apply_on_each_namespaced_kind(scenario: str) -> None:
    rendered = docs(render("helm4", scenario))
    (role,) = find(rendered, "Role", f"{RELEASE}-hooks-preflight")
    dry_run_rules = [rule for rule in role["rules"] if rule["verbs"] == ["create", "patch"]]
    # the image check's pods (core/image_pull.py); the other rules: preflight's reads, and creating the Ray
    # token Secret when the chart names it (and adding KubeRay's key to that one Secret)
    image_check = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "watch", "delete"]}
    assert image_check in role["rules"]
    others = [r for r in role["rules"] if r not in dry_run_rules and r != image_check]
    (hook_copy,) = find(rendered, "ConfigMap", f"{RELEASE}-run-hook")
    to_generate = [ref for ref in json.loads(hook_copy["data"]["run.json"])["secrets"] if ref.get("generate")]
    token_rules = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    token_rules += [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [ref["name"]], "verbs": ["patch"]}
        for ref in to_generate
        if ref["key"] == "auth_token"
    ]
    assert all(r in others for r in token_rules) == bool(to_generate)
    reads = [r for r in others if r not in token_rules]
    assert all(r["verbs"] == ["get"] for r in reads), reads
    granted = {(g, r) for rule in dry_run_rules for g in rule["apiGroups"] for r in rule["resources"]}
    for obj in dry_run_objects(rendered):
        if obj["kind"] in ("StorageClass", "PersistentVolume"):
            continue  # cluster-scoped: preflight reports them as not dry-run (no cluster-wide create)
        group = obj["apiVersion"].rpartition("/")[0]
        assert any(g == group for g, _ in granted), f"{key(obj)}: no rule for API group {group!r}"
    if any(d["kind"] in ("RayCluster", "Job", "Deployment") for d in dry_run_objects(rendered)):
        assert ("", "pods") in granted, "the pod templates are dry-run as Pods"


def test_off_switch_leaves_no_dry_run_rights_reads_the_namespace_and_tells_the_hooks() -> None:
    """Without the dry run preflight still gets the manifests (it judges their pods against the namespace's
    Pod Security label) and, for that label, a get on the release's own namespace: reads only."""
    off = ("--set", "hooks.preflight.apiDryRun=false", "--set", "secrets.rayAuth.existingSecret=ray-token")
    # the image and capacity checks, and prepare-data's version report of the image, start pods: writes of
    # their own
    off += ("--set", "hooks.preflight.imageCheck=false", "--set", "hooks.preflight.capacityCheck=false")
    off += ("--set", "hooks.prepareData.imageFacts=false")
    rendered = docs(render("helm4", "colocated", off))
    (hook_copy,) = find(rendered, "ConfigMap", f"{RELEASE}-run-hook")
    kinds = {o["kind"] for o in dry_run_objects(rendered)}
    assert {"RayCluster", "Job"} <= kinds, kinds
    (role,) = find(rendered, "Role", f"{RELEASE}-hooks-preflight")
    assert all(rule["verbs"] == ["get"] for rule in role["rules"])  # preflight's reads only
    (cluster_role,) = [d for d in rendered if d["kind"] == "ClusterRole"]
    read = {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [NAMESPACE], "verbs": ["get"]}
    assert read in cluster_role["rules"]
    assert all(rule["verbs"] in (["get"], ["get", "list"]) for rule in cluster_role["rules"])
    assert json.loads(hook_copy["data"]["run.json"])["checks"]["apiDryRun"] is False


def test_with_the_dry_run_preflight_does_not_read_the_namespace() -> None:
    rendered = docs(render("helm4", "colocated", ()))
    (cluster_role,) = [d for d in rendered if d["kind"] == "ClusterRole"]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
