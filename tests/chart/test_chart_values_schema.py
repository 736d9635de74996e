"""Kubernetes' own shapes in the values schema (ci/k8s_shapes.py: the API's definitions and apimachinery's
name formats, from the pinned upstream modules): a value the API server would refuse fails `helm template`
offline under both Helms, naming the value's path and what was found; the unusual values the API accepts
still render."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from chartlib import CHART, HELMS, KUBE_VERSION, RELEASE, VALUES, run, tool

# a 253-character DNS-subdomain prefix and a 63-character name: the longest label key the API accepts
LONGEST_LABEL_KEY = ("a" * 63 + ".") * 3 + "b" * 61 + "/" + "c" * 63
BAD = {
    "label value with a space": (
        ["--set", "scheduling.podLabels.team=ml platform"],
        "/scheduling/podLabels/team",
    ),
    "label value of 64 characters": (
        ["--set", f"scheduling.podLabels.team={'x' * 64}"],
        "/scheduling/podLabels/team",
    ),
    "node selector key with a space": (["--set", "gpuPods.nodeSelector.bad key=x"], "/gpuPods/nodeSelector"),
    "misspelled toleration field": (
        ["--set", "gpuPods.tolerations[0].key=a", "--set", "gpuPods.tolerations[0].tolerationSecond=5"],
        "'tolerationSecond' not allowed",
    ),
    "toleration operator": (
        ["--set", "hooks.tolerations[0].operator=exists"],
        "/hooks/tolerations/0/operator",
    ),
    "misspelled affinity field": (["--set", "gpuPods.affinity.nodeAfinity.x=1"], "'nodeAfinity' not allowed"),
    "misspelled security context field": (
        ["--set", "gpuPods.securityContext.runAsUsr=0"],
        "'runAsUsr' not allowed",
    ),
    "extended resource without its domain": (["--set", "gpuPods.gpuResource=gpu"], "/gpuPods/gpuResource"),
    "resource name with a space": (
        ["--set", "rayCluster.workers.resources.limits.bad gpu=1"],
        "/rayCluster/workers/resources/limits",
    ),
    "priorityClassName not a DNS subdomain": (
        ["--set", "scheduling.priorityClassName=High_Priority"],
        "/scheduling/priorityClassName",
    ),
    "empty Secret key": (["--set", "secrets.huggingface.key="], "/secrets/huggingface/key"),
    "annotation key with a space": (["--set", "rayCluster.annotations.my note=x"], "/rayCluster/annotations"),
    "env var source misspelled": (
        ["--set", "hooks.extraEnv[0].name=X", "--set", "hooks.extraEnv[0].valueFrom.secretKeyRf.name=s"],
        "'secretKeyRf' not allowed",
    ),
}
# every value that names an object is a DNS-1123 subdomain of at most 253 characters (apimachinery); the Kueue
# ones are written as labels too, so at most 63
EXTRA_SECRET = ["--set", "secrets.extra[0].key=k"]
BAD.update(
    {
        "claim name with an empty label": (
            ["--set", "storage.existingClaim=fsx..claim"],
            "/storage/existingClaim",
        ),
        "Secret name of 254 characters": (
            ["--set", f"secrets.huggingface.existingSecret={'a' * 254}"],
            "/secrets/huggingface/existingSecret",
        ),
        "ServiceAccount name ending in a dot": (
            ["--set", "serviceAccount.name=runner."],
            "/serviceAccount/name",
        ),
        "Ray token Secret with a capital": (
            ["--set", "secrets.rayAuth.existingSecret=Ray-auth"],
            "/secrets/rayAuth/existingSecret",
        ),
        "LocalQueue name too long for its label": (
            ["--set", f"scheduling.kueueQueue={'q' * 64}"],
            "/scheduling/kueueQueue",
        ),
        "WorkloadPriorityClass name too long for its label": (
            ["--set", f"scheduling.kueuePriorityClass={'p' * 64}"],
            "/scheduling/kueuePriorityClass",
        ),
        "extra Secret with an empty name": (
            [*EXTRA_SECRET, "--set-string", "secrets.extra[0].name=", "--set", "secrets.extra[0].env=E"],
            "/secrets/extra/0/name",
        ),
        "extra Secret's env with an equals sign": (
            [*EXTRA_SECRET, "--set", "secrets.extra[0].name=s", "--set", "secrets.extra[0].env=A=B"],
            "/secrets/extra/0/env",
        ),
    }
)

GOOD = {
    "object names with dots, the longest Secret name, a 63-character queue": {
        "storage": {"existingClaim": "fsx.lustre-claim"},
        "secrets": {"huggingface": {"existingSecret": "a" * 253}},
        "serviceAccount": {"name": "team.runner"},
        "scheduling": {"kueueQueue": "q" * 63},
    },
    "longest label key and value": {"scheduling": {"podLabels": {LONGEST_LABEL_KEY: "v" * 63}}},
    "empty label value": {"scheduling": {"podLabels": {"canary": ""}}},
    "key-less Exists toleration, NoExecute with seconds": {
        "rayCluster": {
            "head": {
                "tolerations": [
                    {"operator": "Exists"},
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                ]
            }
        }
    },
    "hugepages and a vendor GPU resource": {
        "rayCluster": {"workers": {"resources": {"limits": {"hugepages-2Mi": "1Gi"}}}},
        "gpuPods": {"gpuResource": "amd.com/gpu"},
    },
    "env from a Secret": {
        "hooks": {
            "extraEnv": [{"name": "HF_ENDPOINT", "valueFrom": {"secretKeyRef": {"name": "m", "key": "url"}}}]
        }
    },
}


def template(helm: str, extra: list[str]):
    cmd = [tool(helm), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION]
    return run([*cmd, "-f", str(VALUES / "values-colocated.yaml"), *extra], check=False)


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("helm", HELMS)
def test_kubernetes_shapes_are_refused_offline_naming_the_value(helm: str, case: str) -> None:
    extra, where = BAD[case]
    res = template(helm, extra)
    assert res.returncode != 0, f"{case}: rendered"
    assert "values don't meet the specifications of the schema" in res.stderr, res.stderr[-2000:]
    assert where in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("case", GOOD)
@pytest.mark.parametrize("helm", HELMS)
def test_unusual_but_valid_kubernetes_values_render(helm: str, case: str, tmp_path: pathlib.Path) -> None:
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump(GOOD[case]))
    res = template(helm, ["-f", str(overlay)])
    assert res.returncode == 0, res.stderr[-2000:]
