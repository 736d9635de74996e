"""The pure half of the server-side dry run: which objects preflight sends, and how the pod templates of a
RayCluster, a Job or a Deployment become Pods. The requests themselves go to the real API server in
tests/e2e."""

from __future__ import annotations

import pytest

from miles_hooks.core import dry_run
from miles_hooks.core.errors import BadInput

CLUSTER = """
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: miles}
---
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: miles-0a1b2c3d}
spec:
  headGroupSpec:
    template:
      metadata: {labels: {app: head}}
      spec: {containers: [{name: ray-head, image: miles:1}]}
  workerGroupSpecs:
    - groupName: gpu
      template:
        spec:
          tolerations: [{key: nvidia.com/gpu, operator: Exists, value: "x"}]
          containers: [{name: ray-worker, image: miles:1}]
"""


def test_every_object_is_sent_and_each_raycluster_template_as_a_pod() -> None:
    batch = dry_run.candidates(dry_run.parse_manifests(CLUSTER, "manifests.yaml"))
    assert [c.subject for c in batch] == [
        "ServiceAccount/miles",
        "RayCluster/miles-0a1b2c3d",
        "RayCluster/miles-0a1b2c3d spec.headGroupSpec.template (as a Pod)",
        "RayCluster/miles-0a1b2c3d spec.workerGroupSpecs[0].template (as a Pod)",
    ]
    head, worker = batch[2].body, batch[3].body
    assert head["kind"] == "Pod" and head["metadata"] == {
        "labels": {"app": "head"},
        "name": "miles-0a1b2c3d-dry-run-head",
    }
    assert worker["spec"]["tolerations"][0]["value"] == "x", "the template is sent as written"


def test_pod_names_stay_within_63_characters() -> None:
    long = CLUSTER.replace("miles-0a1b2c3d", "m" * 60)
    for c in dry_run.candidates(dry_run.parse_manifests(long, "manifests.yaml"))[2:]:
        name = c.body["metadata"]["name"]
        assert len(name) <= 63 and not name.endswith("-")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [", "expected multi-document YAML"),
        ("- 1\n- 2\n", "document 1: expected an object with apiVersion and kind"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "document 1: expected an object with apiVersion and kind"),
    ],
)
def test_unreadable_manifests_name_the_file_and_document(text: str, expected: str) -> None:
    with pytest.raises(BadInput, match=expected) as err:
        dry_run.parse_manifests(text, "/etc/miles/run/manifests.yaml")
    assert "/etc/miles/run/manifests.yaml" in str(err.value)


def test_a_template_pod_whose_account_the_release_creates_is_checked_as_default() -> None:
    """The ServiceAccount admission plugin refuses a Pod whose account does not exist yet, and the
    release's own account is created only after the pre-install hooks."""
    text = CLUSTER.replace(
        "spec: {containers: [{name: ray-head, image: miles:1}]}",
        "spec: {serviceAccountName: miles, containers: [{name: ray-head, image: miles:1}]}",
    )
    head = dry_run.candidates(dry_run.parse_manifests(text, "manifests.yaml"))[2]
    assert head.body["spec"]["serviceAccountName"] == "default"
    foreign = text.replace("serviceAccountName: miles,", "serviceAccountName: platform-runner,")
    head = dry_run.candidates(dry_run.parse_manifests(foreign, "manifests.yaml"))[2]
    assert head.body["spec"]["serviceAccountName"] == "platform-runner", "an existing account is kept"


def test_job_and_deployment_templates_are_sent_as_pods_too() -> None:
    text = """
apiVersion: batch/v1
kind: Job
metadata: {name: miles-convert}
spec:
  template:
    metadata: {labels: {app: convert}}
    spec: {restartPolicy: Never, containers: [{name: convert, image: miles:1}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: miles-reward}
spec:
  template:
    spec: {containers: [{name: reward, image: reward:1}]}
---
apiVersion: v1
kind: Service
metadata: {name: miles-reward}
"""
    batch = dry_run.candidates(dry_run.parse_manifests(text, "manifests.yaml"))
    assert [c.subject for c in batch] == [
        "Job/miles-convert",
        "Job/miles-convert spec.template (as a Pod)",
        "Deployment/miles-reward",
        "Deployment/miles-reward spec.template (as a Pod)",
        "Service/miles-reward",
    ]
    assert batch[1].body["metadata"] == {"labels": {"app": "convert"}, "name": "miles-convert-dry-run-pod"}
    assert batch[1].body["spec"]["restartPolicy"] == "Never"


def test_a_pod_security_refusal_names_the_namespace_label_and_what_to_change() -> None:
    restricted = (
        'pods "miles-worker" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'
    )
    hint = dry_run.pod_security_hint(restricted)
    assert "pod-security.kubernetes.io/enforce=restricted refuses it" in hint
    assert "label the namespace pod-security.kubernetes.io/enforce=baseline" in hint
    baseline = dry_run.pod_security_hint('violates PodSecurity "baseline:v1.34": privileged')
    assert "enforce=baseline refuses it" in baseline and "securityContext" in baseline
    assert dry_run.pod_security_hint("exceeded quota: gpus") == ""


def test_a_field_the_crd_lacks_names_the_value_that_rendered_it() -> None:
    """Server-side apply answers a field the CRD's schema lacks with a 500 naming it; preflight reads it
    as a refusal and, for a field older KubeRay CRDs lack, names the value that asked for it."""
    older = (
        "failed to create typed patch object (/miles; ray.io/v1, Kind=RayCluster): "
        ".spec.upgradeStrategy: field not declared in schema"
    )
    hint = dry_run.schema_hint(older)
    assert "KubeRay 1.6 added it" in hint
    assert "change rayCluster.operatorVersion to the operator's version" in hint
    assert "set rayCluster.upgradeStrategy.method: nameHash" in hint
    # KubeRay 1.5.0's CRD has no authOptions, 1.5.1's no secretName in it; a RayJob's cluster spec too
    for undeclared in (
        ".spec.authOptions",
        ".spec.authOptions.secretName",
        ".spec.rayClusterSpec.authOptions",
    ):
        hint = dry_run.schema_hint(older.replace(".spec.upgradeStrategy", undeclared))
        assert f"has no {undeclared} (KubeRay 1.6, with its secretName added it)" in hint, hint
        assert "or set secrets.rayAuth.key: token" in hint
    other = dry_run.schema_hint(older.replace("upgradeStrategy", "somethingElse"))
    assert "does not declare that field" in other and "miles.dev/kuberay-versions" in other
    assert dry_run.schema_hint("exceeded quota: gpus") == ""
