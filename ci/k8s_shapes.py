"""Kubernetes' own shapes for the values schema, read from the pinned upstream sources (never typed here).

- Objects the values pass through to a pod (tolerations, affinity, security contexts, env, volumes, a
  NetworkPolicy peer): the definitions of api/openapi-spec/swagger.json in the k8s.io/kubernetes module
  at KUBERNETES_VERSION, inlined and made strict the way ci/kubeconform/gen-schemas.py does, so a
  misspelled field fails `helm template` and `helm lint` offline.
- Name formats (label keys and values, DNS-1123 subdomains, qualified names, ConfigMap/Secret keys) and
  their length limits: the constants of pkg/util/validation/validation.go in the k8s.io/apimachinery
  module of the same release.

Both modules come from the Go module cache (filled by `make tools`) or the Go module proxy.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import pathlib
import re
from functools import cache
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent


@cache
def _kubeconform_gen() -> Any:
    spec = importlib.util.spec_from_file_location("gen_schemas", HERE / "kubeconform" / "gen-schemas.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kubernetes_version() -> str:
    return str(_kubeconform_gen().read_versions()["KUBERNETES_VERSION"])


@cache
def _swagger_definitions() -> dict[str, Any]:
    gen = _kubeconform_gen()
    swagger = gen.module_dir("k8s.io/kubernetes", kubernetes_version()) / "api/openapi-spec/swagger.json"
    return dict(json.loads(swagger.read_text())["definitions"])


def api_schema(name: str) -> dict[str, Any]:
    """The strict, standalone schema of one API definition, e.g. io.k8s.api.core.v1.Toleration."""
    gen = _kubeconform_gen()
    defs = _swagger_definitions()
    schema: dict[str, Any] = gen.strictify(gen.inline(defs, copy.deepcopy(defs[name]), (name,)))
    return schema


_CONST = re.compile(r"^const\s+(\w+)(?:\s+(?:string|int))?\s*=\s*(.+?)\s*$")


def _go_constants(source: str) -> dict[str, str | int]:
    """Top-level `const NAME [type] = <literals and names joined by +>` lines of a Go file."""
    consts: dict[str, str | int] = {}
    for line in source.splitlines():
        m = _CONST.match(line)
        if not m:
            continue
        name, expr = m.groups()
        if re.fullmatch(r"[0-9]+", expr):
            consts[name] = int(expr)
            continue
        parts = re.findall(r'"(?:[^"\\]|\\.)*"|`[^`]*`|\w+', expr)
        value = ""
        for part in parts:
            if part.startswith('"'):
                value += ast.literal_eval(part)
            elif part.startswith("`"):
                value += part[1:-1]
            elif part in consts:
                value += str(consts[part])
            else:
                break  # an expression this reader does not follow: leave the constant out
        else:
            consts[name] = value
    return consts


@cache
def name_formats() -> dict[str, str | int]:
    minor_patch = kubernetes_version().split(".", 1)[1]
    gen = _kubeconform_gen()
    source = gen.module_dir("k8s.io/apimachinery", f"0.{minor_patch}") / "pkg/util/validation/validation.go"
    consts = _go_constants(source.read_text())
    needed = (
        "qnameCharFmt",
        "qnameExtCharFmt",
        "qualifiedNameFmt",
        "qualifiedNameMaxLength",
        "labelValueFmt",
        "LabelValueMaxLength",
        "dns1123SubdomainFmt",
        "DNS1123SubdomainMaxLength",
        "configMapKeyFmt",
    )
    missing = [n for n in needed if n not in consts]
    if missing:
        raise SystemExit(
            f"{source}: expected the constants {', '.join(missing)}, found none (an apimachinery change?)"
        )
    return consts


def _bounded_qualified_name(f: dict[str, str | int]) -> str:
    """qualifiedNameFmt with its length limit folded in (JSON Schema cannot bound one part of a key)."""
    inner = int(f["qualifiedNameMaxLength"]) - 2
    return f"({f['qnameCharFmt']}{f['qnameExtCharFmt']}{{0,{inner}}})?{f['qnameCharFmt']}"


def _string(pattern: str, max_length: int) -> dict[str, Any]:
    return {"type": "string", "pattern": f"^{pattern}$", "maxLength": max_length}


def _prefixed_name_max(f: dict[str, str | int]) -> int:
    return int(f["DNS1123SubdomainMaxLength"]) + 1 + int(f["qualifiedNameMaxLength"])


def label_key_schema() -> dict[str, Any]:
    """A label or annotation key: an optional DNS-subdomain prefix and a qualified name."""
    f = name_formats()
    return _string(f"({f['dns1123SubdomainFmt']}/)?{_bounded_qualified_name(f)}", _prefixed_name_max(f))


def label_value_schema() -> dict[str, Any]:
    f = name_formats()
    return _string(str(f["labelValueFmt"]), int(f["LabelValueMaxLength"]))


def extended_resource_schema() -> dict[str, Any]:
    """A resource name outside the kubernetes.io domain must carry a domain prefix (nvidia.com/gpu)."""
    f = name_formats()
    return _string(f"{f['dns1123SubdomainFmt']}/{_bounded_qualified_name(f)}", _prefixed_name_max(f))


def dns_subdomain_or_empty_schema() -> dict[str, Any]:
    f = name_formats()
    return _string(f"({f['dns1123SubdomainFmt']})?", int(f["DNS1123SubdomainMaxLength"]))


def config_key_schema() -> dict[str, Any]:
    f = name_formats()
    return _string(str(f["configMapKeyFmt"]), int(f["DNS1123SubdomainMaxLength"]))


def _crd_patterns(crd: pathlib.Path) -> set[str]:
    """Every `pattern:` of a CRD's OpenAPI schema."""
    import yaml  # PyYAML: the venv's, as ci/kubeconform/gen-schemas.py uses it

    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(crd.read_text()))
    return found


@cache
def quantity_schema() -> dict[str, Any]:
    """A resource quantity as the API server takes it: a string in resource.Quantity's syntax (the pattern
    controller-gen writes for every Quantity field, read from the pinned KubeRay CRD), or a number. Without a
    sign: requests, limits and capacities below zero are refused (ValidateResourceQuantityValue)."""
    gen = _kubeconform_gen()
    newest = gen.read_versions()["KUBERAY_VERSIONS"].split()[-1]
    crd = (
        gen.module_dir("github.com/ray-project/kuberay/ray-operator", newest)
        / "config/crd/bases/ray.io_rayclusters.yaml"
    )
    signed = [p for p in _crd_patterns(crd) if p.startswith("^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))")]
    if len(signed) != 1:
        raise SystemExit(f"{crd}: expected one resource.Quantity pattern, found {len(signed)}")
    # ParseQuantity takes a whole exponent only ("1e3", not the "1e1.5" the CRD's pattern lets through)
    exponent = "([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+)))"
    if exponent not in signed[0]:
        raise SystemExit(f"{crd}: the resource.Quantity pattern has no exponent part {exponent}")
    unsigned = "^\\+?" + signed[0].removeprefix("^(\\+|-)?").replace(exponent, "([eE](\\+|-)?[0-9]+)")
    return {
        "type": ["string", "number"],
        "pattern": unsigned,
        "minimum": 0,
        "description": "Kubernetes quantity: 8Gi, 500m, 1.5, 1e3, 0.5 or 68719476736 (resource.Quantity)",
    }


@cache
def prometheus_duration_schema() -> dict[str, Any]:
    """A Prometheus duration as prometheus-operator's PodMonitor CRD takes it (30s, 1m30s, 1h), read from the
    pinned CRD: compound units, no fractions."""
    gen = _kubeconform_gen()
    version = gen.read_versions()["PROMETHEUS_OPERATOR_VERSION"]
    crd = (
        gen.module_dir("github.com/prometheus-operator/prometheus-operator", version)
        / "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"
    )
    durations = [p for p in _crd_patterns(crd) if p.startswith("^(0|(([0-9]+)y)?")]
    if len(set(durations)) != 1:
        raise SystemExit(f"{crd}: expected one Duration pattern, found {sorted(set(durations))}")
    return {"type": "string", "pattern": durations[0], "description": "Prometheus duration (30s, 1m30s)"}


def _chart_kube_floor() -> str:
    """The oldest Kubernetes minor the chart supports (Chart.yaml kubeVersion ">=1.34.0-0" -> "1.34")."""
    chart = (HERE.parent / "charts" / "miles" / "Chart.yaml").read_text()
    found = re.search(r'^kubeVersion:\s*"?>=\s*v?([0-9]+\.[0-9]+)', chart, re.M)
    if not found:
        raise SystemExit('charts/miles/Chart.yaml: expected kubeVersion ">=1.N..."')
    return found.group(1)


@cache
def env_var_name_schema() -> dict[str, Any]:
    """A pod env var's name as the API server takes it on every Kubernetes the chart supports. From the
    pinned sources: when RelaxedEnvironmentVariableValidation is GA and locked on at or before the chart's
    kubeVersion floor (pkg/features/kube_features.go), ValidateEnv checks IsRelaxedEnvVarName (any printable
    ASCII but '=', apimachinery's validation.go); else the C-identifier-like envVarNameFmt."""
    gen = _kubeconform_gen()
    source = gen.module_dir("k8s.io/kubernetes", kubernetes_version()) / "pkg/features/kube_features.go"
    gate = re.search(r"RelaxedEnvironmentVariableValidation: \{(.*?)\n\t\},", source.read_text(), re.S)
    if not gate:
        raise SystemExit(f"{source}: expected the RelaxedEnvironmentVariableValidation gate's versions")
    locked = re.findall(
        r'version\.MustParse\("([0-9.]+)"\), Default: true, PreRelease: featuregate\.GA, LockToDefault: true',
        gate.group(1),
    )
    floor = tuple(int(p) for p in _chart_kube_floor().split("."))
    if locked and tuple(int(p) for p in locked[0].split(".")) <= floor:
        # unicode.IsPrint on ASCII: the space and 0x21-0x7e; '=' (0x3d) excluded
        return {"type": "string", "pattern": "^[ -<>-~]+$"}
    return _string(str(name_formats()["envVarNameFmt"]), 1 << 20)


def blocked_cidr_schema() -> dict[str, Any]:
    """A CIDR the chart puts in a NetworkPolicy ipBlock's `except` under 0.0.0.0/0 (or ::/0, by its family),
    as ValidateIPBlock takes it with StrictIPCIDRValidation off (alpha in 1.33 and 1.34): what the sloppy
    parser (k8s.io/utils/net.ParseCIDRSloppy) reads, leading zeros allowed, with a prefix of at least 1 (a
    strict subset of /0). An IPv6 address with an embedded IPv4 part is refused: its IPv4-mapped forms
    (::ffff:a.b.c.d) land outside ::/0 and the API refuses them, and one regular expression cannot tell those
    from the rest (write the address in hex). tests/chart holds the pattern to that code (ci/kubeforms)."""
    octet = "0*(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    v4 = rf"{octet}(\.{octet}){{3}}"
    h = "[0-9a-fA-F]{1,4}"
    v6 = "|".join(
        [
            f"({h}:){{7}}{h}",
            f"({h}:){{1,7}}:",
            *(f"({h}:){{1,{7 - n}}}(:{h}){{1,{n}}}" for n in range(1, 7)),
            f":((:{h}){{1,7}}|:)",
        ]
    )
    v4_prefix = "0*([1-9]|[12][0-9]|3[0-2])"
    v6_prefix = "0*([1-9]|[1-9][0-9]|1[01][0-9]|12[0-8])"
    return {
        "type": "string",
        "pattern": f"^({v4}/{v4_prefix}|({v6})/{v6_prefix})$",
        "description": "an IPv4 or IPv6 CIDR with a prefix of at least 1 (10.0.0.0/8, fd00:ec2::254/128)",
    }
