"""The Argo CD overlay turns the Helm hook sequence into Argo CD phases and waves, in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

OVERLAY = "examples/argocd/values-argocd.yaml"
PHASES = {"PreSync": 0, "Sync": 1, "PostSync": 2}
# The order of the hook sequence (docs/hooks.md "Sequence"), by the component label of each hook Job.
EXPECTED_JOB_ORDER = ["preflight", "prepare-data", "convert", "wait-ready", "verify", "submit"]

Render = Callable[..., list[dict[str, Any]]]


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def sync_position(obj: dict[str, Any]) -> tuple[int, int]:
    notes = annotations(obj)
    phase = notes.get("argocd.argoproj.io/hook", "Sync")
    return PHASES[phase], int(notes.get("argocd.argoproj.io/sync-wave", "0"))


def component(obj: dict[str, Any]) -> str:
    label = str(obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", ""))
    return label.removeprefix("hook-")


@pytest.mark.parametrize("scenario", ["values/values-colocated.yaml", "values/values-moe.yaml"])
def test_overlay_leaves_no_helm_hook_annotation(render: Render, scenario: str) -> None:
    for obj in render(scenario, OVERLAY):
        leftover = [key for key in annotations(obj) if key.startswith("helm.sh/hook")]
        assert not leftover, f"{obj['kind']}/{obj['metadata']['name']} keeps {leftover}"


@pytest.mark.parametrize("helm", ["helm3", "helm4"])
def test_hook_jobs_run_in_the_designed_order(render: Render, helm: str) -> None:
    objects = render("values/values-moe.yaml", OVERLAY, helm=helm)
    jobs = [obj for obj in objects if obj["kind"] == "Job"]
    ordered = [component(job) for job in sorted(jobs, key=sync_position)]
    assert ordered == EXPECTED_JOB_ORDER
    positions = [sync_position(job) for job in sorted(jobs, key=sync_position)]
    assert len(set(positions)) == len(positions), f"two hook Jobs share a phase and wave: {positions}"


def test_cluster_is_created_between_convert_and_wait_ready(render: Render) -> None:
    objects = render("values/values-moe.yaml", OVERLAY)
    by_component = {component(o): sync_position(o) for o in objects if o["kind"] == "Job"}
    cluster = next(o for o in objects if o["kind"] == "RayCluster")
    assert by_component["convert"] < sync_position(cluster) < by_component["wait-ready"]


def test_everything_pre_sync_jobs_need_exists_before_them(render: Render) -> None:
    objects = render("values/values-moe.yaml", OVERLAY)
    first_job = min(sync_position(o) for o in objects if o["kind"] == "Job")
    needed = [
        o
        for o in objects
        if o["kind"] in {"ServiceAccount", "Role", "RoleBinding"} and "hook" in o["metadata"]["name"]
    ]
    assert needed, "no hook RBAC rendered"
    for obj in needed:
        assert sync_position(obj) < first_job, (
            f"{obj['kind']}/{obj['metadata']['name']} comes after the first hook Job"
        )
    run_spec_copies = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and annotations(o).get("argocd.argoproj.io/hook") == "PreSync"
    ]
    assert run_spec_copies, "the pre-sync Jobs have no run spec to mount"


def test_rbac_outlives_the_pre_sync_phase(render: Render) -> None:
    # A Role deleted on success would leave the PostSync Jobs without permissions.
    for obj in render("values/values-moe.yaml", OVERLAY):
        if obj["kind"] in {"Role", "RoleBinding", "ServiceAccount"}:
            policy = annotations(obj).get("argocd.argoproj.io/hook-delete-policy", "")
            assert "HookSucceeded" not in policy, f"{obj['kind']}/{obj['metadata']['name']}: {policy}"


def test_after_the_first_sync_the_cpu_check_takes_the_converters_place(render: Render, tmp_path: Any) -> None:
    later_syncs = tmp_path / "later-syncs.yaml"
    later_syncs.write_text("hooks:\n  convert:\n    enabled: false\n  convertCheck:\n    enabled: true\n")
    objects = render("values/values-moe.yaml", OVERLAY, str(later_syncs))
    jobs = sorted((o for o in objects if o["kind"] == "Job"), key=sync_position)
    assert [component(job) for job in jobs] == [
        "preflight",
        "prepare-data",
        "convert-check",
        "wait-ready",
        "verify",
        "submit",
    ]
    (check,) = (job for job in jobs if component(job) == "convert-check")
    resources = check["spec"]["template"]["spec"]["containers"][0].get("resources", {})
    assert "nvidia.com/gpu" not in resources.get("limits", {}), "the check must not wait for GPUs"


def test_the_egress_rule_covers_the_pre_sync_jobs(render: Render, tmp_path: Any) -> None:
    egress_on = tmp_path / "egress.yaml"
    egress_on.write_text("networkPolicy:\n  egress:\n    enabled: true\n")
    objects = render("values/values-moe.yaml", OVERLAY, str(egress_on))
    for obj in objects:
        leftover = [key for key in annotations(obj) if key.startswith("helm.sh/hook")]
        assert not leftover, f"{obj['kind']}/{obj['metadata']['name']} keeps {leftover}"
    (copy,) = (o for o in objects if o["metadata"]["name"].endswith("-egress-hooks"))
    first_job = min(sync_position(o) for o in objects if o["kind"] == "Job")
    assert sync_position(copy) < first_job
    assert "HookSucceeded" not in annotations(copy).get("argocd.argoproj.io/hook-delete-policy", "")
