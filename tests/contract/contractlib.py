"""The contract environment: the real miles argument parser (PyPI miles-rl, built by `make tools`).

Helpers shared by the contract tests (a uniquely named module: every test tree has its own conftest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "ci" / "miles-contract"
DRIVER = CONTRACT / "parse_argv.py"
sys.path.insert(0, str(REPO / "ci"))

import render_scenarios  # noqa: E402  (ci/, the README's scenario list and its helm template)

SCENARIOS = render_scenarios.SCENARIOS
# The GPUs of the product's nodes (p5/p5e/p5en: H100/H200) as Megatron's device probes see them.
HOPPER = {"major": 9, "minor": 0}


def contract_python() -> str:
    """The contract venv's interpreter; its absence is a failure naming `make tools`, not a skip."""
    default = REPO / ".tools" / "miles-contract" / "bin" / "python"
    path = Path(os.environ.get("MILES_CONTRACT_PYTHON") or default)
    if not path.exists():
        raise AssertionError(f"{path} is missing: run `make tools` (it builds the miles contract venv)")
    return str(path)


def render(files: list[str], *sets: str, helm: str = "helm4") -> str:
    """``helm template`` of the chart with values/ files and --set pairs; raises with Helm's stderr."""
    args = [helm, "template", render_scenarios.RELEASE, str(render_scenarios.CHART)]
    args += ["--namespace", render_scenarios.NAMESPACE, "--kube-version", render_scenarios.KUBE_VERSION]
    for name in files:
        args += ["-f", str(REPO / "values" / name)]
    for pair in sets:
        args += ["--set", pair]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return done.stdout


def run_spec(manifest: str) -> dict[str, Any]:
    for doc in yaml.safe_load_all(manifest):
        if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"].endswith("-run"):
            spec: dict[str, Any] = json.loads(doc["data"]["run.json"])
            return spec
    raise AssertionError("no <fullname>-run ConfigMap in the rendered chart")


def model_args(profile: str) -> list[str]:
    """What upstream's model_args_utils.py prints for ``profile`` (a fixture taken from miles v0.1.0)."""
    path = CONTRACT / "model-args" / f"{profile}.args"
    if not path.exists():
        raise AssertionError(f"no model-args fixture for profile {profile!r}: add {path.relative_to(REPO)}")
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return " ".join(lines).split()


def launcher_args(launcher: str, model_name: str, dirs: dict[str, str]) -> list[str]:
    """What upstream's launcher puts before the chart's extra args (a fixture taken from miles v0.1.0),
    with its {model_dir}, {data_dir} and {output_dir} filled in."""
    path = CONTRACT / "launcher-args" / f"{Path(launcher).stem}-{model_name}.args"
    if not path.exists():
        raise AssertionError(
            f"no launcher-args fixture for {launcher} {model_name}: add {path.relative_to(REPO)}"
        )
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return " ".join(lines).format(**dirs).split()


def main_only_flags() -> dict[str, int]:
    """Flags of miles `main` that 0.0.2 lacks, which the chart may emit: flag -> number of values.
    Each entry of ci/miles-contract/main-only-flags.yaml names the upstream commit that added it."""
    doc = yaml.safe_load((CONTRACT / "main-only-flags.yaml").read_text()) or {}
    return {entry["flag"]: int(entry["values"]) for entry in doc.get("flags") or []}


def strip_main_only(argv: list[str]) -> list[str]:
    allowed = main_only_flags()
    out: list[str] = []
    skip = 0
    for token in argv:
        if skip:
            skip -= 1
        elif token in allowed:
            skip = allowed[token]
        else:
            out.append(token)
    return out


def document(spec: dict[str, Any], argv: list[str] | None = None) -> dict[str, Any]:
    """The driver's input for a run spec: the profile's model args then the chart's train args, the
    runtime env, the model's HF config.json fixture, and the shared volume kept in a sandbox with the
    converted checkpoint present (as the convert hook leaves it)."""
    model = spec["model"]
    hf_dir = CONTRACT / "hf-configs" / model["repoId"].split("/")[-1]
    if not (hf_dir / "config.json").exists():
        raise AssertionError(f"no HF config fixture for {model['repoId']}: add {hf_dir.relative_to(REPO)}")
    train = model_args(model["profile"]) + spec["train"]["args"] if argv is None else argv
    return {
        "argv": strip_main_only(train),
        "env": dict(spec["runtimeEnv"]["envVars"]),
        "hfConfigDir": str(hf_dir),
        "sandbox": {"prefixes": [spec["storage"]["mountPath"]], "dirs": [model["torchDistPath"]]},
        "device": HOPPER,
    }


def _in_contract_venv(argv: list[str], payload: Any) -> subprocess.CompletedProcess[str]:
    """``argv`` with ``payload`` as JSON on stdin, its temp files in a dir of its own: the e2e tier, which may
    run beside this one, fails on a parser's scratch dir left in the host's /tmp."""
    with tempfile.TemporaryDirectory(prefix="contract-run-") as scratch:
        return subprocess.run(
            argv,
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "TMPDIR": scratch},
        )


def contract_run(args: list[str], payload: Any) -> str:
    """``args`` run by the contract venv's interpreter with ``payload`` as JSON on stdin; its stdout's last
    line (the drivers print one JSON result there, after whatever upstream printed)."""
    done = _in_contract_venv([contract_python(), *args], payload)
    assert done.returncode == 0, f"{args[0]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def parse(doc: dict[str, Any]) -> dict[str, Any]:
    """Runs the real parser (ci/miles-contract/parse_argv.py in the contract venv) on ``doc``."""
    done = _in_contract_venv([contract_python(), str(DRIVER)], doc)
    if done.returncode not in (0, 1):
        raise AssertionError(f"parse_argv.py exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result
