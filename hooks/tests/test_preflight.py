"""Pure preflight logic: node matching, capacity (GPU, full EFA), topology, storage, secrets."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from hooks_testlib import base_spec, ray_token_ref
from miles_hooks.core import ray_token
from miles_hooks.core.quantity import parse_count
from miles_hooks.steps import preflight as pf

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def node(
    name: str,
    labels: dict[str, str] | None = None,
    gpu: int = 8,
    efa: int = 15,
    taints: list[dict[str, Any]] | None = None,
    ready: bool = True,
    cordoned: bool = False,
) -> dict[str, Any]:
    alloc = {"cpu": "191", "nvidia.com/gpu": str(gpu)}
    if efa:
        alloc["vpc.amazonaws.com/efa"] = str(efa)
    return {
        "metadata": {
            "name": name,
            "labels": {"node.kubernetes.io/instance-type": "p5en.48xlarge", **(labels or {})},
        },
        "spec": {"taints": taints if taints is not None else [GPU_TAINT], "unschedulable": cordoned},
        "status": {
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cpu_node(name: str) -> dict[str, Any]:
    n = node(name, gpu=0, efa=0, taints=[])
    n["metadata"]["labels"] = {"node.kubernetes.io/instance-type": "m5.2xlarge"}
    return n


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
        ({"operator": "Exists"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}, GPU_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "false"}, GPU_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT, False),
        ({"key": "other", "operator": "Exists"}, GPU_TAINT, False),
        ({"key": "", "operator": "Equal"}, GPU_TAINT, False),
    ],
)
def test_toleration_matches(toleration: dict[str, Any], taint: dict[str, Any], expected: bool) -> None:
    assert pf.toleration_matches(toleration, taint) is expected


def test_prefer_no_schedule_taints_are_ignored() -> None:
    n = node("a", taints=[{"key": "x", "effect": "PreferNoSchedule"}])
    assert pf.untolerated_taints(n, []) == []


def test_unschedulable_reasons() -> None:
    pool = base_spec()["rayCluster"]["worker"]
    assert pf.unschedulable_reasons(node("a"), pool) == []
    bad = node(
        "b",
        labels={pf.HYPERPOD_HEALTH: "UnschedulablePendingReboot"},
        ready=False,
        cordoned=True,
        taints=[GPU_TAINT, {"key": "maint", "effect": "NoExecute"}],
    )
    reasons = pf.unschedulable_reasons(bad, pool)
    assert reasons == [
        "cordoned (spec.unschedulable)",
        "not Ready",
        f"{pf.HYPERPOD_HEALTH}=UnschedulablePendingReboot",
        "taint maint:NoExecute not tolerated",
    ]


def test_capacity_partial_efa_is_an_error_reason() -> None:
    assert pf.capacity_reasons(node("a"), "nvidia.com/gpu", 8, "vpc.amazonaws.com/efa", 15) == []
    partial = pf.capacity_reasons(node("a", efa=32), "nvidia.com/gpu", 8, "vpc.amazonaws.com/efa", 15)
    assert partial == ["partial EFA request: a worker requests 15 of the node's 32 vpc.amazonaws.com/efa"]
    short = pf.capacity_reasons(node("a", gpu=4, efa=8), "nvidia.com/gpu", 8, "vpc.amazonaws.com/efa", 15)
    assert short == [
        "allocatable nvidia.com/gpu is 4, a worker needs 8",
        "allocatable vpc.amazonaws.com/efa is 8, a worker requests 15",
    ]
    assert pf.capacity_reasons(node("a", efa=0), "nvidia.com/gpu", 8, "vpc.amazonaws.com/efa", 0) == []


def errors(findings: list[pf.Finding]) -> list[pf.Finding]:
    return [f for f in findings if f.level == pf.ERROR]


def test_evaluate_workers_enough_nodes() -> None:
    raw = base_spec()
    raw["topology"]["workerReplicas"] = 2
    nodes = [node("g1"), node("g2"), cpu_node("c1")]
    assert errors(pf.evaluate_workers(nodes, raw)) == []


def test_evaluate_workers_not_enough_names_nodes_and_value() -> None:
    raw = base_spec()
    raw["topology"]["workerReplicas"] = 3
    nodes = [node("g1"), node("g2", gpu=4), node("g3", cordoned=True), cpu_node("c1")]
    (err,) = errors(pf.evaluate_workers(nodes, raw))
    assert err.subject == "topology.actorNodes"
    assert (
        "need 3 schedulable worker node(s)" in err.message
        and "found 1 usable of 3 matching (of 4 nodes)" in err.message
    )
    assert "g2: allocatable nvidia.com/gpu is 4" in err.message and "g3: cordoned" in err.message


def test_evaluate_workers_partial_efa_is_reported_once_with_the_value_to_set() -> None:
    raw = base_spec()
    nodes = [node("g1", efa=32), node("g2", efa=32)]
    errs = errors(pf.evaluate_workers(nodes, raw))
    assert errs[0].subject == "gpuPods.efa.count" and "set it to 32" in errs[0].message
    assert "g1, g2" in errs[0].message


def test_evaluate_workers_efa_off_warns() -> None:
    raw = base_spec()
    raw["checks"]["nodes"]["efaPerNode"] = 0
    findings = pf.evaluate_workers([node("g1")], raw)
    assert errors(findings) == [] and any(
        f.level == pf.WARNING and "EFA is off" in f.message for f in findings
    )


def test_evaluate_head() -> None:
    raw = base_spec()
    assert errors(pf.evaluate_head([node("g1"), cpu_node("c1")], raw)) == []
    (err,) = errors(pf.evaluate_head([node("g1")], raw))
    assert "no schedulable node for the Ray head" in err.message


def test_crd_served() -> None:
    assert pf.crd_served({"resources": [{"name": "rayclusters"}, {"name": "rayjobs"}]})
    assert not pf.crd_served({"resources": [{"name": "rayjobs"}]})
    assert not pf.crd_served(None)


def test_pvc_findings() -> None:
    raw = base_spec()
    assert errors(pf.pvc_findings(None, raw))[0].message.startswith("not found in namespace default")
    bound = {"status": {"phase": "Bound"}, "spec": {"accessModes": ["ReadWriteMany"]}}
    assert errors(pf.pvc_findings(bound, raw)) == []
    rwo = {"status": {"phase": "Bound"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    assert "expected ReadWriteMany" in errors(pf.pvc_findings(rwo, raw))[0].message
    raw["storage"]["createdByChart"] = True
    assert errors(pf.pvc_findings(None, raw)) == []


def test_space_findings_compare_the_claim_with_the_run_budget() -> None:
    raw = base_spec()  # 5 checkpoints x 56 GB + 8 GB + 8 GB = 296 GB
    claim = {"status": {"phase": "Bound", "capacity": {"storage": "1200Gi"}}, "spec": {}}
    fits = pf.space_findings(claim, raw)
    assert [f.level for f in fits] == [pf.INFO] and "holds the run's 275.7 GiB" in fits[0].message
    small = {"status": {"phase": "Bound", "capacity": {"storage": "200Gi"}}, "spec": {}}
    [finding] = errors(pf.space_findings(small, raw))
    assert finding.subject == "persistentvolumeclaim/miles-fsx"
    assert "capacity 200.0 GiB, expected at least 275.7 GiB" in finding.message
    assert "5 checkpoint(s) on disk at once x 52.2 GiB + HF 7.5 GiB + torch_dist 7.5 GiB" in finding.message
    assert "recipe.checkpoint.retainInterval" in finding.message
    pending = {"status": {"phase": "Pending"}, "spec": {"resources": {"requests": {"storage": "0.2Ti"}}}}
    assert errors(pf.space_findings(pending, raw))[0].message.startswith("capacity 204.8 GiB")
    raw["output"]["checkpointBudget"]["totalBytes"] = 0  # parameterCount unknown: nothing to check
    assert pf.space_findings(small, raw) == []


def test_secret_findings_levels_and_no_values() -> None:
    raw = base_spec()
    raw["secrets"].append(
        {"purpose": "wandb", "name": "wandb", "key": "api-key", "env": "WANDB_API_KEY", "required": True}
    )
    found = pf.secret_findings({"hf-token": None, "wandb": {"data": {"other": ""}}}, raw)
    by = {f.subject: f for f in found}
    assert by["secret/hf-token"].level == pf.WARNING
    assert (
        by["secret/wandb"].level == pf.ERROR
        and "has no key 'api-key' (keys: other)" in by["secret/wandb"].message
    )


def test_an_absent_ray_token_secret_is_created_not_refused_but_a_named_one_must_exist() -> None:
    raw = base_spec()
    raw["secrets"] = [ray_token_ref(generate=True)]
    (generated,) = pf.secret_findings({"rt-ray-auth": None}, raw)
    assert (
        generated.level == pf.INFO
        and "created with a random token once every check passes" in generated.message
    )
    raw["secrets"] = [ray_token_ref(generate=False)]
    (named,) = pf.secret_findings({"rt-ray-auth": None}, raw)
    assert named.level == pf.ERROR and "not found" in named.message
    raw["secrets"] = [ray_token_ref(generate=True)]
    (keyless,) = pf.secret_findings({"rt-ray-auth": {"data": {"other": ""}}}, raw)
    assert keyless.level == pf.ERROR and "has no key 'token'" in keyless.message  # never rewritten


def test_a_generated_token_under_the_earlier_key_is_not_refused_but_copied_to_kuberays_key() -> None:
    raw = base_spec()
    raw["secrets"] = [ray_token_ref(key="auth_token", generate=True)]
    labels = ray_token.generated_labels(raw)
    (earlier,) = pf.secret_findings({"rt-ray-auth": {"data": {"token": ""}, "labels": labels}}, raw)
    assert earlier.level == pf.INFO and "added under 'auth_token'" in earlier.message
    (users,) = pf.secret_findings({"rt-ray-auth": {"data": {"token": ""}, "labels": {}}}, raw)
    assert users.level == pf.ERROR and "has no key 'auth_token'" in users.message


def test_a_ray_token_with_a_line_break_is_refused_without_showing_it() -> None:
    raw = base_spec()
    raw["secrets"] = [ray_token_ref(generate=False)]
    value = "s3cr3t-token\n"
    found = {"rt-ray-auth": {"data": {"token": ""}, "untrimmed": ["token"]}}
    (finding,) = pf.secret_findings(found, raw)
    assert finding.level == pf.ERROR and "line break" in finding.message and "'token'" in finding.message
    assert value.strip() not in finding.message
    (clean,) = pf.secret_findings({"rt-ray-auth": {"data": {"token": ""}, "untrimmed": []}}, raw)
    assert clean.level == pf.INFO


@pytest.mark.parametrize(
    ("value", "clean"),
    [("abc-DEF_123", True), ("abc\n", False), (" abc", False), ("a b", False), ("", False)],
)
def test_clean_token(value: str, clean: bool) -> None:
    assert pf.clean_token(base64.b64encode(value.encode()).decode()) is clean
    assert pf.clean_token("not base64!") is False


def test_prometheus_findings() -> None:
    raw = base_spec()
    assert pf.prometheus_findings(False, raw) == []
    assert pf.prometheus_findings(True, raw)[0].level == pf.INFO
    del raw["runtimeEnv"]["envVars"]["PROMETHEUS_PORT"]
    assert pf.prometheus_findings(True, raw)[0].subject == "the run spec's runtimeEnv.envVars"


@pytest.mark.parametrize(
    ("value", "count"), [("8", 8), ("15", 15), (None, 0), ("1k", 1000), ("2Ki", 2048), ("500m", 0), ("x", 0)]
)
def test_parse_count(value: str | None, count: int) -> None:
    assert parse_count(value) == count


def convert_spec(**convert: Any) -> dict[str, Any]:
    raw = base_spec()
    raw["convert"].update(convert)
    return raw


def test_evaluate_convert_finds_a_gpu_node_with_the_pods_cpu_and_memory() -> None:
    big = node("g1", labels={"node.kubernetes.io/instance-type": "p5en.48xlarge"})
    big["status"]["allocatable"]["memory"] = "2048Gi"
    raw = convert_spec(requests={"cpu": "16", "memory": "256Gi"})
    (found,) = pf.evaluate_convert([big, cpu_node("c1")], raw)
    assert (found.level, found.subject) == (pf.INFO, "hooks.convert")
    assert found.message == "convert pod can run on g1"


def test_evaluate_convert_names_what_each_node_lacks_and_the_values_to_change() -> None:
    small = node("g1")
    small["status"]["allocatable"]["memory"] = "128Gi"
    tainted = node("g2", taints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}])
    tainted["status"]["allocatable"]["memory"] = "2048Gi"
    raw = convert_spec(nprocPerNode=8, requests={"cpu": "191500m", "memory": "1000Gi"})
    (err,) = errors(pf.evaluate_convert([small, tainted, cpu_node("c1")], raw))
    assert err.subject == "hooks.convert"
    assert err.message.startswith(
        "no node can take the convert pod: it asks 8 nvidia.com/gpu, 191500m cpu, 1000Gi memory "
        "(hooks.convert.nprocPerNode, hooks.convert.resources.requests) on a schedulable node matching "
        'nodeSelector {"node.kubernetes.io/instance-type": "p5en.48xlarge"}; found 2 matching of 3 nodes: '
    )
    # CPUs compared exactly: 191 allocatable is less than 191.5
    assert (
        "g1: allocatable cpu is 191, the convert pod asks 191500m; allocatable memory is 128Gi" in err.message
    )
    assert "g2: taint dedicated=train:NoSchedule not tolerated" in err.message
    assert "point hooks.convert.nodeSelector/tolerations" in err.message


def test_evaluate_convert_is_silent_when_the_convert_pod_does_not_run_in_this_phase() -> None:
    assert pf.evaluate_convert([], convert_spec(runsThisPhase=False)) == []
    assert errors(pf.evaluate_convert([], convert_spec(runsThisPhase=True)))


def test_evaluate_export_needs_a_node_of_its_pool_with_the_memory_a_whole_model_needs() -> None:
    raw = base_spec()
    raw["export"]["requests"] = {"cpu": "4", "memory": "124541Mi"}  # Qwen3-30B-A3B: 30.5e9 x 4 + 8 GiB
    raw["model"]["parameterCount"] = 30500000000
    small = node("g1")
    small["status"]["allocatable"]["memory"] = "64Gi"
    (err,) = errors(pf.evaluate_export([small, cpu_node("c1")], raw))
    assert err.subject == "hooks.export"
    assert err.message.startswith(
        "no node can hold the export pod: it asks 4 cpu, 124541Mi memory (the model's tensors twice in bf16, "
        "model.parameterCount=30500000000 x 4 bytes, plus 8 GiB; or hooks.export.resources.requests) on a "
        'schedulable node matching nodeSelector {"node.kubernetes.io/instance-type": "p5en.48xlarge"}; '
        "found 1 matching of 2 nodes: g1: allocatable memory is 64Gi, the export pod asks 124541Mi"
    ), err.message
    big = node("g2")
    big["status"]["allocatable"]["memory"] = "2048Gi"
    (found,) = pf.evaluate_export([small, big], raw)
    assert (found.level, found.message) == (pf.INFO, "export pod can run on g2")
    raw["export"]["enabled"] = False
    assert pf.evaluate_export([small], raw) == []
