"""Shared helpers for the chart tests: real helm3/helm4, kubeconform, ct, helm-docs, checkov binaries.

Every test shells out to the real tool; nothing is re-implemented or mocked. A missing tool is a
test failure naming `make tools`, not a skip.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))

import scenario_files  # noqa: E402  (ci/: the one list of scenarios, derived from values/)

CHART = REPO / "charts" / "miles"
VALUES = REPO / "values"
TOOLS_BIN = REPO / ".tools" / "bin"
VENV_BIN = REPO / ".venv" / "bin"
RUN_SPEC_SCHEMA = REPO / "hooks" / "src" / "miles_hooks" / "schemas" / "run-spec.schema.json"
RELEASE = "miles"
NAMESPACE = "miles-test"
HELMS = ("helm3", "helm4")


def _versions() -> dict[str, str]:
    out = {}
    for raw in (REPO / "ci" / "kubeconform" / "versions.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


VERSIONS = _versions()
KUBE_VERSION = VERSIONS["KUBERNETES_VERSION"]
# the oldest supported KubeRay first, the testbed's last: each has a kubeconform schema tree of its own
KUBERAY_VERSIONS = VERSIONS["KUBERAY_VERSIONS"].split()

# scenario name -> values files, read from the `helm install` line of each values/ file
# (ci/scenario_files.py), plus every file alone: an overlay must render even without its base
SCENARIOS: dict[str, list[str]] = {**scenario_files.files_alone(), **scenario_files.scenarios()}


def tool(name: str) -> str:
    for d in (TOOLS_BIN, VENV_BIN):
        p = d / name
        if p.exists():
            return str(p)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"tool '{name}' not found in .tools/bin, .venv/bin or PATH: run `make tools`")


def run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{TOOLS_BIN}:{VENV_BIN}:{env.get('PATH', '')}"
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, **kw)
    if check and res.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {res.returncode}\n"
            f"stdout:\n{res.stdout[-4000:]}\nstderr:\n{res.stderr[-4000:]}"
        )
    return res


@functools.cache
def render(helm: str, scenario: str, extra: tuple[str, ...] = ()) -> str:
    files: list[str] = []
    for f in SCENARIOS[scenario]:
        files += ["-f", str(VALUES / f)]
    res = run(
        [
            tool(helm),
            "template",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--kube-version",
            KUBE_VERSION,
            *files,
            *extra,
        ]
    )
    return res.stdout


def docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def find(documents: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in documents if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def run_spec(documents: list[dict], name: str = f"{RELEASE}-run") -> dict:
    (cm,) = find(documents, "ConfigMap", name)
    return json.loads(cm["data"]["run.json"])


def kubeconform_cmd(schemas: pathlib.Path, kuberay: str) -> list[str]:
    """kubeconform, strict, against the Kubernetes schemas and the CRDs of KubeRay `kuberay`."""
    loc = (
        f"{schemas}/kuberay-{kuberay}/"
        "{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/"
        "{{ .ResourceKind }}{{ .KindSuffix }}.json"
    )
    return [
        tool("kubeconform"),
        "-strict",
        "-summary",
        "-output",
        "json",
        "-kubernetes-version",
        KUBE_VERSION,
        "-schema-location",
        loc,
    ]
