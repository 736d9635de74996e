"""Render every values/ scenario with the real Helm 3 and Helm 4 and check the contract."""

from __future__ import annotations

import json
import math
import re
import sys
import time

import jsonschema
import pytest
import yaml
from chartlib import (
    CHART,
    HELMS,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    REPO,
    RUN_SPEC_SCHEMA,
    SCENARIOS,
    VALUES,
    docs,
    find,
    render,
    run,
    run_spec,
    tool,
)

# Expected derived topology per scenario (docs/chart.md "Scenarios and what they render"), computed by
# hand here.
EXPECTED = {
    "colocated": {
        "workerReplicas": 1,
        "clusterGpus": 8,
        "rolloutEngines": 8,
        "rolloutWorkers": 0,
        "actorGpus": 8,
    },
    "disaggregated": {
        "workerReplicas": 2,
        "clusterGpus": 16,
        "rolloutEngines": 8,
        "rolloutWorkers": 1,
        "actorGpus": 8,
    },
    "moe": {
        "workerReplicas": 2,
        "clusterGpus": 16,
        "rolloutEngines": 8,
        "rolloutWorkers": 0,
        "actorGpus": 16,
        "tensorParallel": 2,
        "expertParallel": 2,
    },
    "colocated + reward": {
        "workerReplicas": 1,
        "clusterGpus": 8,
        "rolloutEngines": 8,
        "rolloutWorkers": 0,
        "actorGpus": 8,
    },
    "colocated + hyperpod": {
        "workerReplicas": 1,
        "clusterGpus": 8,
        "rolloutEngines": 8,
        "rolloutWorkers": 0,
        "actorGpus": 8,
    },
    "single-node": {
        "workerReplicas": 1,
        "clusterGpus": 8,
        "rolloutEngines": 8,
        "rolloutWorkers": 0,
        "actorGpus": 8,
    },
    "reward": {"workerReplicas": 1, "clusterGpus": 8},
    "hyperpod": {"workerReplicas": 1, "clusterGpus": 8},
    "local-testbed": {"workerReplicas": 1, "clusterGpus": 1, "rolloutEngines": 1},
}
# an overlay that only places pods (HyperPod) keeps its base's topology, and so does the testbed overlay
# put first: the scenario file after it wins the run shape
EXPECTED["moe + hyperpod"] = EXPECTED["moe"]
EXPECTED["local-testbed + colocated"] = EXPECTED["colocated"]
# the rayJob overlay changes how the run is owned, not its shape
EXPECTED["rayjob"] = {"workerReplicas": 1, "clusterGpus": 8}
EXPECTED["moe + rayjob"] = EXPECTED["moe"]


def train_job(documents):
    jobs = [
        d
        for d in documents
        if d["kind"] == "Job" and re.fullmatch(rf"{RELEASE}-train-[0-9a-f]{{8}}", d["metadata"]["name"])
    ]
    assert len(jobs) <= 1
    return jobs[0] if jobs else None


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("helm", HELMS)
def test_scenario_renders(helm, scenario):
    documents = docs(render(helm, scenario))
    kinds = {d["kind"] for d in documents}
    assert "ConfigMap" in kinds
    mode = run_spec(documents)["mode"]
    if mode == "singleNode":
        assert "RayCluster" not in kinds and train_job(documents)
    elif mode == "rayJob":  # the RayJob owns its cluster: KubeRay creates the RayCluster
        assert "RayCluster" not in kinds and len(find(documents, "RayJob")) == 1
    else:
        assert len(find(documents, "RayCluster")) == 1


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm3_and_helm4_render_the_same_objects(scenario):
    assert docs(render("helm3", scenario)) == docs(render("helm4", scenario))


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("helm", HELMS)
def test_run_spec_validates_against_the_hooks_schema(helm, scenario):
    schema = json.loads(RUN_SPEC_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    documents = docs(render(helm, scenario))
    spec = run_spec(documents)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(spec), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    # the hook copy that pre-install hooks mount: a byte-identical run.json, and the dry run's manifests
    hook_copy = find(documents, "ConfigMap", f"{RELEASE}-run-hook")
    normal = find(documents, "ConfigMap", f"{RELEASE}-run")[0]["data"]
    assert hook_copy and hook_copy[0]["data"]["run.json"] == normal["run.json"]
    assert set(hook_copy[0]["data"]) == {"run.json", "manifests.yaml"} and set(normal) == {"run.json"}
    assert hook_copy[0]["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade,pre-delete"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_derived_topology(scenario):
    documents = docs(render("helm4", scenario))
    spec = run_spec(documents)
    t = spec["topology"]
    for key, want in EXPECTED[scenario].items():
        assert t[key] == want, f"{scenario}: topology.{key} = {t[key]}, expected {want}"
    # the arithmetic itself, independently of the table above
    engines = t["rolloutGpus"] // t["rolloutGpusPerEngine"]
    per_worker = t["gpusPerWorker"] // t["rolloutGpusPerEngine"]
    assert t["rolloutEngines"] == engines and t["enginesPerWorker"] == per_worker
    if spec["mode"] in ("rayCluster", "rayJob"):
        want = t["actorNodes"] + (0 if t["colocate"] else math.ceil(engines / per_worker))
        assert t["workerReplicas"] == want
        if spec["mode"] == "rayJob":  # the cluster KubeRay makes from the RayJob's spec.rayClusterSpec
            (job,) = find(documents, "RayJob")
            rc = {"metadata": job["metadata"], "spec": job["spec"]["rayClusterSpec"]}
            assert job["spec"]["jobId"] == spec["submit"]["submissionId"]
        else:
            (rc,) = find(documents, "RayCluster")
        (group,) = rc["spec"]["workerGroupSpecs"]
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == t["workerReplicas"]
        assert group["rayStartParams"]["num-gpus"] == str(t["gpusPerWorker"])
        assert group["rayStartParams"]["resources"] == '"{\\"gpu_node\\": 1}"'
        c = group["template"]["spec"]["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == str(t["gpusPerWorker"])
        assert spec["rayCluster"]["name"] == rc["metadata"]["name"]
        assert spec["rayCluster"]["headService"] == f"{rc['metadata']['name']}-head-svc"
        assert (
            spec["rayCluster"]["dashboardUrl"]
            == f"http://{rc['metadata']['name']}-head-svc.{NAMESPACE}.svc:8265"
        )
    else:
        job = train_job(documents)
        c = job["spec"]["template"]["spec"]["containers"][0]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == str(t["gpusPerWorker"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_train_args_carry_topology_and_batch_identity(scenario):
    spec = run_spec(docs(render("helm4", scenario)))
    args = spec["train"]["args"]

    def flag(name):
        return args[args.index(name) + 1]

    t = spec["topology"]
    assert flag("--actor-num-nodes") == str(t["actorNodes"])
    assert flag("--num-gpus-per-node") == str(t["gpusPerWorker"])
    assert flag("--rollout-num-gpus-per-engine") == str(t["rolloutGpusPerEngine"])
    assert flag("--tensor-model-parallel-size") == str(t["tensorParallel"])
    assert flag("--expert-model-parallel-size") == str(t["expertParallel"])
    assert ("--colocate" in args) == t["colocate"]
    assert int(flag("--rollout-batch-size")) * int(flag("--n-samples-per-prompt")) == int(
        flag("--global-batch-size")
    ) * int(flag("--num-steps-per-rollout"))
    assert flag("--load") == flag("--save") == spec["output"]["checkpointDir"]
    assert spec["output"]["dir"] == f"/fsx/runs/{NAMESPACE}/{RELEASE}"
    # each start's driver log goes under the run's output dir, outside what defines the run
    assert spec["submit"]["logDir"] == spec["output"]["dir"] + "/logs"
    assert "submit" not in spec["run"]["definedBy"]
    assert flag("--sglang-log-level") == flag("--sglang-log-level").lower()
    if "reward" in scenario.split(" + "):
        assert flag("--rm-type") == "remote_rm"
        assert flag("--rm-url") == f"http://{RELEASE}-reward.{NAMESPACE}.svc:8080/score"
    if scenario.split(" + ")[0] == "moe":
        assert flag("--sglang-mem-fraction-static") == "0.75"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_mount_path_in_every_pod(scenario):
    documents = docs(render("helm4", scenario))
    claim = run_spec(documents)["storage"]["claimName"]
    pods = []
    for d in documents:
        if d["kind"] == "RayCluster":
            pods.append(d["spec"]["headGroupSpec"]["template"]["spec"])
            pods += [g["template"]["spec"] for g in d["spec"]["workerGroupSpecs"]]
        elif d["kind"] in ("Job", "Deployment"):
            pods.append(d["spec"]["template"]["spec"])
    assert pods
    for spec in pods:
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        if "shared" not in vols:  # preflight/verify/wait-ready do not need storage
            continue
        assert vols["shared"]["persistentVolumeClaim"]["claimName"] == claim
        for c in spec["containers"]:
            mounts = [m for m in c.get("volumeMounts", []) if m["name"] == "shared"]
            assert mounts and mounts[0]["mountPath"] == "/fsx"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_secrets_only_by_reference(scenario):
    text = render("helm4", scenario)
    documents = docs(text)
    assert not find(documents, "Secret"), "the chart must never create Secrets"
    for d in documents:
        for env in _all_env(d):
            if env["name"] in ("HF_TOKEN", "WANDB_API_KEY"):
                assert "value" not in env and "secretKeyRef" in env["valueFrom"]


def _all_env(obj):
    if isinstance(obj, dict):
        if "env" in obj and isinstance(obj["env"], list):
            yield from obj["env"]
        for v in obj.values():
            yield from _all_env(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_env(v)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_ray_ports_stay_inside_the_release(scenario):
    documents = docs(render("helm4", scenario))
    for svc in find(documents, "Service"):
        assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
    for rc in find(documents, "RayCluster"):
        assert rc["spec"]["headGroupSpec"]["serviceType"] == "ClusterIP"
    (np,) = find(documents, "NetworkPolicy", f"{RELEASE}-ray")
    release = [
        {"key": "app.kubernetes.io/instance", "operator": "In", "values": [RELEASE]},
        {"key": "app.kubernetes.io/name", "operator": "In", "values": ["miles"]},
    ]
    ray_pods = {
        "matchExpressions": [
            *release,
            {
                "key": "app.kubernetes.io/component",
                "operator": "In",
                "values": ["ray-head", "ray-worker", "single-node"],
            },
        ]
    }
    assert np["spec"]["podSelector"] == ray_pods
    # every port only from the release's own Ray pods; anything else of the release to named ports only;
    # in mode rayJob the KubeRay operator too, which polls the job, to the dashboard port alone
    operator = {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "kuberay-operator"}},
    }
    rayjob = bool(find(documents, "RayJob"))
    every_port, *named_ports = np["spec"]["ingress"]
    assert every_port == {"from": [{"podSelector": ray_pods}]}
    operator_admitted = False
    for rule in named_ports:
        assert rule["ports"], rule
        for peer in rule["from"]:
            if rayjob and peer == operator:
                assert rule["ports"] == [{"port": 8265, "protocol": "TCP"}], rule
                operator_admitted = True
                continue
            assert list(peer) == ["podSelector"], peer  # no namespaceSelector, no ipBlock
            assert peer["podSelector"]["matchExpressions"][:2] == release
    assert operator_admitted == rayjob


def test_kube_version_pin_satisfies_chart_yaml():
    """kubeconform's pinned version must be one the chart declares; an older one is refused by Helm."""
    ok = run(
        [tool("helm4"), "template", "x", str(CHART), "--kube-version", KUBE_VERSION],
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    old = run(
        [tool("helm4"), "template", "x", str(CHART), "--kube-version", "1.29.0"],
        check=False,
    )
    assert old.returncode != 0 and "kubeVersion" in old.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_bad_values_fail_once_with_every_problem(helm):
    res = run(
        [
            tool(helm),
            "template",
            "x",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "topology.rolloutGpus=4",
            "--set",
            "recipe.rolloutBatchSize=16",
            "--set",
            "rayCluster.head.shmSize=32Gi",
        ],
        check=False,
    )
    assert res.returncode != 0
    # Helm prefixes the template that failed: the chart's value check, not whichever template came first
    prefix = "Error: execution error at (miles/templates/values/validate.yaml:"
    assert res.stderr.startswith(prefix), res.stderr
    assert "miles: 3 invalid value(s):" in res.stderr
    for field in (
        "topology.rolloutGpus: expected",
        "recipe.globalBatchSize: expected",
        "rayCluster.head.shmSize: expected",
    ):
        assert field in res.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_schema_rejects_unknown_keys(helm):
    res = run(
        [
            tool(helm),
            "template",
            "x",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "rayCluster.workers.efaCount=16",
        ],
        check=False,
    )
    assert res.returncode != 0 and "efaCount" in res.stderr


def test_values_schema_is_strict_draft7():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    text = json.dumps(schema)
    assert '"$ref": "http' not in text, "no remote $ref"
    # every object is closed (chart-defined, and Kubernetes' own definitions made strict); maps are typed
    # by their key and value formats
    typed_maps = {"hookAnnotations", "annotations", "labels", "resourceMap"}

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, (
                    f"{path}: additionalProperties must be false"
                )
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}")

    walk(schema, "#")
    assert set(schema["definitions"]) >= typed_maps
    for name in typed_maps:
        assert schema["definitions"][name]["additionalProperties"] is False, name
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    # a misspelled key anywhere is rejected
    values["rayCluster"]["workers"]["efaCount"] = 16
    assert not jsonschema.Draft7Validator(schema).is_valid(values)


@pytest.mark.parametrize("helm", HELMS)
def test_helm_template_time(helm, record_property):
    """Measured: a full render must stay interactive (it validates and hashes the cluster spec)."""
    start = time.perf_counter()
    for _ in range(3):
        run(
            [
                tool(helm),
                "template",
                RELEASE,
                str(CHART),
                "--kube-version",
                KUBE_VERSION,
                "-f",
                str(VALUES / "values-moe.yaml"),
            ]
        )
    per_render = (time.perf_counter() - start) / 3
    record_property("helm_template_seconds", round(per_render, 3))
    print(f"{helm} template: {per_render:.3f}s per render")
    assert per_render < 5.0


def test_values_schema_is_current():
    """values.schema.json is generated from values.yaml + the constraints in values_schema_gen.py."""
    res = run(
        [
            sys.executable,
            str(REPO / "ci" / "values_schema_gen.py"),
            "--check",
        ],
        check=False,
    )
    assert res.returncode == 0, res.stderr


# a credential written into the values (each in a place the credential checks cover): the render fails,
# naming where it is, and shows the value in no message
GITHUB_TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789ABCD"
OPENAI_KEY = "sk-" + "abcdefghijklmnopqrstuvwxyz"
CREDENTIALS_IN_VALUES = {
    "token anywhere": (
        ["--set-string", f"scheduling.podAnnotations.note={GITHUB_TOKEN}"],
        "scheduling.podAnnotations.note", GITHUB_TOKEN),
    "URL with a password": (
        ["--set", "recipe.reward.url=https://scorer:pw-not-shown@reward.example/score"],
        "recipe.reward.url", "pw-not-shown"),
    "convert command flag": (
        ["--set-json", 'hooks.convert.command=["python3","c.py","--hf-token=tok-not-shown"]'],
        "hooks.convert.command[2]", "tok-not-shown"),
    "ray start parameter": (
        ["--set", "rayCluster.head.rayStartParams.redis-password=pw-not-shown"],
        "rayCluster.head.rayStartParams.redis-password", "pw-not-shown"),
    "flag and value in one item": (
        ["--set-json", 'recipe.extraArgs=["--wandb-key key-not-shown"]'],
        "recipe.extraArgs[0]", "key-not-shown"),
    "Redis address with a password": (
        ["--set", "rayCluster.gcsFaultTolerance.enabled=true",
         "--set", "rayCluster.gcsFaultTolerance.redisAddress=redis://default:pw-not-shown@redis:6379"],
        "rayCluster.gcsFaultTolerance.redisAddress", "pw-not-shown"),
    "env value shaped like a token": (
        ["--set", "hooks.extraEnv[0].name=MIRROR", "--set", f"hooks.extraEnv[0].value={OPENAI_KEY}"],
        "hooks.extraEnv[0] (MIRROR)", OPENAI_KEY),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CREDENTIALS_IN_VALUES))
def test_a_credential_in_the_values_is_refused_by_where_it_is_never_shown(case: str) -> None:
    args, where, secret = CREDENTIALS_IN_VALUES[case]
    res = run([tool("helm4"), "template", RELEASE, str(CHART), *args], check=False)
    assert res.returncode != 0, res.stdout[:500]
    assert f"- {where}: expected" in res.stderr, res.stderr
    assert secret not in res.stderr + res.stdout
