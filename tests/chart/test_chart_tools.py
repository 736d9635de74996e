"""Run the real linters and validators on the chart: kubeconform (strict, generated schemas),
checkov (allowlist with reasons), ct lint, helm-docs drift, helm-unittest under both Helms, hadolint."""

from __future__ import annotations

import json
import shutil
import tarfile

import pytest
import yaml
from chartlib import (
    CHART,
    HELMS,
    KUBE_VERSION,
    KUBERAY_VERSIONS,
    REPO,
    SCENARIOS,
    VALUES,
    docs,
    kubeconform_cmd,
    render,
    run,
    run_spec,
    tool,
)

ALLOWLIST = REPO / "ci" / "checkov-allowlist.yaml"


OLDEST_KUBERAY, NEWEST_KUBERAY = KUBERAY_VERSIONS[0], KUBERAY_VERSIONS[-1]


def for_operator(kuberay: str) -> tuple[str, ...]:
    return ("--set-string", f"rayCluster.operatorVersion={kuberay}")


@pytest.mark.parametrize("kuberay", KUBERAY_VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kubeconform_strict(scenario, kuberay, kubeconform_schemas, tmp_path):
    """Each scenario rendered for each supported operator (rayCluster.operatorVersion) is valid against
    that operator's CRDs."""
    manifest = tmp_path / f"{scenario}.yaml"
    extra = for_operator(kuberay)
    if run_spec(docs(render("helm4", scenario)))["mode"] == "rayJob" and kuberay.startswith("1.5."):
        # KubeRay 1.5 has no authOptions, which mode rayJob needs with Ray's token (refused when rendering)
        extra += ("--set", "secrets.rayAuth.enabled=false")
    manifest.write_text(render("helm4", scenario, extra))
    res = run([*kubeconform_cmd(kubeconform_schemas, kuberay), str(manifest)], check=False)
    report = json.loads(res.stdout)
    summary = report["summary"]
    assert res.returncode == 0 and summary["invalid"] == 0 and summary["errors"] == 0, res.stdout[-4000:]
    assert summary["skipped"] == 0, "every kind must have a schema"
    assert summary["valid"] == len(docs(manifest.read_text()))


@pytest.mark.parametrize("kuberay", KUBERAY_VERSIONS)
def test_kubeconform_strict_with_every_optional_object(kuberay, kubeconform_schemas, tmp_path):
    """Both PodMonitors, the dashboard, FSx static PV, GCS FT, GPU head: objects no scenario turns on."""
    extra = (
        "--set", "reward.podMonitor.enabled=true",
        "--set", "rayCluster.podMonitor.enabled=true",
        "--set", "dashboards.enabled=true",
        "--set", "storage.type=fsxStatic",
        "--set", "storage.fsxStatic.fileSystemId=fs-0123456789abcdef0",
        "--set", "storage.fsxStatic.dnsName=fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
        "--set", "storage.fsxStatic.mountName=abcdefgh",
        "--set", "rayCluster.gcsFaultTolerance.enabled=true",
        "--set", "rayCluster.gcsFaultTolerance.redisAddress=redis:6379",
        "--set", "rayCluster.gcsFaultTolerance.redisPasswordSecret=redis",
        "--set", "rayCluster.head.gpus=1",
        "--set", "scheduling.kueueQueue=team-a",
        "--set", "scheduling.kueuePriorityClass=research-high",
        "--set", "rayCluster.labels.cost-center=ml",
        *for_operator(kuberay),
    )  # fmt: skip
    manifest = tmp_path / "optional.yaml"
    text = render("helm4", "colocated + reward", extra)
    manifest.write_text(text)
    kinds = {d["kind"] for d in docs(text)}
    assert {"PodMonitor", "PersistentVolume", "PersistentVolumeClaim"} <= kinds
    assert {"miles-ray", "miles-reward", "miles-dashboard"} <= {
        d["metadata"]["name"] for d in docs(text) if d["kind"] in ("PodMonitor", "ConfigMap")
    }
    res = run([*kubeconform_cmd(kubeconform_schemas, kuberay), str(manifest)], check=False)
    summary = json.loads(res.stdout)["summary"]
    assert res.returncode == 0 and summary["skipped"] == 0, res.stdout[-4000:]


def test_kubeconform_strict_with_dynamic_fsx(kubeconform_schemas, tmp_path):
    extra = (
        "--set", "storage.type=fsxDynamic",
        "--set", "storage.fsxDynamic.subnetId=subnet-0123456789abcdef0",
        "--set", "storage.fsxDynamic.securityGroupIds={sg-0123456789abcdef0}",
    )  # fmt: skip
    manifest = tmp_path / "dynamic.yaml"
    text = render("helm4", "single-node", extra)
    manifest.write_text(text)
    assert "StorageClass" in {d["kind"] for d in docs(text)}
    res = run([*kubeconform_cmd(kubeconform_schemas, NEWEST_KUBERAY), str(manifest)], check=False)
    assert res.returncode == 0, res.stdout[-4000:]


def test_kubeconform_catches_a_field_the_raycluster_crd_lacks(kubeconform_schemas, tmp_path):
    """Proves the generated RayCluster schema is strict and operatorVersion matters: the oldest supported
    KubeRay has no spec.upgradeStrategy (1.6 added it), so the cluster rendered for the newest operator
    (method crd) fails against the oldest CRD, validates against the newest, and the cluster rendered for
    the oldest operator carries no upgradeStrategy."""
    newest, oldest = tmp_path / "newest.yaml", tmp_path / "oldest.yaml"
    newest.write_text(render("helm4", "colocated", for_operator(NEWEST_KUBERAY)))
    oldest.write_text(render("helm4", "colocated", for_operator(OLDEST_KUBERAY)))
    assert "upgradeStrategy:" in newest.read_text() and "upgradeStrategy:" not in oldest.read_text()
    res = run([*kubeconform_cmd(kubeconform_schemas, OLDEST_KUBERAY), str(newest)], check=False)
    assert res.returncode != 0 and "upgradeStrategy" in res.stdout
    res = run([*kubeconform_cmd(kubeconform_schemas, NEWEST_KUBERAY), str(newest)], check=False)
    assert res.returncode == 0, res.stdout[-4000:]


def test_kubeconform_catches_a_misspelled_pod_field(kubeconform_schemas, tmp_path):
    documents = docs(render("helm4", "single-node"))
    (job,) = [d for d in documents if d["kind"] == "Job" and d["metadata"]["name"].startswith("miles-train-")]
    job["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(yaml.safe_dump(job))
    res = run([*kubeconform_cmd(kubeconform_schemas, NEWEST_KUBERAY), str(manifest)], check=False)
    assert res.returncode != 0 and "resourcez" in res.stdout


def _allowlist() -> list[dict]:
    entries = yaml.safe_load(ALLOWLIST.read_text())["allow"]
    for e in entries:
        assert e.get("check", "").startswith("CKV"), e
        assert len(e.get("why", "").strip()) > 20, f"{e['check']}: every allowlist entry must say why"
        assert e.get("resources"), f"{e['check']}: list the resources it applies to"
    return entries


def _allowed(entries, check_id: str, resource: str) -> bool:
    # checkov names resources "<Kind>.<namespace>.<name>"; entries match on "<Kind>.<name>" with RELEASE
    kind, _, rest = resource.partition(".")
    name = rest.split(".", 1)[-1] if rest.count(".") else rest
    for e in entries:
        if e["check"] != check_id:
            continue
        for r in e["resources"]:
            rk, _, rn = r.partition(".")
            rn = rn.replace("RELEASE", "miles")
            if rk == kind and (rn in ("*", name) or (rn.endswith("*") and name.startswith(rn[:-1]))):
                return True
    return False


def ray_pods(rendered: str) -> list[dict]:
    """The Ray pod templates as Pods (checkov does not look inside a custom resource; KubeRay creates
    exactly these pods): a RayCluster's, or a RayJob's cluster's, head and workers, named raycluster-head /
    raycluster-worker-<group>, and a RayJob's submitter, rayjob-submitter."""
    templates = []
    for doc in docs(rendered):
        if doc["kind"] == "RayJob":
            cluster = doc["spec"]["rayClusterSpec"]
            templates.append(("rayjob-submitter", doc["spec"]["submitterPodTemplate"]))
        elif doc["kind"] == "RayCluster":
            cluster = doc["spec"]
        else:
            continue
        templates.append(("raycluster-head", cluster["headGroupSpec"]["template"]))
        templates += [
            (f"raycluster-worker-{g['groupName']}", g["template"])
            for g in cluster.get("workerGroupSpecs", [])
        ]
    pods = []
    for name, template in templates:
        metadata = {**template.get("metadata", {}), "name": name, "namespace": "ml"}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
    return pods


@pytest.fixture(scope="module")
def checkov_report(tmp_path_factory) -> dict:
    """One checkov run over every rendered scenario (one file each, the Ray pods included as Pods); tests
    read it per scenario."""
    d = tmp_path_factory.mktemp("checkov")
    for scenario in SCENARIOS:
        rendered = render("helm4", scenario)
        extra = "".join("---\n" + yaml.safe_dump(p) for p in ray_pods(rendered))
        (d / f"{scenario}.yaml").write_text(rendered + "\n" + extra)
    res = run(
        [
            tool("checkov"),
            "-d",
            str(d),
            "--framework",
            "kubernetes",
            "-o",
            "json",
            "--compact",
            "--skip-download",
        ],
        check=False,
    )
    assert res.stdout.strip().startswith("{"), f"checkov gave no JSON report: {res.stderr[-2000:]}"
    return json.loads(res.stdout)["results"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_checkov_zero_failures_outside_the_allowlist(scenario, checkov_report):
    entries = _allowlist()
    mine = f"/{scenario}.yaml"
    failed = [c for c in checkov_report["failed_checks"] if c["file_path"] == mine]
    passed = [c for c in checkov_report["passed_checks"] if c["file_path"] == mine]
    unexpected = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in failed
        if not _allowed(entries, c["check_id"], c["resource"])
    ]
    assert not unexpected, "checkov failures outside ci/checkov-allowlist.yaml:\n" + "\n".join(unexpected)
    assert passed, f"checkov ran no check on {scenario}"


def test_checkov_allowlist_has_no_stale_entries(checkov_report):
    """Every resource of every allowlist entry must still fail that check somewhere, else it goes: an
    entry is judged resource by resource, so one failing Job does not keep a Pod's exemption alive."""
    failures = [(c["check_id"], c["resource"]) for c in checkov_report["failed_checks"]]
    stale = [
        f"{e['check']} {r}"
        for e in _allowlist()
        for r in e["resources"]
        if not any(_allowed([{**e, "resources": [r]}], check, res) for check, res in failures)
    ]
    assert not stale, f"allowlist resources that no longer fail their check: {stale}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_checkov_scans_the_ray_pods(scenario, checkov_report):
    """checkov does not look inside the RayCluster or the RayJob: their head, worker and submitter pods are
    scanned only as the Pods this module adds, so a scenario whose Ray pods were checked by nothing would
    pass unseen."""
    mine = f"/{scenario}.yaml"
    checked = {
        c["resource"].split(".")[-1]
        for c in checkov_report["passed_checks"] + checkov_report["failed_checks"]
        if c["file_path"] == mine and c["resource"].startswith("Pod.")
    }
    rendered = render("helm4", scenario)
    expected = {p["metadata"]["name"] for p in ray_pods(rendered)}
    kinds = {d["kind"] for d in docs(rendered)}
    if kinds & {"RayCluster", "RayJob"}:
        assert "raycluster-head" in expected and any(n.startswith("raycluster-worker-") for n in expected)
    if "RayJob" in kinds:
        assert "rayjob-submitter" in expected, expected
    assert expected <= checked, f"Ray pods checkov did not scan: {sorted(expected - checked)}"


def test_checkov_allowlist_matching_is_not_a_blanket():
    entries = _allowlist()
    assert _allowed(entries, "CKV_K8S_11", "Job.ns.miles-train-0123abcd")
    assert not _allowed(entries, "CKV_K8S_11", "Job.ns.miles-preflight")
    assert not _allowed(entries, "CKV_K8S_20", "Job.ns.miles-train-0123abcd")


def test_ct_lint():
    """ct lint with our config (yamale schema for Chart.yaml, yamllint rules), once per values/ file."""
    res = run([str(REPO / "ci" / "ct-lint.sh")], check=False, cwd=REPO)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert "All charts linted successfully" in out
    for path in VALUES.glob("values-*.yaml"):
        name = path.stem.removeprefix("values-")
        assert f"ci/{name}-values.yaml" in out, f"ct did not lint {path.name}"


def test_helm_docs_readme_is_current(tmp_path):
    copy = tmp_path / "charts" / "miles"
    shutil.copytree(CHART, copy)
    run([tool("helm-docs"), "--chart-search-root", str(tmp_path / "charts")])
    fresh = (copy / "README.md").read_text()
    assert fresh == (CHART / "README.md").read_text(), (
        "charts/miles/README.md is stale: run `helm-docs --chart-search-root charts`"
    )


def test_every_value_is_documented():
    rows = [line for line in (CHART / "README.md").read_text().splitlines() if line.startswith("| ")]
    assert len(rows) > 100
    undocumented = [r.split("|")[1].strip() for r in rows[1:] if r.split("|")[4].strip() == ""]
    assert not undocumented, f"values without a `# --` comment: {undocumented}"


def test_miles_efa_dockerfile_is_hadolint_clean():
    res = run([tool("hadolint"), str(REPO / "images" / "miles-efa.Dockerfile")], check=False)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("helm", HELMS)
def test_helm_lint_strict(helm, scenario):
    files = [a for f in SCENARIOS[scenario] for a in ("-f", str(VALUES / f))]
    res = run(
        [tool(helm), "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *files], check=False
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "0 chart(s) failed" in res.stdout


def test_helm_package_holds_only_the_chart(tmp_path):
    res = run([tool("helm4"), "package", str(CHART), "-d", str(tmp_path)])
    (tgz,) = tmp_path.glob("miles-*.tgz")
    with tarfile.open(tgz) as tar:
        names = tar.getnames()
    assert "miles/values.schema.json" in names and "miles/templates/raycluster/raycluster.yaml" in names
    assert not [n for n in names if n.startswith(("miles/tests/", "miles/ci/"))], res.stdout
