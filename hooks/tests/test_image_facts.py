"""core/image_facts.py: the version report run in the miles image (executed here by real interpreters), how
the report pod's status is judged, the Ray comparison, and what submit records. The report pod on a real
kubelet is tests/e2e/test_existing_checkpoints.py; the report read from the real miles package (torch,
Megatron, SGLang) is tests/contract/test_image_facts_report.py."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hooks_testlib import base_spec
from miles_hooks.core import image_facts, pod_security
from miles_hooks.core.errors import CheckFailed
from miles_hooks.steps import prepare_data


def run_report(python: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [python, "-c", image_facts.REPORT_SCRIPT, str(out)], capture_output=True, text=True, check=True
    )
    written = json.loads(out.read_text())
    assert json.loads(done.stdout) == written
    return written


def test_the_report_reads_this_interpreters_packages_without_importing_them(tmp_path: Path) -> None:
    found = run_report(sys.executable, tmp_path / "facts.json")
    assert found["python"] == platform.python_version()
    assert found["ray"] == importlib.metadata.version("ray")
    assert set(image_facts.parse(json.dumps(found))) == set(image_facts.KEYS)


def test_the_report_reads_versions_from_the_files_upstream_packages_ship(tmp_path: Path) -> None:
    """torch's version.py, Megatron's package_info.py and SGLang's setuptools-scm _version.py, as their
    releases lay them out, found on the path without installed metadata and without being imported."""
    site = tmp_path / "site"
    files = {
        "torch/__init__.py": "raise SystemExit('imported')\n",
        "torch/version.py": (
            "from typing import Optional\n__version__ = '2.8.0'\ncuda: Optional[str] = '12.8'\n"
        ),
        "megatron/__init__.py": "",
        "megatron/core/__init__.py": "raise SystemExit('imported')\n",
        "megatron/core/package_info.py": "MAJOR = 0\nMINOR = 13\nPATCH = 1\nPRE_RELEASE = ''\n",
        "sglang/__init__.py": "raise SystemExit('imported')\n",
        "sglang/_version.py": (
            "__version__ = version = '0.5.2'\n__version_tuple__ = version_tuple = (0, 5, 2)\n"
        ),
    }
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
         f"exec(compile({image_facts.REPORT_SCRIPT!r}, 'report', 'exec'))", str(tmp_path / "out.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = json.loads((tmp_path / "out.json").read_text())
    assert (found["cuda"], found["megatron"], found["sglang"]) == ("12.8", "0.13.1", "0.5.2"), done.stdout


def terminated(exit_code: int, message: str = "", reason: str = "Completed") -> dict[str, Any]:
    state = {"terminated": {"exitCode": exit_code, "reason": reason, "message": message}}
    return {"spec": {"nodeName": "n1"}, "status": {"containerStatuses": [{"name": "image", "state": state}]}}


def test_judge() -> None:
    message = json.dumps({"python": "3.12.9", "ray": "2.60.0"})
    assert image_facts.judge(terminated(0, message)) == ("read", message)
    state, detail = image_facts.judge(terminated(127, "exec: python3: not found", "Error"))
    assert state == "failed" and "exited 127" in detail and "python3" in detail
    running = {"spec": {"nodeName": "n1"}, "status": {"containerStatuses": [{"state": {"running": {}}}]}}
    assert image_facts.judge(running)[0] == "pulling"
    pull_error = {"containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull", "message": "x"}}}]}
    assert image_facts.judge({"spec": {}, "status": pull_error})[0] == "failed"
    unscheduled = {"conditions": [{"type": "PodScheduled", "status": "False", "message": "0/2 nodes"}]}
    assert image_facts.judge({"spec": {}, "status": unscheduled}) == ("unscheduled", "0/2 nodes")


@pytest.mark.parametrize("message", ["not json", "[1, 2]"])
def test_an_unreadable_report_is_refused(message: str) -> None:
    with pytest.raises(ValueError, match="JSON"):
        image_facts.parse(message)


def test_the_report_pod_runs_on_the_heads_pool_as_nobody_without_a_gpu() -> None:
    raw = base_spec()
    raw["rayCluster"]["head"] = {"nodeSelector": {"pool": "cpu"}, "tolerations": []}
    pool, body = image_facts.report_pod(raw)  # type: ignore[arg-type]
    assert pool == "ray-head" and body["spec"]["nodeSelector"] == {"pool": "cpu"}
    container = body["spec"]["containers"][0]
    assert container["command"][:2] == ["python3", "-c"] and container["workingDir"] == "/"
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert body["metadata"]["labels"]["app.kubernetes.io/component"] == image_facts.COMPONENT
    assert pod_security.restricted_user_violations(body["spec"]) == []


def facts(ray: str | None) -> image_facts.Facts:
    versions = dict.fromkeys(image_facts.KEYS)
    versions.update(python="3.12.9", ray=ray)
    return image_facts.Facts("radixark/miles:v0.1.0", "ray-head", "p", versions)


def test_a_ray_other_than_the_charts_names_both_and_the_values() -> None:
    raw = base_spec()
    raw["rayCluster"]["rayVersion"] = "2.60.0"
    assert image_facts.ray_mismatch(facts("2.60.0"), raw) is None  # type: ignore[arg-type]
    said = image_facts.ray_mismatch(facts("2.49.1"), raw)  # type: ignore[arg-type]
    assert said is not None
    assert "carries Ray 2.49.1, but rayCluster.rayVersion is 2.60.0" in said
    assert "rayCluster.rayVersion=2.49.1" in said and "image.tag" in said
    none = image_facts.ray_mismatch(facts(None), raw)  # type: ignore[arg-type]
    assert none is not None and "has no Ray installed" in none


def test_recorded_facts_belong_to_the_specs_image(tmp_path: Path) -> None:
    raw = base_spec()
    raw["prepare"]["imageFacts"] = {"enabled": True, "timeoutSeconds": 60, "file": str(tmp_path / "f.json")}
    assert image_facts.recorded(raw) is None  # type: ignore[arg-type]
    (tmp_path / "f.json").write_text(json.dumps({"image": raw["images"]["miles"], "versions": {}}))
    assert image_facts.recorded(raw) == {"image": raw["images"]["miles"], "versions": {}}  # type: ignore[arg-type]
    raw["images"]["miles"] = "radixark/miles:another"
    assert image_facts.recorded(raw) is None  # type: ignore[arg-type]
    raw["images"]["miles"] = json.loads((tmp_path / "f.json").read_text())["image"]
    raw["prepare"]["imageFacts"]["enabled"] = False
    assert image_facts.recorded(raw) is None  # type: ignore[arg-type]


def test_prepare_data_reads_nothing_when_off() -> None:
    raw = base_spec()
    assert raw["prepare"]["imageFacts"]["enabled"] is False
    assert prepare_data.record_image_facts(raw) is None  # type: ignore[arg-type]


def test_a_report_with_no_answer_names_the_timeout_value(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = base_spec()
    raw["prepare"]["imageFacts"]["enabled"] = True

    def no_answer(*_args: Any, **_kwargs: Any) -> dict[str, tuple[str, str, str]]:
        return {"ray-head": ("p", "pulling", "pulling on node n1")}

    monkeypatch.setattr(image_facts.probe_pods, "run", no_answer)
    with pytest.raises(CheckFailed, match=r"hooks.prepareData.imageFactsTimeoutSeconds"):
        image_facts.read(object(), raw)  # type: ignore[arg-type]
