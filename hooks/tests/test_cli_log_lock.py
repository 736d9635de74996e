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
from miles_hooks import cli, lockfile, plan
from miles_hooks.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_TIMEOUT,
    BadInput,
    CheckFailed,
    HookTimeout,
)


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
        "import sys, miles_hooks, miles_hooks.cli, miles_hooks.convert, miles_hooks.spec;"
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
            "import sys, time\nfrom miles_hooks.lockfile import FileLock\n"
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
