"""Every form of a quantity, a duration or an env var name that upstream takes, the chart takes, and means the
same.

The judge is upstream's own code, built from the pinned modules by ci/kubeforms: the API server's
resource.ParseQuantity (k8s.io/apimachinery) and Prometheus' model.ParseDuration. For each form a user may
write, the values schema must agree with it (under both Helms), the chart's own arithmetic
(miles.quantityBytes: requests against limits, /dev/shm against the memory limit) must order the forms as
it does, and so must the hooks' parser (preflight's capacity and node checks)."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import subprocess
from decimal import Decimal
from typing import Any

import pytest
import yaml
from chartlib import CHART, HELMS, KUBE_VERSION, RELEASE, REPO, run, tool

QUANTITIES = [
    "0", "1", "+2", "0.5", ".5", "5.", "1.5", "100n", "2u", "500m", "999", "1e3", "1E3", "1k", "1001",
    "1.024e3", "1Ki", "1025", "1M", "1Mi", "1G", "1e9", "1Gi", "12E+2", "1e-3", "64Gi", "6.8719476736e+10",
    "68719476737", "1T", "1Ti", "1P", "1Pi", "1E", "1Ei",
]  # fmt: skip
NOT_QUANTITIES = [
    "1e1.5", "1.5.5", "1KB", "1 Gi", "1gi", "0x10", "1Gi ", "ten", "1i", "--1", "+-1", "", "1e",
]  # fmt: skip
# ParseQuantity reads a suffix without a number as 0; the pattern controller-gen writes for every Quantity of
# a CRD (KubeRay's, read by ci/k8s_shapes.py) refuses it, and so does the chart: "Gi" for "8Gi" is a typo
BARE_SUFFIXES = ["Gi", "e3", "k", "m", "."]
DURATIONS = ["0", "0s", "30s", "500ms", "1m30s", "90s", "2h45m", "1h", "1d", "1w", "1y", "1y2w3d4h5m6s7ms"]
NOT_DURATIONS = ["1.5s", "-1s", "1m 30s", "30", "30sec", "1h1d", "30S", "1s1m", "m"]
# networkPolicy.egress.blockedCidrs, an ipBlock's except under 0.0.0.0/0 or ::/0 (ValidateIPBlock)
CIDRS = [
    "169.254.169.254/32", "10.0.0.0/8", "10.0.0.1/8", "010.0.0.0/8", "10.0.0.0/032", "1.2.3.4/1",
    "255.255.255.255/32", "fd00:ec2::254/128", "FD00::/8", "::1/128", "1::/1", "2001:db8::/32",
    "1:2:3:4:5:6:7:8/64", "1:2:3:4:5:6:7::/64", "::2:3:4:5:6:7:8/64", "::1/0099",
]  # fmt: skip
NOT_CIDRS = [
    "0.0.0.0/0", "::/0", "300.1.1.1/32", "1.2.3.4/33", "1.2.3.4", "1.2.3.4/32/1", " 1.2.3.4/32",
    "::ffff:1.2.3.4/128", "0:0:0:0:0:ffff:1.2.3.4/96", "fe80::1%eth0/64", "1:2:3:4:5:6:7:8:9/64", "::1/129",
    "1.2.3/24", "",
]  # fmt: skip
# stricter than the API, on purpose (one pattern cannot tell them from the IPv4-mapped forms it refuses)
STRICTER_CIDRS = ["1:2:3:4:5:6:1.2.3.4/128"]
# a pod env var's name (the *.extraEnv lists); Kubernetes 1.34 checks only for printable ASCII without '='
ENV_NAMES = ["HF_HOME", "1ST", "my-var", "my.var", "a b", "x:y", "~", "lower", "NCCL_DEBUG"]
NOT_ENV_NAMES = ["", "A=B", "é", "TAB\t", "NL\n", "\u00a0"]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """ask(kind, values) -> the upstream parser's answers, one {value, ok, float, error} per value."""
    binary = tmp_path_factory.mktemp("kubeforms") / "kubeforms"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    built = subprocess.run(
        [tool("go"), "build", "-o", str(binary), "."],
        cwd=REPO / "ci" / "kubeforms",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]

    def ask(kind: str, values: list[str]) -> list[dict[str, Any]]:
        lines = "".join(json.dumps({"kind": kind, "value": v}) + "\n" for v in values)
        done = subprocess.run([str(binary)], input=lines, capture_output=True, text=True, check=True)
        return [json.loads(line) for line in done.stdout.splitlines()]

    return ask


def template(helm: str, values: dict[str, Any], tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    argv = [tool(helm), "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, "-f", str(path)]
    return run(argv, check=False)


def test_the_corpus_is_what_upstream_says(upstream: Any) -> None:
    """The lists above are upstream's verdicts, not ours: a form moves list when its parser changes."""
    assert [a["value"] for a in upstream("quantity", QUANTITIES) if not a["ok"]] == []
    assert [a["value"] for a in upstream("quantity", NOT_QUANTITIES) if a["ok"]] == []
    assert {(a["ok"], a["float"]) for a in upstream("quantity", BARE_SUFFIXES)} == {(True, 0.0)}
    assert [a["value"] for a in upstream("duration", DURATIONS) if not a["ok"]] == []
    assert [a["value"] for a in upstream("duration", NOT_DURATIONS) if a["ok"]] == []
    assert [a["value"] for a in upstream("blockedCidr", CIDRS) if not a["ok"]] == []
    assert [a["value"] for a in upstream("blockedCidr", NOT_CIDRS) if a["ok"]] == []
    assert [a["value"] for a in upstream("blockedCidr", STRICTER_CIDRS) if not a["ok"]] == []
    assert [a["value"] for a in upstream("envVarName", ENV_NAMES) if not a["ok"]] == []
    assert [a["value"] for a in upstream("envVarName", NOT_ENV_NAMES) if a["ok"]] == []


def resources_of(forms: list[str]) -> dict[str, Any]:
    """One extended resource per form, its limit the form itself: no rule of the chart compares them."""
    return {"reward": {"resources": {"limits": {f"example.com/r{i}": f for i, f in enumerate(forms)}}}}


@pytest.mark.parametrize("helm", HELMS)
def test_every_quantity_upstream_takes_renders_and_no_other(helm: str, tmp_path: pathlib.Path) -> None:
    res = template(helm, resources_of(QUANTITIES), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    # numbers too, as YAML writes them (Helm holds 68719476736 as a float)
    limits = {"cpu": 8.5, "memory": 68719476737}
    numbers = {"reward": {"resources": {"limits": limits, "requests": {"cpu": 0.5}}}}
    res = template(helm, numbers, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    numbers["reward"]["resources"]["requests"]["memory"] = 68719476738  # one byte above: named, written whole
    res = template(helm, numbers, tmp_path)
    said = "reward.resources.requests.memory: expected at most reward.resources.limits.memory"
    assert f"{said} (68719476737), found 68719476738" in res.stderr, res.stderr[-2000:]
    # below zero: ParseQuantity takes it, the API server's validation of requests and limits does not
    for form in [*NOT_QUANTITIES, *BARE_SUFFIXES, "-1"]:
        res = template(helm, resources_of([form]), tmp_path)
        assert res.returncode != 0, f"{form!r} rendered"
        assert "/reward/resources/limits/example.com~1r0" in res.stderr, (form, res.stderr[-2000:])
    res = template(helm, {"reward": {"resources": {"limits": {"cpu": -1}}}}, tmp_path)
    assert res.returncode != 0 and "/reward/resources/limits/cpu" in res.stderr, res.stderr[-2000:]


def ordered(upstream: Any) -> list[tuple[str, float]]:
    return sorted(((a["value"], a["float"]) for a in upstream("quantity", QUANTITIES)), key=lambda p: p[1])


@pytest.mark.parametrize("helm", HELMS)
def test_the_charts_arithmetic_orders_every_form_as_upstream_does(
    helm: str, upstream: Any, tmp_path: pathlib.Path
) -> None:
    """Each pair of neighbours in upstream's order, as a request above its limit: the chart names exactly the
    pairs upstream calls unequal (the requests-within-limits rule, miles.quantityBytes)."""
    forms = ordered(upstream)
    pairs = list(itertools.pairwise(forms))
    requests = {f"example.com/p{i}": big for i, ((_, _), (big, _)) in enumerate(pairs)}
    limits = {f"example.com/p{i}": small for i, ((small, _), (_, _)) in enumerate(pairs)}
    res = template(helm, {"hooks": {"resources": {"requests": requests, "limits": limits}}}, tmp_path)
    named = {
        line.split(".requests.", 1)[1].split(":", 1)[0]
        for line in res.stderr.splitlines()
        if line.strip().startswith("- hooks.resources.requests.")
    }
    unequal = {f"example.com/p{i}" for i, ((_, lo), (_, hi)) in enumerate(pairs) if hi > lo}
    assert named == unequal, res.stderr[-4000:]
    assert len(unequal) >= 20, pairs  # not vacuous: equal neighbours are the few spellings of one value
    # the other way round, every request within its limit
    res = template(helm, {"hooks": {"resources": {"requests": limits, "limits": requests}}}, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.parametrize("helm", HELMS)
def test_shm_against_a_memory_limit_written_as_a_number(helm: str, tmp_path: pathlib.Path) -> None:
    """68719476736 bytes is 64Gi: /dev/shm of 64Gi fits, of 64.5Gi does not (Helm prints the number as
    6.8719476736e+10, which the chart used to refuse as no quantity at all)."""
    head = {"rayCluster": {"head": {"resources": {"limits": {"memory": 68719476736}}}}}
    head["rayCluster"]["head"]["shmSize"] = "64Gi"
    assert template(helm, head, tmp_path).returncode == 0
    head["rayCluster"]["head"]["shmSize"] = "64.5Gi"
    res = template(helm, head, tmp_path)
    assert "rayCluster.head.shmSize: expected at most rayCluster.head.resources.limits.memory" in res.stderr


def test_the_hooks_read_every_form_as_upstream_does(upstream: Any) -> None:
    from miles_hooks.core.quantity import parse_exact

    for answer in upstream("quantity", QUANTITIES):
        got = float(parse_exact(answer["value"]))
        assert got == pytest.approx(answer["float"], rel=1e-12), answer
    assert parse_exact(68719476736.0) == Decimal(68719476736)


@pytest.mark.parametrize("helm", HELMS)
def test_every_duration_prometheus_takes_renders_and_no_other(
    helm: str, upstream: Any, tmp_path: pathlib.Path
) -> None:
    for form in DURATIONS:
        res = template(helm, {"rayCluster": {"podMonitor": {"interval": form}}}, tmp_path)
        assert res.returncode == 0, (form, res.stderr[-2000:])
    for form in NOT_DURATIONS:
        res = template(helm, {"rayCluster": {"podMonitor": {"interval": form}}}, tmp_path)
        assert res.returncode != 0 and "/rayCluster/podMonitor/interval" in res.stderr, (form, res.stderr)


@pytest.mark.parametrize("helm", HELMS)
def test_every_env_var_name_the_api_server_takes_renders_and_no_other(
    helm: str, tmp_path: pathlib.Path
) -> None:
    env = [{"name": name, "value": "1"} for name in ENV_NAMES]
    res = template(helm, {"hooks": {"extraEnv": env}, "rayCluster": {"head": {"extraEnv": env}}}, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in NOT_ENV_NAMES:
        res = template(helm, {"hooks": {"extraEnv": [{"name": name, "value": "1"}]}}, tmp_path)
        assert res.returncode != 0 and "/hooks/extraEnv/0/name" in res.stderr, (name, res.stderr[-2000:])


@pytest.mark.parametrize("helm", HELMS)
def test_every_blocked_cidr_the_api_takes_renders_and_no_other(helm: str, tmp_path: pathlib.Path) -> None:
    egress = {"enabled": True, "blockedCidrs": CIDRS}
    res = template(helm, {"networkPolicy": {"egress": egress}}, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    for cidr in [*NOT_CIDRS, *STRICTER_CIDRS]:
        egress = {"enabled": True, "blockedCidrs": [cidr]}
        res = template(helm, {"networkPolicy": {"egress": egress}}, tmp_path)
        assert res.returncode != 0, f"{cidr!r} rendered"
        assert "/networkPolicy/egress/blockedCidrs/0" in res.stderr, (cidr, res.stderr[-2000:])
