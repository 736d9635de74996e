"""Every pod the release starts runs under a ServiceAccount that exists as long as that pod can be created.

The hooks' own account is a Helm hook object: Helm deletes it once the hook phase succeeds. A pod created
later (an export Job made from the export template, the RayJob's submitter, the Ray pods) under that account
is refused by the API server ("error looking up service account"). So: a pod template of a hook object may
use any account the release renders; a pod template of a release object (created by Helm for the release's
life, or by a controller from it at any time) only a ServiceAccount that is itself a release object, or one
the user names (not rendered by the chart)."""

from __future__ import annotations

from typing import Any

import pytest
from chartlib import SCENARIOS, docs, render

HOOK = "helm.sh/hook"


def pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    if kind in ("Job", "Deployment"):
        return [("spec.template", spec["template"])]
    if kind == "CronJob":
        return [("spec.jobTemplate.spec.template", spec["jobTemplate"]["spec"]["template"])]
    if kind == "Pod":
        return [("", {"spec": spec})]
    cluster = spec.get("rayClusterSpec", spec) if kind in ("RayJob", "RayCluster") else {}
    out = []
    if kind == "RayJob" and spec.get("submitterPodTemplate"):
        out.append(("spec.submitterPodTemplate", spec["submitterPodTemplate"]))
    if cluster.get("headGroupSpec"):
        out.append(("headGroupSpec.template", cluster["headGroupSpec"]["template"]))
    out += [
        (f"workerGroupSpecs[{i}].template", g["template"])
        for i, g in enumerate(cluster.get("workerGroupSpecs") or [])
    ]
    return out


CASES = {name: () for name in SCENARIOS}
CASES["colocated + rayJob"] = ("--set", "mode=rayJob")
CASES["colocated + rayJob, no export at the end"] = (
    "--set",
    "mode=rayJob",
    "--set",
    "hooks.export.onRunEnd=false",
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_pod_outlives_its_service_account(case: str) -> None:
    scenario = case if case in SCENARIOS else "colocated"
    rendered = docs(render("helm4", scenario, CASES[case]))
    accounts = {
        d["metadata"]["name"]: HOOK in (d["metadata"].get("annotations") or {})
        for d in rendered
        if d["kind"] == "ServiceAccount"
    }
    wrong = []
    for obj in rendered:
        if HOOK in (obj["metadata"].get("annotations") or {}):
            continue  # a hook's own pods run within the hook phase, with the hook accounts
        for where, template in pod_templates(obj):
            account = (template.get("spec") or {}).get("serviceAccountName", "default")
            if accounts.get(account):
                wrong.append(f"{obj['kind']}/{obj['metadata']['name']} {where}: {account} (a hook object)")
    assert not wrong, wrong
