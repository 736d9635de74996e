#!/usr/bin/env python3
"""Generate kubeconform JSON schemas (standalone, strict) from pinned upstream sources.

- Kubernetes kinds: from api/openapi-spec/swagger.json of the k8s.io/kubernetes Go module at
  KUBERNETES_VERSION (versions.env), fetched with `go mod download` (module cache or Go module proxy).
- KubeRay kinds (RayCluster, RayJob, RayService, ...): from config/crd/bases/*.yaml of the
  github.com/ray-project/kuberay/ray-operator Go module, at each of KUBERAY_VERSIONS.
- PodMonitor/ServiceMonitor: from example/prometheus-operator-crd/ of the
  github.com/prometheus-operator/prometheus-operator Go module at PROMETHEUS_OPERATOR_VERSION.

Output: one schema tree per KubeRay version, each matching kubeconform's -schema-location template
(LOCATION below, with root <out>/kuberay-<version>): e.g.
<out>/kuberay-1.6.2/v1.34.3-standalone-strict/deployment-apps-v1.json and .../raycluster-ray-v1.json.

"Strict" = every object schema that lists properties gets additionalProperties: false (unless the
source marks it x-kubernetes-preserve-unknown-fields), so unknown or misspelled fields fail.
Nothing here is hand-written schema: it is all derived from the upstream files.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import shutil
import subprocess
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
LOCATION = (
    "{root}/{{{{ .NormalizedKubernetesVersion }}}}-standalone{{{{ .StrictSuffix }}}}/"
    "{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json"
)

# Kinds the chart renders (plus a few a user may add); --all generates every kind in the swagger.
DEFAULT_KINDS = {
    ("", "v1"): [
        "ConfigMap",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Pod",
        "Secret",
        "Service",
        "ServiceAccount",
    ],
    ("apps", "v1"): ["Deployment", "StatefulSet", "DaemonSet"],
    ("batch", "v1"): ["Job", "CronJob"],
    ("networking.k8s.io", "v1"): ["NetworkPolicy"],
    ("policy", "v1"): ["PodDisruptionBudget"],
    ("rbac.authorization.k8s.io", "v1"): [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ],
    ("storage.k8s.io", "v1"): ["StorageClass"],
    ("scheduling.k8s.io", "v1"): ["PriorityClass"],
}


def read_versions() -> dict[str, str]:
    out = {}
    for raw in (HERE / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def module_dir(module: str, version: str) -> pathlib.Path:
    res = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@v{version}"],
        check=True,
        capture_output=True,
        text=True,
    )
    info = json.loads(res.stdout)
    if "Dir" not in info:
        raise SystemExit(f"go mod download {module}@v{version}: {info.get('Error', res.stdout)}")
    return pathlib.Path(info["Dir"])


def kind_suffix(group: str, version: str) -> str:
    # kubeconform: "-" + first label of the group (if any) + "-" + version
    if group:
        return f"-{group.split('.', maxsplit=1)[0].lower()}-{version.lower()}"
    return f"-{version.lower()}"


def strictify(node):
    """Recursively add additionalProperties: false to object schemas with properties."""
    if isinstance(node, dict):
        for v in node.values():
            strictify(v)
        if node.get("x-kubernetes-int-or-string"):
            node.pop("type", None)
            node["oneOf"] = [{"type": "string"}, {"type": "integer"}]
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
    elif isinstance(node, list):
        for v in node:
            strictify(v)
    return node


SPECIAL = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
}


def inline(defs: dict, node, stack: tuple[str, ...] = ()):
    """Inline every #/definitions/ $ref (standalone schema); a recursive ref becomes {}."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if ref:
            name = ref.split("/")[-1]
            if name in SPECIAL:
                return copy.deepcopy(SPECIAL[name])
            if name in stack:
                return {}
            return inline(defs, copy.deepcopy(defs[name]), (*stack, name))
        return {k: inline(defs, v, stack) for k, v in node.items()}
    if isinstance(node, list):
        return [inline(defs, v, stack) for v in node]
    return node


def gen_kubernetes(version: str, out: pathlib.Path, all_kinds: bool) -> int:
    swagger = module_dir("k8s.io/kubernetes", version) / "api/openapi-spec/swagger.json"
    defs = json.loads(swagger.read_text())["definitions"]
    wanted = {(g, v, k) for (g, v), ks in DEFAULT_KINDS.items() for k in ks}
    n = 0
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            key = (gvk["group"], gvk["version"], gvk["kind"])
            if not all_kinds and key not in wanted:
                continue
            if name.endswith("List") or (gvk["kind"].endswith("List") and not all_kinds):
                continue
            schema = strictify(inline(defs, copy.deepcopy(d), (name,)))
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            # pin apiVersion/kind so a document of another version is never checked against this file
            props = schema.setdefault("properties", {})
            api = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            props["apiVersion"] = {"type": "string", "enum": [api]}
            props["kind"] = {"type": "string", "enum": [gvk["kind"]]}
            path = out / f"{gvk['kind'].lower()}{kind_suffix(gvk['group'], gvk['version'])}.json"
            path.write_text(json.dumps(schema, separators=(",", ":")))
            n += 1
    return n


def gen_kuberay(version: str, out: pathlib.Path) -> int:
    bases = module_dir("github.com/ray-project/kuberay/ray-operator", version) / "config/crd/bases"
    return gen_crds(sorted(bases.glob("*.yaml")), out)


def gen_prometheus_operator(version: str, out: pathlib.Path) -> int:
    """PodMonitor/ServiceMonitor (the reward service's optional PodMonitor)."""
    crds = (
        module_dir("github.com/prometheus-operator/prometheus-operator", version)
        / "example/prometheus-operator-crd"
    )
    files = [
        crds / "monitoring.coreos.com_podmonitors.yaml",
        crds / "monitoring.coreos.com_servicemonitors.yaml",
    ]
    return gen_crds(files, out)


def gen_crds(crd_files: list[pathlib.Path], out: pathlib.Path) -> int:
    n = 0
    for crd_file in crd_files:
        crd = yaml.safe_load(crd_file.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for ver in crd["spec"]["versions"]:
            if not ver.get("served", True):
                continue
            schema = strictify(copy.deepcopy(ver["schema"]["openAPIV3Schema"]))
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            props = schema.setdefault("properties", {})
            props["apiVersion"] = {"type": "string", "enum": [f"{group}/{ver['name']}"]}
            props["kind"] = {"type": "string", "enum": [kind]}
            props["metadata"] = {"type": "object"}
            path = out / f"{kind.lower()}{kind_suffix(group, ver['name'])}.json"
            path.write_text(json.dumps(schema, separators=(",", ":")))
            n += 1
    return n


def main(argv: list[str]) -> int:
    versions = read_versions()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        required=True,
        type=pathlib.Path,
        help="schema root for kubeconform -schema-location",
    )
    ap.add_argument("--kubernetes-version", default=versions["KUBERNETES_VERSION"])
    ap.add_argument(
        "--kuberay-versions",
        default=versions["KUBERAY_VERSIONS"],
        help="space-separated KubeRay versions, one schema tree each",
    )
    ap.add_argument("--prometheus-operator-version", default=versions["PROMETHEUS_OPERATOR_VERSION"])
    ap.add_argument(
        "--all",
        action="store_true",
        help="every Kubernetes kind, not only those the chart uses",
    )
    args = ap.parse_args(argv)
    kuberay_versions = args.kuberay_versions.split()
    if not kuberay_versions:
        ap.error("--kuberay-versions: expected at least one version, found none")
    tree = f"v{args.kubernetes_version}-standalone-strict"
    common = args.out / "common" / tree
    common.mkdir(parents=True, exist_ok=True)
    k = gen_kubernetes(args.kubernetes_version, common, args.all)
    p = gen_prometheus_operator(args.prometheus_operator_version, common)
    for version in kuberay_versions:
        out = args.out / f"kuberay-{version}" / tree
        shutil.copytree(common, out, dirs_exist_ok=True)
        r = gen_kuberay(version, out)
        print(
            f"gen-schemas: {k} Kubernetes v{args.kubernetes_version} + {r} KubeRay v{version}"
            f" + {p} prometheus-operator v{args.prometheus_operator_version}"
        )
    shutil.rmtree(args.out / "common")
    print(f"  schemas in {args.out}/kuberay-<version>; validate with:")
    location = LOCATION.format(root=f"{args.out}/kuberay-{kuberay_versions[-1]}")
    print(f"kubeconform -strict -kubernetes-version {args.kubernetes_version} -schema-location '{location}'")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
