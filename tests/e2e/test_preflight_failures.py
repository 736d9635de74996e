"""Failure paths: each makes `helm install` fail at preflight with a message naming the cause, and leaves no
RayCluster behind (the real preflight code against the real API server and KubeRay CRD); and the valid
configurations preflight must not refuse."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
import yaml

pytestmark = pytest.mark.cluster

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]


def install_fails(ns: str, extra: list[str]) -> str:
    args = ["install", "miles", str(tb.CHART), "-n", ns]
    for v in COLOCATED:
        args += ["-f", str(v)]
    res = tb.helm("helm4", *args, *extra, "--wait", "--timeout", "3m", check=False)
    assert res.rc != 0, f"helm install unexpectedly succeeded:\n{res.out[-2000:]}"
    assert "preflight" in res.err + res.out, res.err[-3000:]
    logs = tb.kubectl("logs", "-n", ns, "job/miles-preflight", check=False).out
    assert tb.kget("rayclusters.ray.io", ns)["items"] == [], "a RayCluster was left behind"
    return logs + res.err + res.out


def test_not_enough_gpu_nodes(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    extra = ["--set", "topology.actorNodes=4", "--set", "topology.rolloutGpus=32"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "4" in out and "node" in out.lower(), out[-3000:]


def test_a_gpu_node_held_by_another_pod(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """Both GPU nodes are installed, one is fully held by someone else's pod: counting installed GPUs said
    "2 usable worker node(s)" and the run then sat with a worker Pending. The scheduler, asked through a
    stand-in of each worker, says only one fits, and the install fails naming what it said. With
    hooks.preflight.whenFull=wait the run waits instead, visibly and no longer than its deadline."""
    extra = ["--set", "topology.actorNodes=2", "--set", "topology.rolloutGpus=16"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    busy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other-release-worker", "namespace": namespace},
        "spec": {
            "nodeName": "gpu-0001",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "train",
                    "image": "localhost/miles-standin:testbed",
                    "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }
    tb.kubectl_apply(json.dumps(busy))
    try:
        tb.wait_until(
            "the other release's pod to run on gpu-0001",
            lambda: (
                tb.kget("pod", namespace, "other-release-worker").get("status", {}).get("phase") == "Running"
            ),
            timeout=60,
        )
        out = install_fails(namespace, extra)
        assert "1 of 2 GPU pod(s) (RayCluster/" in out, out[-3000:]
        assert "Insufficient nvidia.com/gpu" in out, out[-3000:]
        assert "hooks.preflight.whenFull=wait" in out, out[-3000:]
        selector = "app.kubernetes.io/component=hook-capacity-check"
        assert tb.kget("pods", namespace, selector=selector)["items"] == [], "a stand-in was left behind"

        # by choice, the run waits: preflight warns and lets it on, one worker stays Pending, and the mode's
        # deadline ends the wait (wait-ready fails the release after checks.waitReadyTimeoutSeconds, quoting
        # the scheduler); `helm test` shows the same reason for the run that waits
        waiting = [
            *extra,
            "--set",
            "hooks.preflight.whenFull=wait",
            "--set",
            "checks.waitReadyTimeoutSeconds=30",
        ]
        started = time.time()
        res = tb.run(tb.deploy_argv("helm4", "upgrade", "miles", namespace, COLOCATED, *waiting), check=False)
        said = (
            res.out + res.err + tb.kubectl("logs", "-n", namespace, "job/miles-wait-ready", check=False).out
        )
        assert res.rc != 0 and "not ready after 30s (checks.waitReadyTimeoutSeconds)" in said, said[-4000:]
        assert "unschedulable: " in said and "Insufficient nvidia.com/gpu" in said, said[-4000:]
        (preflight,) = [e for e in tb.journal(namespace, since=started) if e["container"] == "preflight"]
        warned = Path(preflight["log"]).read_text()
        assert "hooks.preflight.whenFull is 'wait', so the run is installed" in warned, warned[-3000:]
        assert "wait-ready fails the release after checks.waitReadyTimeoutSeconds (30s)" in warned, warned[
            -3000:
        ]
        test = tb.helm("helm4", "test", "miles", "-n", namespace, "--timeout", "3m", check=False)
        shown = (
            test.out
            + test.err
            + tb.kubectl("logs", "-n", namespace, "pod/miles-test-status", check=False).out
        )
        assert test.rc != 0 and "RayCluster not ready: " in shown, shown[-3000:]
        assert "unschedulable: " in shown and "Insufficient nvidia.com/gpu" in shown, shown[-3000:]
    finally:
        tb.kubectl(
            "delete", "pod", "-n", namespace, "other-release-worker", "--wait=true", "--grace-period=0"
        )


def test_checkpoints_beyond_the_claim(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """The run's checkpoint budget (chart) against the real claim's capacity (1200Gi on the testbed)."""
    extra = ["--set", "model.parameterCount=300000000000"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "persistentvolumeclaim/fsx-claim" in out, out[-3000:]
    assert "capacity 1.2 TiB, expected at least" in out, out[-3000:]
    assert "5 checkpoint(s) on disk at once" in out and "recipe.checkpoint.retainInterval" in out, out[-3000:]


def test_efa_below_node_allocatable(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    extra = ["--set", "gpuPods.efa.count=8"]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "efa" in out.lower() and "15" in out, out[-3000:]


def test_no_node_for_the_convert_pod(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """The convert pod sized beyond every node: without preflight its Job would stay Pending for hours."""
    extra = [
        "--set",
        "hooks.convert.resources.requests.memory=4Ti",
        "--set",
        "hooks.convert.resources.limits.memory=4Ti",
    ]
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "hooks.convert: no node can take the convert pod: it asks 1 nvidia.com/gpu" in out, out[-3000:]
    assert "the convert pod asks 4Ti" in out and "hooks.convert.resources.requests" in out, out[-3000:]
    assert tb.kget("pods", namespace, selector="app.kubernetes.io/component=hook-convert")["items"] == []


AFFINITY = "gpuPods.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
# What only the live API server can judge, one case per kind of rule. Each case is its own install: the
# API server stops at the first admission plugin that refuses an object. (What the values alone show is
# refused by the chart at render time: charts/miles/tests/values/validate_test.yaml.)
API_SERVER_CASES = {
    "admission plugin: the PriorityClass must exist": (
        [],
        ["--set", "scheduling.priorityClassName=no-such-priority"],
        ["no PriorityClass with name no-such-priority was found"],
    ),
    "the namespace's ResourceQuota": (
        [["-n", "{ns}", "create", "quota", "gpus", "--hard=requests.nvidia.com/gpu=0"]],
        [],
        ["exceeded quota: gpus"],
    ),
    "the namespace's Pod Security level": (
        [["label", "namespace", "{ns}", "pod-security.kubernetes.io/enforce=baseline"]],
        [
            "--set", "gpuPods.securityContext.privileged=true",
            "--set", "gpuPods.securityContext.allowPrivilegeEscalation=true",
        ],
        ['violates PodSecurity "baseline', "privileged"],
    ),
    "a restricted namespace and the miles image, which runs as root": (
        [["label", "namespace", "{ns}", "pod-security.kubernetes.io/enforce=restricted"]],
        [],
        ['violates PodSecurity "restricted', "pod-security.kubernetes.io/enforce=restricted refuses it"],
    ),
    "Pod validation of a pass-through object": (
        [],
        [
            "--set", f"{AFFINITY}.matchExpressions[0].key=topology.kubernetes.io/zone",
            "--set", f"{AFFINITY}.matchExpressions[0].operator=In",
        ],
        ["matchExpressions[0].values", "must be specified when `operator` is 'In' or 'NotIn'"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", API_SERVER_CASES)
def test_what_the_api_server_refuses_fails_before_any_download(
    case: str, namespace: str, inputs_ready: Callable[..., Any]
) -> None:
    """preflight's server-side dry run sends each RayCluster pod template as a Pod, names it with the API
    server's reason, and the install stops before prepare-data and convert exist."""
    setup, extra, expected = API_SERVER_CASES[case]
    for args in setup:
        tb.kubectl(*(a.format(ns=namespace) for a in args))
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    assert "spec.workerGroupSpecs[0].template (as a Pod)" in out, out[-4000:]
    for text in expected:
        assert text in out, out[-4000:]
    for step in ("prepare-data", "convert"):
        found = tb.kubectl("get", "job", f"miles-{step}", "-n", namespace, check=False)
        assert found.rc != 0, f"job/miles-{step} exists: preflight let the install go on"


RESTRICTED_REFUSES = (
    "spec.headGroupSpec.template (as a Pod)",
    "spec.workerGroupSpecs[0].template (as a Pod)",
    "Job/miles-convert spec.template (as a Pod)",
)


def test_restricted_namespace_without_the_dry_run(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    """With hooks.preflight.apiDryRun off preflight sends nothing, yet a restricted namespace still fails the
    install at preflight: it reads the namespace's label (its ClusterRole's one namespace get) and names
    each pod of the miles image, before any download or a convert pod that would never start."""
    extra = ["--set", "hooks.preflight.apiDryRun=false"]
    tb.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    inputs_ready(COLOCATED, "miles", namespace, extra)
    out = install_fails(namespace, extra)
    for subject in RESTRICTED_REFUSES:
        assert f"{subject}: container" in out, out[-4000:]
    assert "label pod-security.kubernetes.io/enforce=restricted refuses it" in out, out[-4000:]
    assert "label the namespace pod-security.kubernetes.io/enforce=baseline" in out, out[-4000:]
    assert "Job/miles-wait-ready spec.template (as a Pod): " not in out, out[-4000:]
    for step in ("prepare-data", "convert"):
        found = tb.kubectl("get", "job", f"miles-{step}", "-n", namespace, check=False)
        assert found.rc != 0, f"job/miles-{step} exists: preflight let the install go on"


REFUSED_POD = re.compile(r"^(?P<subject>\S+ spec\.\S+ \(as a Pod\)): (?P<why>.*)$")


def preflight_refused_pods(namespace: str, files: list[str], tmp_path: Path, dry_run: bool) -> set[str]:
    """The pods preflight (the real CLI, against the testbed's API server) refuses for this rendering."""
    out = tb.helm(
        "helm4", "template", "miles", str(tb.CHART), "-n", namespace, *files,
        "--set", f"hooks.preflight.apiDryRun={str(dry_run).lower()}",
    )  # fmt: skip
    (hook_copy,) = [
        d
        for d in yaml.safe_load_all(out.out)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "miles-run-hook"
    ]
    spec = tmp_path / f"dry-run-{dry_run}" / "run.json"
    spec.parent.mkdir()
    spec.write_text(hook_copy["data"]["run.json"])
    (spec.parent / "manifests.yaml").write_text(hook_copy["data"]["manifests.yaml"])
    cli = str(tb.REPO / ".venv" / "bin" / "miles-hooks")
    res = tb.run([cli, "preflight", "--log-format", "json", "--spec", str(spec)], check=False)
    assert res.rc != 0, res.out[-3000:] + res.err[-3000:]
    refused = set()
    for line in (res.out + res.err).splitlines():
        record = json.loads(line) if line.startswith("{") else {}
        m = REFUSED_POD.match(str(record.get("msg", "")))
        if record.get("level") == "error" and m:
            assert "pod-security.kubernetes.io/enforce=restricted refuses it" in m["why"], line
            refused.add(m["subject"])
    return refused


@pytest.mark.parametrize(
    "scenario", ["values-colocated.yaml", "values-disaggregated.yaml", "values-single-node.yaml"]
)
def test_the_label_check_refuses_exactly_the_pods_pod_security_refuses(
    scenario: str, namespace: str, tmp_path: Path
) -> None:
    """The label check without the dry run is held to Pod Security admission itself: in a restricted
    namespace it names exactly the pods the real API server's dry run refuses, for each scenario."""
    tb.kubectl("-n", namespace, "create", "serviceaccount", "miles-hooks")
    tb.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    files = [arg for v in [tb.OVERLAY, tb.VALUES / scenario] for arg in ("-f", str(v))]
    by_admission = preflight_refused_pods(namespace, files, tmp_path, dry_run=True)
    by_label = preflight_refused_pods(namespace, files, tmp_path, dry_run=False)
    assert by_admission, "the dry run refused no pod in a restricted namespace"
    assert by_label == by_admission


KUBERAY_CRDS = tb.REPO / ".tools" / "kuberay"
# the oldest KubeRay the chart supports (ci/kubeconform/versions.env: oldest first); make tools keeps its CRDs
OLDEST_KUBERAY = re.findall(
    r"^KUBERAY_VERSIONS=(\S+)", (tb.REPO / "ci" / "kubeconform" / "versions.env").read_text(), re.M
)[0]


def _serve_raycluster_schema(crd_file: Path, scratch: Path) -> None:
    """Serve the RayCluster CRD's spec from `crd_file`, updating the live CRD: no RayCluster is lost."""
    live = tb.kget("crd", name="rayclusters.ray.io")
    live["spec"] = yaml.safe_load(crd_file.read_text())["spec"]
    live.pop("status", None)
    scratch.write_text(json.dumps(live))
    tb.kubectl("replace", "-f", str(scratch))


def _upgrade_strategy_served(scratch: Path) -> bool:
    """Whether server-side apply (a dry run) accepts spec.upgradeStrategy on a RayCluster right now."""
    head = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "x:1"}]}}}
    probe = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "schema-probe", "namespace": "default"},
        "spec": {"upgradeStrategy": {"type": "Recreate"}, "headGroupSpec": head},
    }
    scratch.write_text(json.dumps(probe))
    res = tb.kubectl(
        "apply", "--server-side", "--dry-run=server", "--validate=false", "-f", str(scratch), check=False
    )
    return res.rc == 0


def test_a_field_the_oldest_supported_kuberay_lacks(
    namespace: str, inputs_ready: Callable[..., Any], tmp_path: Path
) -> None:
    """On a cluster whose RayCluster CRD is the oldest supported KubeRay's (no spec.upgradeStrategy, no
    spec.authOptions), the defaults (rayCluster.operatorVersion 1.6.2: upgradeStrategy method crd, the token
    declared in authOptions) fail at preflight naming the values to change. The API server names one field it
    does not know, either of the two from one run to the next. (Server-side apply answers the undeclared
    field with HTTP 500: preflight once failed on it with 'Kubernetes API error 500 Internal Server Error'
    and nothing else.)"""
    extra: list[str] = []
    inputs_ready(COLOCATED, "miles", namespace, extra)
    crd, probe = tmp_path / "crd.json", tmp_path / "probe.json"
    _serve_raycluster_schema(KUBERAY_CRDS / f"crds-{OLDEST_KUBERAY}" / "ray.io_rayclusters.yaml", crd)
    try:
        tb.wait_until("the old schema served", lambda: not _upgrade_strategy_served(probe), timeout=60)
        out = install_fails(namespace, extra)
    finally:
        _serve_raycluster_schema(KUBERAY_CRDS / "crds" / "ray.io_rayclusters.yaml", crd)
        tb.wait_until("the testbed's schema again", lambda: _upgrade_strategy_served(probe), timeout=60)
    upgrade = (
        "upgrade the KubeRay operator and its CRDs, or change rayCluster.operatorVersion to the operator's"
    )
    hints = {
        ".spec.upgradeStrategy": f"KubeRay 1.6 added it): {upgrade} version (below 1.6 the chart renders "
        "nameHash), or set rayCluster.upgradeStrategy.method: nameHash",
        ".spec.authOptions": f"KubeRay 1.6, with its secretName added it): {upgrade} version (below 1.6 the "
        "chart leaves the token to the Ray pods' env), or set secrets.rayAuth.key: token",
    }
    reported = [field for field in hints if f"{field}: field not declared in schema" in out]
    assert reported, out[-4000:]
    for field in reported:
        assert f"has no {field} ({hints[field]}" in out, out[-4000:]
    assert "Kubernetes API error 500" not in out, out[-4000:]


def test_missing_secret(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    inputs_ready(COLOCATED, "miles", namespace)
    tb.kubectl("-n", namespace, "delete", "secret", "hf-token")
    out = install_fails(namespace, [])
    assert "hf-token" in out, out[-3000:]


def test_missing_kuberay_crd(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    inputs_ready(COLOCATED, "miles", namespace)
    crd = tb.REPO / ".tools" / "kuberay" / "crds" / "ray.io_rayclusters.yaml"
    tb.kubectl("delete", "crd", "rayclusters.ray.io", "--wait=true", timeout=120)
    try:
        args = ["install", "miles", str(tb.CHART), "-n", namespace]
        for v in COLOCATED:
            args += ["-f", str(v)]
        res = tb.helm("helm4", *args, "--wait", "--timeout", "3m", check=False)
        assert res.rc != 0
        out = res.err + res.out + tb.kubectl("logs", "-n", namespace, "job/miles-preflight", check=False).out
        assert "rayclusters.ray.io" in out or "RayCluster" in out, out[-3000:]
    finally:
        tb.kubectl("create", "--validate=false", "-f", str(crd))
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        tb.wait_until(
            "the RayCluster CRD to be served again",
            lambda: (
                tb.kubectl("get", "crd/rayclusters.ray.io", "-o", f"jsonpath={jsonpath}", check=False).out
                == "True"
            ),
            timeout=300,
            interval=1,
        )


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([tb.VALUES / "values-colocated.yaml"], id="colocated with a GPU head"),
        pytest.param([tb.VALUES / "values-disaggregated.yaml"], id="disaggregated with a GPU head"),
    ],
)
def test_preflight_passes_valid_configurations_it_once_refused(
    values: list[Path], namespace: str, tmp_path: Path
) -> None:
    """A GPU head puts its GPUs into the run spec's clusterGpus: a preflight that re-derived the topology
    refused it. preflight (the real CLI, against the testbed's API server) now takes the chart's numbers as
    they are, and its dry run accepts every object the chart renders for these configurations."""
    # what exists when Helm starts preflight: the hooks' ServiceAccount (a weight -10 hook)
    tb.kubectl("-n", namespace, "create", "serviceaccount", "miles-hooks")
    # the overlay without its placement of the head on the real node: this head goes to the GPU nodes
    overlay = yaml.safe_load(tb.OVERLAY.read_text())
    for key in ("nodeSelector", "tolerations"):
        del overlay["rayCluster"]["head"][key]
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    files = [arg for v in [tmp_path / "overlay.yaml", *values] for arg in ("-f", str(v))]
    out = tb.helm(
        "helm4",
        "template",
        "miles",
        str(tb.CHART),
        "-n",
        namespace,
        *files,
        "--set",
        "rayCluster.head.gpus=1",
        "--set",
        r"rayCluster.head.nodeSelector.node\.kubernetes\.io/instance-type=ml.p5en.48xlarge",
        # what is judged here is the chart's numbers and the dry run: a GPU head beside two 8-GPU workers
        # needs three GPU nodes, and the testbed has two (the capacity check says so, rightly)
        "--set",
        "hooks.preflight.capacityCheck=false",
    )
    (hook_copy,) = [
        d
        for d in yaml.safe_load_all(out.out)
        if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "miles-run-hook"
    ]
    spec = tmp_path / "run.json"
    spec.write_text(hook_copy["data"]["run.json"])
    (tmp_path / "manifests.yaml").write_text(hook_copy["data"]["manifests.yaml"])
    assert json.loads(spec.read_text())["rayCluster"]["headGpus"] == 1
    res = tb.run(
        [str(tb.REPO / ".venv" / "bin" / "miles-hooks"), "preflight", "--spec", str(spec)],
        check=False,
    )
    assert res.rc == 0, res.out[-3000:] + res.err[-3000:]
    assert re.search(r"the API server accepts (\d+) of \1 object", res.out + res.err), res.out + res.err
