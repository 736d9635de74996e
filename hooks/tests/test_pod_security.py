"""Pod Security without the dry run: the user rules of `restricted` judged from the release's pod templates
and the namespace's label. tests/e2e compares this verdict with the real API server's, pod by pod."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from miles_hooks.core import dry_run, pod_security
from miles_hooks.steps import preflight as pf


def template(containers: list[str], security: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": c, "image": "miles:1"} for c in containers]}
    if security:
        spec["securityContext"] = security
    return {"spec": spec}


MANIFESTS = yaml.safe_dump_all(
    [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "miles-0a1b2c3d"},
            "spec": {
                "headGroupSpec": {
                    "template": template(["ray-head"], {"seccompProfile": {"type": "RuntimeDefault"}})
                },
                "workerGroupSpecs": [{"groupName": "gpu", "template": template(["ray-worker"])}],
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "miles-wait-ready"},
            "spec": {"template": template(["wait-ready"], {"runAsNonRoot": True, "runAsUser": 10001})},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "miles-plugins"}},
    ]
)


def pod(
    pod_context: dict[str, Any] | None = None,
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [{"name": "main"}]}
    if pod_context is not None:
        spec["securityContext"] = pod_context
    if init:
        spec["initContainers"] = list(init)
    return spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (pod({"runAsNonRoot": True}), []),
        (pod(None, {"name": "main", "securityContext": {"runAsNonRoot": True}}), []),
        (pod(), ["container 'main' sets no runAsNonRoot: true"]),
        (pod({"runAsNonRoot": False}), ["container 'main' sets no runAsNonRoot: true"]),
        # the container's own field wins over the pod's, both ways
        (
            pod({"runAsNonRoot": True}, {"name": "main", "securityContext": {"runAsNonRoot": False}}),
            ["container 'main' sets no runAsNonRoot: true"],
        ),
        (pod({"runAsNonRoot": False}, {"name": "main", "securityContext": {"runAsNonRoot": True}}), []),
        # init containers count
        (
            pod(
                None,
                {"name": "main", "securityContext": {"runAsNonRoot": True}},
                init=({"name": "copy"},),
            ),
            ["container 'copy' sets no runAsNonRoot: true"],
        ),
        (pod({"runAsNonRoot": True, "runAsUser": 0}), ["spec.securityContext.runAsUser=0"]),
        (
            pod({"runAsNonRoot": True}, {"name": "main", "securityContext": {"runAsUser": 0}}),
            ["container 'main' sets runAsUser=0"],
        ),
    ],
)
def test_restricted_user_rules(spec: dict[str, Any], expected: list[str]) -> None:
    assert pod_security.restricted_user_violations(spec) == expected


def batch() -> list[dry_run.Candidate]:
    return dry_run.candidates(dry_run.parse_manifests(MANIFESTS, "manifests.yaml"))


def test_restricted_refuses_each_pod_that_may_run_as_root_naming_label_and_remedy() -> None:
    findings = pf.pod_security_findings("ml", {pod_security.ENFORCE_LABEL: "restricted"}, batch())
    errors = [f for f in findings if f.level == pf.ERROR]
    assert [f.subject for f in errors] == [
        "RayCluster/miles-0a1b2c3d spec.headGroupSpec.template (as a Pod)",
        "RayCluster/miles-0a1b2c3d spec.workerGroupSpecs[0].template (as a Pod)",
    ]
    assert "container 'ray-head' sets no runAsNonRoot: true" in errors[0].message
    for f in errors:
        assert "the namespace's label pod-security.kubernetes.io/enforce=restricted refuses it" in f.message
        assert "label the namespace pod-security.kubernetes.io/enforce=baseline" in f.message
    (summary,) = [f for f in findings if f.level == pf.INFO]
    assert summary.subject == "namespace/ml"
    assert "1 of 3 pod(s) run as non-root" in summary.message


@pytest.mark.parametrize("labels", [{}, {pod_security.ENFORCE_LABEL: "baseline"}, {"other": "restricted"}])
def test_levels_below_restricted_are_not_judged_here(labels: dict[str, str]) -> None:
    findings = pf.pod_security_findings("ml", labels, batch())
    assert [f.level for f in findings] == [pf.INFO]
    assert "hooks.preflight.apiDryRun" in findings[0].message


def test_an_unreadable_namespace_is_a_note_not_a_failure() -> None:
    (finding,) = pf.pod_security_findings("ml", None, batch())
    assert finding.level == pf.INFO and "may not read the namespace" in finding.message
