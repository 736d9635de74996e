"""Render every scenario of values/ with Helm 3 and Helm 4 and summarise what each creates.

`make scenarios` (ci/scenarios.sh) runs it: each scenario is rendered with both Helms (their objects
must agree), validated by kubeconform in strict mode against the schemas `make tools` generates, and
its run spec is printed by `miles-hooks plan`. Exits non-zero when any scenario fails.

--markdown prints the README's scenario table; --check-readme fails when README.md's copy is stale
(--write-readme rewrites it).
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import scenario_files  # ci/scenario_files.py, beside this file
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "miles"
RELEASE = "miles"
NAMESPACE = "miles"
SCHEMAS = ROOT / ".tools" / "kubeconform-schemas"


def pinned_versions() -> dict[str, str]:
    """KUBERNETES_VERSION and KUBERAY_VERSIONS from ci/kubeconform/versions.env (the one place they live)."""
    pairs = {}
    for line in (ROOT / "ci" / "kubeconform" / "versions.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


KUBE_VERSION = pinned_versions()["KUBERNETES_VERSION"]
KUBERAY_VERSIONS = pinned_versions()["KUBERAY_VERSIONS"].split()

# scenario name -> values files, from the `helm install` line of each values/ file
SCENARIOS: dict[str, list[str]] = scenario_files.scenarios()


def helm_template(helm: str, files: list[str], extra: tuple[str, ...] = ()) -> str:
    args = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for name in files:
        args += ["-f", str(ROOT / "values" / name)]
    args += extra
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{helm} template failed:\n{done.stderr.strip()}")
    return done.stdout


def kubeconform(files: list[str]) -> str:
    """Strict kubeconform of the scenario rendered for each supported KubeRay (rayCluster.operatorVersion)
    against that KubeRay's CRDs; one summary line per version."""
    lines = []
    for kuberay in KUBERAY_VERSIONS:
        manifest = helm_template("helm4", files, ("--set-string", f"rayCluster.operatorVersion={kuberay}"))
        schemas = SCHEMAS / f"kuberay-{kuberay}"
        if not schemas.is_dir():
            raise RuntimeError(f"{schemas} is missing: run `make tools` (it generates the schemas)")
        location = str(schemas) + (
            "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}"
            "/{{ .ResourceKind }}{{ .KindSuffix }}.json"
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
                f"kubeconform rejected (or could not check) the manifests against KubeRay {kuberay}:\n"
                f"{done.stdout}{done.stderr}"
            )
        lines.append(f"KubeRay {kuberay}: {done.stdout.strip().splitlines()[-1]}")
    return "; ".join(lines)


def run_spec(objects: list[dict[str, object]]) -> dict[str, object] | None:
    for obj in objects:
        data = obj.get("data")
        if obj.get("kind") == "ConfigMap" and isinstance(data, dict) and "run.json" in data:
            return json.loads(str(data["run.json"]))
    return None


def render(files: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The Helm 4 manifest and its objects, after checking Helm 3 renders the same objects."""
    manifests = {helm: helm_template(helm, files) for helm in ("helm3", "helm4")}
    parsed = {helm: [doc for doc in yaml.safe_load_all(text) if doc] for helm, text in manifests.items()}
    # Helm 4 separates documents with an extra blank line; the objects themselves must be identical.
    if parsed["helm3"] != parsed["helm4"]:
        raise RuntimeError("Helm 3 and Helm 4 rendered different objects")
    return manifests["helm4"], parsed["helm4"]


def summarise(name: str, files: list[str]) -> None:
    print(f"\n=== {name}  ({' + '.join(files)})")
    _, objects = render(files)
    kinds = collections.Counter(str(obj["kind"]) for obj in objects)
    print("objects: " + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())))
    for obj in objects:
        meta = obj.get("metadata", {})
        assert isinstance(meta, dict)
        hook = (meta.get("annotations") or {}).get("helm.sh/hook", "")
        print(f"  {obj['kind']:<24} {meta.get('name')}" + (f"   [hook: {hook}]" if hook else ""))
    print("kubeconform: " + kubeconform(files))
    spec = run_spec(objects)
    if spec is None:
        raise RuntimeError("no run spec ConfigMap (key run.json) was rendered")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump(spec, handle)
        handle.flush()
        subprocess.run(["miles-hooks", "plan", "--spec", handle.name], check=True)


def hook_of(obj: dict[str, Any]) -> str:
    return str((obj["metadata"].get("annotations") or {}).get("helm.sh/hook", ""))


def markdown_table() -> str:
    rows = [
        "| scenario | values files | objects | hook objects | derived topology |",
        "|---|---|---|---|---|",
    ]
    for name, files in SCENARIOS.items():
        _, objects = render(files)
        spec = run_spec(objects)
        if spec is None:
            raise RuntimeError(f"{name}: no run spec rendered")
        plain = collections.Counter(str(o["kind"]) for o in objects if not hook_of(o))
        hooks = [o for o in objects if hook_of(o)]
        jobs = [str(o["metadata"]["name"]) for o in hooks if o["kind"] == "Job"]
        other_hooks = collections.Counter(str(o["kind"]) for o in hooks if o["kind"] != "Job")
        topo = spec["topology"]
        assert isinstance(topo, dict)
        if spec["mode"] == "singleNode":
            shape = f"singleNode: 1 Job pod × {topo['gpusPerWorker']} GPUs, local Ray"
        else:
            placement = (
                "colocated"
                if topo["colocate"]
                else f"actor {topo['actorNodes']} + rollout {topo['rolloutWorkers']}"
            )
            shape = (
                f"{topo['workerReplicas']} worker pod(s) × {topo['gpusPerWorker']} GPUs"
                f" = {topo['clusterGpus']} GPUs "
                f"({placement}); {topo['rolloutEngines']} engines × {topo['rolloutGpusPerEngine']} GPU; "
                f"TP{topo['tensorParallel']} PP{topo['pipelineParallel']} CP{topo['contextParallel']} "
                f"EP{topo['expertParallel']}"
            )
        rows.append(
            f"| {name} | {', '.join(f'`{f}`' for f in files)} | "
            + ", ".join(f"{n} {k}" for k, n in sorted(plain.items()))
            + " | Jobs: "
            + ", ".join(jobs)
            + "; "
            + ", ".join(f"{n} {k}" for k, n in sorted(other_hooks.items()))
            + f" | {shape} |"
        )
    return "\n".join(rows) + "\n"


README = ROOT / "README.md"
BEGIN, END = "<!-- scenarios:begin -->\n", "<!-- scenarios:end -->"


def readme_with(table: str) -> str:
    text = README.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    if not rest:
        raise RuntimeError(f"README.md has no {BEGIN.strip()} marker")
    return head + BEGIN + table + END + tail


def main() -> int:
    if "--markdown" in sys.argv:
        print(markdown_table(), end="")
        return 0
    if "--check-readme" in sys.argv or "--write-readme" in sys.argv:
        wanted = readme_with(markdown_table())
        if "--write-readme" in sys.argv:
            README.write_text(wanted)
            return 0
        if wanted != README.read_text():
            print(
                "README.md's scenario table is stale: run `python3 ci/render_scenarios.py --write-readme`",
                file=sys.stderr,
            )
            return 1
        return 0
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
