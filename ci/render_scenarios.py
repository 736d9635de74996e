"""Render every scenario of values/ with Helm 3 and Helm 4 and summarise what each creates.

Used by `make demo` until the local cluster can install the chart for real. Each scenario is rendered
with both Helms (their outputs must agree), validated by kubeconform in strict mode, and its run spec
is printed by `miles-hooks plan`. Exits non-zero when any scenario fails.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "miles"
RELEASE = "miles"
NAMESPACE = "miles"
SCHEMAS = ROOT / ".tools" / "kubeconform-schemas"


def pinned_versions() -> dict[str, str]:
    """KUBERNETES_VERSION and KUBERAY_VERSION from ci/kubeconform/versions.env (the one place they live)."""
    pairs = {}
    for line in (ROOT / "ci" / "kubeconform" / "versions.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


KUBE_VERSION = pinned_versions()["KUBERNETES_VERSION"]

# Overlays are layered on the base they are written for.
SCENARIOS: dict[str, list[str]] = {
    "colocated": ["values-colocated.yaml"],
    "disaggregated": ["values-disaggregated.yaml"],
    "moe": ["values-moe.yaml"],
    "single-node": ["values-single-node.yaml"],
    "moe + hyperpod": ["values-moe.yaml", "values-hyperpod.yaml"],
    "colocated + reward": ["values-colocated.yaml", "values-reward.yaml"],
}


def helm_template(helm: str, files: list[str]) -> str:
    args = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for name in files:
        args += ["-f", str(ROOT / "values" / name)]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{helm} template failed:\n{done.stderr.strip()}")
    return done.stdout


def kubeconform(manifest: str) -> str:
    if not SCHEMAS.is_dir():
        raise RuntimeError(f"{SCHEMAS} is missing: run `make tools` (it generates the schemas)")
    location = str(SCHEMAS) + (
        "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    )
    args = [
        "kubeconform",
        "-strict",
        "-summary",
        "-kubernetes-version",
        KUBE_VERSION,
        "-schema-location",
        location,
    ]
    done = subprocess.run(args, input=manifest, capture_output=True, text=True, check=False)
    if done.returncode != 0 or "Skipped: 0" not in done.stdout:
        raise RuntimeError(
            f"kubeconform rejected (or could not check) the manifests:\n{done.stdout}{done.stderr}"
        )
    return done.stdout.strip().splitlines()[-1]


def run_spec(objects: list[dict[str, object]]) -> dict[str, object] | None:
    for obj in objects:
        data = obj.get("data")
        if obj.get("kind") == "ConfigMap" and isinstance(data, dict) and "run.json" in data:
            return json.loads(str(data["run.json"]))
    return None


def summarise(name: str, files: list[str]) -> None:
    print(f"\n=== {name}  ({' + '.join(files)})")
    manifests = {helm: helm_template(helm, files) for helm in ("helm3", "helm4")}
    parsed = {helm: [doc for doc in yaml.safe_load_all(text) if doc] for helm, text in manifests.items()}
    # Helm 4 separates documents with an extra blank line; the objects themselves must be identical.
    if parsed["helm3"] != parsed["helm4"]:
        raise RuntimeError("Helm 3 and Helm 4 rendered different objects")
    manifest, objects = manifests["helm4"], parsed["helm4"]
    kinds = collections.Counter(str(obj["kind"]) for obj in objects)
    print("objects: " + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())))
    for obj in objects:
        meta = obj.get("metadata", {})
        assert isinstance(meta, dict)
        hook = (meta.get("annotations") or {}).get("helm.sh/hook", "")
        print(f"  {obj['kind']:<24} {meta.get('name')}" + (f"   [hook: {hook}]" if hook else ""))
    print("kubeconform: " + kubeconform(manifest))
    spec = run_spec(objects)
    if spec is None:
        raise RuntimeError("no run spec ConfigMap (key run.json) was rendered")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump(spec, handle)
        handle.flush()
        subprocess.run(["miles-hooks", "plan", "--spec", handle.name], check=True)


def main() -> int:
    failed: list[str] = []
    for name, files in SCENARIOS.items():
        try:
            summarise(name, files)
        except (RuntimeError, subprocess.CalledProcessError) as err:
            print(f"FAILED {name}: {err}", file=sys.stderr)
            failed.append(name)
    print()
    if failed:
        print(f"{len(failed)} of {len(SCENARIOS)} scenarios failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"all {len(SCENARIOS)} scenarios render identically under Helm 3 and Helm 4 and validate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
