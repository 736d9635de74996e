"""Pure parts of submit: the entrypoint (executed here with bash, not just string-compared),
runtime env, metadata, provenance and the previous-job selection."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import time
import types
from pathlib import Path

from hooks_testlib import base_spec
from miles_hooks.core import entrypoint
from miles_hooks.core import runspec as specmod
from miles_hooks.steps import submit


def run_entrypoint(tmp_path: Path, model_args_cmd: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """The entrypoint under bash; the driver's stderr joins its stdout there (the copy kept in
    ``tmp_path/logs`` has both, in order), so the output to judge is ``stdout``."""
    raw = base_spec()
    (tmp_path / "train.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    raw["train"].update({"workdir": str(tmp_path), "modelArgsCommand": model_args_cmd, "args": args})
    raw["submit"]["logDir"] = str(tmp_path / "logs")
    entry = submit.build_entrypoint(raw)
    assert entry.startswith("bash -c ")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/nonexistent"}
    return subprocess.run(entry, shell=True, capture_output=True, text=True, env=env, check=False, timeout=30)


def test_entrypoint_expands_model_args_and_keeps_every_argument_whole(tmp_path: Path) -> None:
    args = ["--wandb-group", "a b", "--q", 'it\'s "x"', "--glob", "*", "--var", "$HOME", "--empty", ""]
    proc = run_entrypoint(tmp_path, "echo --num-layers 36 --hidden-size 2560 --swiglu", args)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["--num-layers", "36", "--hidden-size", "2560", "--swiglu", *args]


def test_entrypoint_sources_legacy_profile_scripts(tmp_path: Path) -> None:
    (tmp_path / "m.sh").write_text("MODEL_ARGS=(--num-layers 2 --rotary-base 1000000)\n")
    proc = run_entrypoint(tmp_path, f'source {tmp_path}/m.sh && echo "${{MODEL_ARGS[@]}}"', ["--x"])
    assert json.loads(proc.stdout) == ["--num-layers", "2", "--rotary-base", "1000000", "--x"]


def test_entrypoint_fails_when_model_args_fail_or_are_empty(tmp_path: Path) -> None:
    failing = run_entrypoint(tmp_path, "exit 7", ["--x"])
    assert failing.returncode == 2 and "[" not in failing.stdout  # train.py never ran
    # an image older than miles v0.1.0 has no model_args_utils.py: the message says what to change
    old_image = run_entrypoint(tmp_path, f"{sys.executable} /root/miles/no/model_args_utils.py qwen3-4B", [])
    assert old_image.returncode == 2
    assert "model_args_utils.py" in old_image.stdout  # python's own error, then ours
    assert "model.profile names no profile of this miles image" in old_image.stdout
    assert "set image.tag to v0.1.0 or newer" in old_image.stdout
    empty = run_entrypoint(tmp_path, "echo '  '", ["--x"])
    assert empty.returncode == 2 and "printed nothing" in empty.stdout


def test_each_start_keeps_its_driver_log_on_the_shared_volume(tmp_path: Path) -> None:
    """Ray's job log goes with its head (and, in mode rayJob, the failed attempt's submitter pod with the
    attempt): every start of the entrypoint leaves the driver's whole output, stderr included, in a file of
    its own under submit.logDir, while Ray still gets it."""
    (tmp_path / "m.sh").write_text("echo 'model args on stderr' >&2; echo --num-layers 2\n")
    first = run_entrypoint(tmp_path, f"bash {tmp_path}/m.sh", ["--x"])
    assert first.returncode == 0, first.stdout
    assert first.stdout.splitlines() == ["model args on stderr", json.dumps(["--num-layers", "2", "--x"])]
    time.sleep(1.1)  # the file is named by the start's UTC second
    failed = run_entrypoint(tmp_path, "exit 7", ["--x"])
    logs = sorted((tmp_path / "logs").iterdir())
    sid = base_spec()["submit"]["submissionId"]
    assert [p.name[: len(sid) + 1] for p in logs] == [f"{sid}-", f"{sid}-"], logs
    assert all(re.fullmatch(r"[0-9]{8}T[0-9]{6}Z\.log", p.name[len(sid) + 1 :]) for p in logs), logs
    assert logs[0].read_text() == first.stdout
    assert logs[1].read_text() == failed.stdout and failed.returncode == 2
    raw = base_spec()
    raw["submit"]["logDir"] = str(tmp_path / "logs")
    assert fnmatch.filter([str(p) for p in logs], entrypoint.driver_log_glob(raw)) == [str(p) for p in logs]


def test_runtime_env_metadata_and_resources() -> None:
    raw = base_spec()
    assert submit.runtime_env(raw) == {"env_vars": raw["runtimeEnv"]["envVars"]}
    assert submit.entrypoint_resources(raw) == {"gpu_node": 0.001}
    meta = submit.metadata(raw)
    assert meta[submit.META_RELEASE] == "miles" and meta[submit.META_RUN_ID] == raw["run"]["id"]
    assert all(isinstance(v, str) for v in meta.values())


def test_image_digest() -> None:
    assert submit.image_digest("r/m@sha256:" + "a" * 64) == "sha256:" + "a" * 64
    assert submit.image_digest("r/m:latest") is None


def job(sid: str, status: str, release: str = "miles", ns: str = "default") -> types.SimpleNamespace:
    return types.SimpleNamespace(
        submission_id=sid, status=status, metadata={submit.META_RELEASE: release, submit.META_NAMESPACE: ns}
    )


def test_previous_active_selects_only_running_jobs_of_this_release() -> None:
    raw = base_spec()
    jobs = [
        job("new", "RUNNING"),
        job("old", "RUNNING"),
        job("older", "SUCCEEDED"),
        job("p", "PENDING"),
        job("other", "RUNNING", release="x"),
        job("otherns", "RUNNING", ns="y"),
        types.SimpleNamespace(submission_id="v", status="RUNNING", metadata={"miles.verifyFor": "miles"}),
    ]
    assert [j.submission_id for j in submit.previous_active(jobs, raw, "new")] == ["old", "p"]


def test_provenance_record_has_no_secret_values(tmp_path: Path) -> None:
    raw = base_spec()
    raw["model"]["hfPath"] = str(tmp_path)
    (tmp_path / ".miles-hooks-prepared.json").write_text(json.dumps({"resolvedRevision": "abc123"}))
    spec = specmod.RunSpec(raw=raw, path="x")
    rec = submit.provenance_record(spec, "sid", "bash -c x", 0.0, "2.60.0", True)
    assert rec["model"]["resolvedRevision"] == "abc123"
    assert rec["secretsByReference"] == [{"name": "hf-token", "key": "token", "env": "HF_TOKEN"}]
    assert rec["submittedAt"] == "1970-01-01T00:00:00Z" and rec["spec"] == raw


def provenance(sid: str, when: str, created: bool = True) -> dict[str, object]:
    return {"submissionId": sid, "submittedAt": when, "createdBySubmit": created}


def test_the_same_job_found_again_keeps_its_first_submission_time() -> None:
    existing = {**provenance("a", "T1"), "previousSubmissions": [{"submissionId": "z", "submittedAt": "T0"}]}
    rec = submit.merge_previous(provenance("a", "T2", created=False), existing, created=False)
    assert rec["submittedAt"] == "T1" and rec["createdBySubmit"] is True
    assert rec["previousSubmissions"] == [{"submissionId": "z", "submittedAt": "T0"}]


def test_a_job_submitted_again_under_the_same_id_is_dated_now() -> None:
    """The same spec, its earlier job gone from Ray (a new Ray head): the new job's time is recorded,
    or the run report would date it by the earlier job and call a fresh run stalled."""
    rec = submit.merge_previous(provenance("a", "T2"), provenance("a", "T1"), created=True)
    assert rec["submittedAt"] == "T2" and rec["createdBySubmit"] is True
    assert rec["previousSubmissions"] == [{"submissionId": "a", "submittedAt": "T1"}]


def test_a_changed_spec_keeps_the_earlier_submissions_bounded() -> None:
    history = [{"submissionId": f"s{i}", "submittedAt": f"T{i}"} for i in range(25)]
    existing = {**provenance("old", "T25"), "previousSubmissions": history}
    rec = submit.merge_previous(provenance("new", "T26"), existing, created=True)
    assert rec["submittedAt"] == "T26"
    assert len(rec["previousSubmissions"]) == 20
    assert rec["previousSubmissions"][-1] == {"submissionId": "old", "submittedAt": "T25"}
    assert submit.merge_previous(provenance("x", "T"), None, created=True) == provenance("x", "T")
