"""CLI surface, logging formats, exit codes and the lock file rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hooks_testlib import FIXTURE, base_spec, run_cli
from miles_hooks import cli
from miles_hooks.core import lockfile
from miles_hooks.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_TIMEOUT,
    BadInput,
    CheckFailed,
    HookTimeout,
)
from miles_hooks.steps import plan


def test_help_lists_every_step_with_a_purpose() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    for step in (
        "plan",
        "preflight",
        "prepare-data",
        "convert",
        "wait-ready",
        "verify",
        "submit",
        "status",
        "gpu-check",
    ):
        assert step in proc.stdout
        assert cli.STEPS[step]


def test_exit_codes_map_from_exceptions() -> None:
    assert CheckFailed("x").exit_code == EXIT_CHECK_FAILED
    assert BadInput("x").exit_code == EXIT_BAD_INPUT
    assert HookTimeout("x").exit_code == EXIT_TIMEOUT
    assert str(CheckFailed("top", ["a", "b"])) == "top\n  - a\n  - b"


def test_plan_text_and_json() -> None:
    text = run_cli("plan", "--spec", str(FIXTURE))
    assert text.returncode == 0 and "colocated: 1 worker pod(s) x 8 GPUs = 8 GPUs" in text.stdout
    js = run_cli("plan", "--spec", str(FIXTURE), "--json")
    body = json.loads(js.stdout)
    assert body["submissionId"].startswith("miles-") and body["placement"][0]["role"] == "actor + rollout"
    assert body["secrets"] == [{"name": "hf-token", "key": "token", "env": "HF_TOKEN"}]


def test_json_log_lines() -> None:
    proc = run_cli("plan", "--spec", str(FIXTURE), "--log-format", "json")
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert (
        lines and lines[-1]["msg"] == "done" and lines[-1]["step"] == "plan" and lines[-1]["exit_code"] == 0
    )
    env = dict(os.environ, MILES_HOOKS_LOG_FORMAT="json")
    proc = run_cli("plan", "--spec", "/nonexistent.json", env=env)
    assert proc.returncode == 2
    err = json.loads(proc.stderr.strip().splitlines()[-1])
    assert err["level"] == "error" and "run spec not found" in err["msg"]


def test_no_step_prints_help_and_exits_2() -> None:
    assert run_cli().returncode == 2


def test_gpu_check_forwards_arguments() -> None:
    proc = run_cli("gpu-check", "--help")
    assert proc.returncode == 0 and "usage" in proc.stdout.lower()


def test_import_is_light() -> None:
    code = (
        "import sys, miles_hooks, miles_hooks.cli, miles_hooks.steps.convert, miles_hooks.steps.export,"
        " miles_hooks.core.runspec;"
        "names = ('ray', 'kubernetes', 'huggingface_hub', 'jsonschema', 'torch');"
        "heavy = [m for m in names if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_is_stale_rules() -> None:
    me = {"host": "h", "pid": os.getpid(), "token": "t"}
    assert lockfile.is_stale(me, 1, 60, "h", os.getpid())  # our pid, not our token: a restarted container
    assert not lockfile.is_stale({"host": "h", "pid": os.getppid()}, 1, 60, "h", os.getpid())
    assert lockfile.is_stale({"host": "h", "pid": 2**22 + 12345}, 1, 60, "h", os.getpid())  # dead pid
    assert not lockfile.is_stale({"host": "other", "pid": 1}, 59, 60, "h", 5)
    assert lockfile.is_stale({"host": "other", "pid": 1}, 61, 60, "h", 5)
    assert not lockfile.is_stale(None, 5, 600, "h", 5)


def test_lock_excludes_and_recovers_from_a_dead_holder(tmp_path: Path) -> None:
    path = tmp_path / ".x.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom miles_hooks.core.lockfile import FileLock\n"
            f"FileLock({str(path)!r}, 60).acquire(5)\nprint('held', flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    b = lockfile.FileLock(path, 60)
    with pytest.raises(HookTimeout, match="still held"):
        b.acquire(0.5)
    holder.kill()
    holder.wait()
    started = time.monotonic()
    b.acquire(5)  # the holder's pid is dead on this host: recovered at once, not after 60 s
    assert time.monotonic() - started < 2 and b.held()
    b.release()
    assert not path.exists()


def test_lock_goes_stale_without_heartbeat(tmp_path: Path) -> None:
    path = tmp_path / ".y.lock"
    path.write_text(json.dumps({"host": "another-pod", "pid": 1, "token": "old"}))
    old = time.time() - 120
    os.utime(path, (old, old))
    lock = lockfile.FileLock(path, 60)
    lock.acquire(2)
    assert lock.held()
    lock.release()


def test_plan_placement_disaggregated() -> None:

    raw = base_spec()
    raw["topology"].update(
        {
            "colocate": False,
            "actorNodes": 1,
            "rolloutGpus": 12,
            "rolloutEngines": 6,
            "rolloutGpusPerEngine": 2,
            "enginesPerWorker": 4,
            "rolloutWorkers": 2,
            "workerReplicas": 3,
            "clusterGpus": 24,
        }
    )
    rows = plan.placement(raw)
    assert [(r["role"], r["rolloutEngines"]) for r in rows] == [("actor", 0), ("rollout", 4), ("rollout", 2)]


def test_command_table_is_the_parser() -> None:
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "step")
    assert list(subparsers.choices) == [c.name for c in cli.COMMANDS] == list(cli.STEPS)
    for command in cli.COMMANDS:
        sub = subparsers.choices[command.name]
        flags = {f for a in sub._actions for f in a.option_strings}
        assert {"--spec", "--log-format", "--json", "--verbose"} <= flags, command.name
        for opt in command.options:
            assert set(opt.flags) <= flags, (command.name, opt.flags)
        assert callable(command.handler)


def test_gpu_check_flags_have_no_default_of_their_own_for_chart_values() -> None:
    args = cli.parse_args(["gpu-check", "--spec", ""])
    for dest in ("tolerance", "matmul_tflops", "copy_gbps", "allreduce_gbps", "sendrecv_gbps"):
        assert getattr(args, dest) is None, dest  # the run spec (the chart) or the flag decides
    opts = cli.gpu_check_options(args)
    assert opts.thresholds.tolerance is None and opts.thresholds.minimum("matmul_tflops") is None


def test_gpu_check_thresholds_from_the_spec(tmp_path: Path) -> None:
    raw = base_spec()
    path = tmp_path / "run.json"
    path.write_text(json.dumps(raw))
    args = cli.parse_args(["gpu-check", "--spec", str(path), "--copy-gbps", "1000"])
    th = cli.gpu_check_options(args).thresholds
    assert th.tolerance == raw["checks"]["gpu"]["tolerance"]
    assert th.matmul_tflops == raw["checks"]["gpu"]["matmulTflops"]
    assert th.copy_gbps == 1000.0


def test_gpu_check_reference_without_tolerance_is_bad_input() -> None:
    args = cli.parse_args(["gpu-check", "--spec", "", "--matmul-tflops", "700"])
    with pytest.raises(BadInput, match="--matmul-tflops: a reference needs a tolerance"):
        cli.gpu_check_options(args)


def test_shared_option_helpers() -> None:
    timeout = cli.timeout_option(300.0, "to read")
    assert timeout.flags == ("--timeout",) and timeout.kwargs["default"] == 300.0
    assert "checks.waitReadyTimeoutSeconds" in cli.timeout_option(None, "to wait").kwargs["help"]


def test_spec_and_source_dir_defaults_are_read_when_parsing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MILES_HOOKS_SPEC", raising=False)
    monkeypatch.delenv("MILES_HOOKS_SOURCE_DIR", raising=False)
    assert cli.parse_args(["plan"]).spec == "/etc/miles/run.json"
    assert cli.parse_args(["prepare-data"]).source_dir is None
    monkeypatch.setenv("MILES_HOOKS_SPEC", str(tmp_path / "run.json"))
    monkeypatch.setenv("MILES_HOOKS_SOURCE_DIR", str(tmp_path))
    assert cli.parse_args(["plan"]).spec == str(tmp_path / "run.json")
    assert cli.parse_args(["gpu-check"]).spec == str(tmp_path / "run.json")
    assert cli.parse_args(["prepare-data"]).source_dir == str(tmp_path)
    assert cli.parse_args(["gpu-check", "--spec", ""]).spec == ""  # explicitly none
