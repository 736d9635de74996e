"""report: real TensorBoard event files (written with the tensorboard package's writers, in both the
v2 tensor form and the ``simple_value`` form torch's SummaryWriter writes), real checkpoint trees with
files of known sizes and real mtimes, the provenance record built by ``submit``'s own function, and the
free space of the test's file system through a real ``statvfs``."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary import Writer
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from hooks_testlib import run_cli, spec_in, write
from miles_hooks.core import fsutil
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import BadInput, CheckFailed, HookTimeout
from miles_hooks.steps import submit
from miles_hooks.steps.report import check, checkpoints, collect, events, parse_fail_on, space, verdict
from miles_hooks.steps.report.deadline import Deadline
from miles_hooks.steps.report.events import GRAD_NORM, REPETITION, REWARD, STEP_TIME, TRUNCATED, Point

NOW = time.time()
MIN = 60.0
HOUR = 3600.0

# ---------------------------------------------------------------------------------------------------
# Builders: event files, checkpoint trees, provenance, specs


def write_scalars(logdir: Path, rows: Iterable[tuple[str, int, float, float]], style: str = "tensor") -> Path:
    """Write (tag, step, value, wall_time) rows into one new event file in ``logdir``; returns the file."""
    logdir.mkdir(parents=True, exist_ok=True)
    before = set(logdir.iterdir())
    if style == "tensor":
        writer = Writer(str(logdir))
        for tag, step, value, wall in rows:
            writer.add_scalar(tag, value, step, wall_time=wall)
        writer.close()
    else:  # what torch.utils.tensorboard.SummaryWriter.add_scalar writes (miles' writer)
        ew = EventFileWriter(str(logdir))
        for tag, step, value, wall in rows:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            ew.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
        ew.close()
    (new,) = set(logdir.iterdir()) - before
    return new


def run_rows(
    rewards: list[float],
    repetition: list[float],
    end: float,
    *,
    first_step: int = 0,
    grad: list[float] | None = None,
    spacing: float = 2 * MIN,
) -> list[tuple[str, int, float, float]]:
    """Rows for a run whose last rollout was logged at ``end``: one rollout every ``spacing`` seconds,
    two train steps per rollout, an eval every 5 rollouts."""
    rows: list[tuple[str, int, float, float]] = []
    n = len(rewards)
    for i, (rew, rep) in enumerate(zip(rewards, repetition, strict=True)):
        step = first_step + i
        wall = end - (n - 1 - i) * spacing
        rows += [
            (REWARD, step, rew, wall),
            (REPETITION, step, rep, wall),
            (TRUNCATED, step, 0.05, wall),
            (STEP_TIME, step, 95.0 + i, wall),
            ("rollout/step", step, float(step), wall),
        ]
        for k in range(2):
            g = grad[2 * i + k] if grad else 0.4 - 0.01 * i
            rows.append((GRAD_NORM, 2 * step + k, g, wall - 30 + k))
        if step % 5 == 0:
            rows.append(("eval/aime", step, 0.2 + 0.01 * step, wall))
    return rows


def set_mtime(root: Path, when: float) -> None:
    """Give a whole tree (files first, then directories bottom-up) the modification time ``when``."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            os.utime(Path(dirpath) / name, (when, when))
    os.utime(root, (when, when))


def make_checkpoints(ckpt: Path, iterations: dict[int, list[int]], tracker: str | None, when: float) -> None:
    """iter_NNNNNNN/ directories holding files of the given sizes (one nested), then the tracker."""
    ckpt.mkdir(parents=True, exist_ok=True)
    for it, sizes in iterations.items():
        d = ckpt / f"iter_{it:07d}"
        (d / "sub").mkdir(parents=True, exist_ok=True)
        for j, size in enumerate(sizes):
            target = d / ("sub" if j % 2 else ".") / f"__{j}_0.distcp"
            target.write_bytes(os.urandom(size))
    if tracker is not None:
        (ckpt / checkpoints.TRACKER).write_text(tracker + "\n")
    set_mtime(ckpt, when)


def write_provenance(raw: dict[str, Any], submitted_at: float) -> None:
    s = specmod.RunSpec(raw=raw, path="test")
    record = submit.provenance_record(
        s, s.submission_id(), submit.build_entrypoint(raw), submitted_at, "2.60.0", True
    )
    fsutil.atomic_write_json(raw["output"]["provenanceFile"], record)


def make_spec(tmp: Path, **health: Any) -> dict[str, Any]:
    raw = spec_in(tmp)
    raw["checks"]["health"].update(health)  # fixture: flatRewardRollouts 10, maxRepetitionFrac 0.4, stall 60
    raw["model"]["parameterCount"] = 1000  # 14 kB per save: free-space findings only where a test asks
    return raw


HEALTHY_REWARDS = [0.1 + 0.03 * i for i in range(12)]
LOW_REPETITION = [0.02 + 0.002 * i for i in range(12)]


def healthy_run(tmp: Path, *, end: float = NOW - 2 * MIN, style: str = "simple") -> dict[str, Any]:
    raw = make_spec(tmp)
    write_scalars(
        Path(raw["output"]["tensorboardDir"]) / "miles", run_rows(HEALTHY_REWARDS, LOW_REPETITION, end), style
    )
    make_checkpoints(
        Path(raw["output"]["checkpointDir"]), {4: [1000, 2000], 9: [1500, 2500, 10]}, "9", end - MIN
    )
    write_provenance(raw, end - 2 * HOUR)
    return raw


def degenerate_run(tmp: Path) -> dict[str, Any]:
    """The misconfigured-MoE symptom: reward pinned at 0.0, a large share of samples repeating (judged
    against the chart's default maxRepetitionFrac 0.5)."""
    raw = make_spec(tmp, maxRepetitionFrac=0.5)
    repetition = [0.5 + 0.2 * ((i * 7) % 10) / 10 for i in range(12)]  # 0.5 .. 0.68
    write_scalars(Path(raw["output"]["tensorboardDir"]), run_rows([0.0] * 12, repetition, NOW - MIN))
    make_checkpoints(Path(raw["output"]["checkpointDir"]), {9: [4096]}, "9", NOW - 3 * MIN)
    write_provenance(raw, NOW - HOUR)
    return raw


def stalled_run(tmp: Path) -> dict[str, Any]:
    """Healthy numbers, but the last metric and the last save are three hours old."""
    raw = make_spec(tmp)
    old = NOW - 3 * HOUR
    write_scalars(Path(raw["output"]["tensorboardDir"]), run_rows(HEALTHY_REWARDS, LOW_REPETITION, old))
    make_checkpoints(Path(raw["output"]["checkpointDir"]), {9: [4096]}, "9", old - MIN)
    write_provenance(raw, old - 2 * HOUR)
    return raw


def spec_file(tmp: Path, raw: dict[str, Any]) -> str:
    return str(write(tmp / "run.json", raw))


def kinds(result: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in result["findings"]]


def load(raw: dict[str, Any]) -> specmod.RunSpec:
    return specmod.parse(json.dumps(raw), "test")


# ---------------------------------------------------------------------------------------------------
# Free space (pure arithmetic + a real statvfs)


def test_expected_checkpoint_bytes_for_large_models() -> None:
    assert space.expected_checkpoint_bytes(4_000_000_000) == 56_000_000_000  # the ~56 GB of a 4B model
    assert space.expected_checkpoint_bytes(30_500_000_000) == 427_000_000_000
    assert space.expected_checkpoint_bytes(671_000_000_000) == 9_394_000_000_000
    assert (
        space.expected_checkpoint_bytes(2_000_000_000_000) == 28_000_000_000_000
    )  # beyond any float rounding
    assert space.expected_checkpoint_bytes(0) == 0
    with pytest.raises(ValueError, match="found -1"):
        space.expected_checkpoint_bytes(-1)


def test_next_checkpoint_prefers_a_measured_checkpoint() -> None:
    assert space.next_checkpoint_bytes(4_000_000_000, None) == (
        56_000_000_000,
        "14 bytes x 4,000,000,000 parameters (model.parameterCount)",
    )
    assert space.next_checkpoint_bytes(4_000_000_000, 61_000_000_000, "iter_0000009") == (
        61_000_000_000,
        "size of iter_0000009",
    )
    size, basis = space.next_checkpoint_bytes(0, None)
    assert size == 0 and "parameterCount is 0" in basis


@pytest.mark.parametrize(
    ("free", "expected", "status", "fit"),
    [
        (55_999_999_999, 56_000_000_000, "insufficient", 0),
        (56_000_000_000, 56_000_000_000, "tight", 1),
        (111_999_999_999, 56_000_000_000, "tight", 1),
        (112_000_000_000, 56_000_000_000, "ok", 2),
        (2**62, 9_394_000_000_000, "ok", 2**62 // 9_394_000_000_000),
        (0, 9_394_000_000_000, "insufficient", 0),
        (10**12, 0, "unknown", None),
    ],
)
def test_space_assess_boundaries(free: int, expected: int, status: str, fit: int | None) -> None:
    check = space.assess(free, expected)
    assert (check.status, check.saves_that_fit) == (status, fit)


def test_space_probe_uses_the_nearest_existing_directory(tmp_path: Path) -> None:
    probed, free, total = space.probe(tmp_path / "run" / "not" / "yet")
    st = os.statvfs(tmp_path)
    assert probed == str(tmp_path)
    assert total == st.f_blocks * st.f_frsize
    assert abs(free - st.f_bavail * st.f_frsize) <= max(64 << 20, total // 100)  # colleagues write meanwhile


def test_space_finding_from_real_free_space(tmp_path: Path) -> None:
    raw = healthy_run(tmp_path)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    # No checkpoint yet: the estimate is 14 B/parameter, so pick counts on both sides of the free space.
    shutil.rmtree(raw["output"]["checkpointDir"])
    raw["model"]["parameterCount"] = free // 14 // 4  # four saves fit
    ok = collect(load(raw), now=NOW)
    assert ok["space"]["status"] == "ok" and ok["space"]["savesThatFit"] >= 3
    assert ok["space"]["probedPath"] == str(tmp_path / "run")  # checkpointDir itself does not exist now
    raw["model"]["parameterCount"] = free // 14 * 3  # needs three times what is free
    low = collect(load(raw), now=NOW)
    assert low["space"]["status"] == "insufficient" and "space" in kinds(low)
    assert low["verdict"] == "healthy"  # low space is its own finding, not a verdict on the training
    reason = next(f["reason"] for f in low["findings"] if f["kind"] == "space")
    assert "model.parameterCount" in reason and str(tmp_path / "run") in reason


def test_space_estimate_uses_the_latest_checkpoint_size(tmp_path: Path) -> None:
    raw = healthy_run(tmp_path)
    result = collect(load(raw), now=NOW)
    assert result["space"]["expectedBytes"] == 1500 + 2500 + 10
    assert result["space"]["basis"] == "size of iter_0000009"


# ---------------------------------------------------------------------------------------------------
# Checkpoint tree


def test_checkpoint_scan_sizes_tracker_and_ages(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    make_checkpoints(ckpt, {10: [100, 200, 300], 20: [1000, 24], 30: [7]}, "20", NOW - 5 * MIN)
    (ckpt / "iter_bogus").mkdir()  # not a checkpoint
    (ckpt / "iter_0000040").write_text("a file, not a directory")
    result = checkpoints.scan(ckpt)
    assert [c.iteration for c in result.checkpoints] == [10, 20, 30]
    assert [(c.bytes, c.files) for c in result.checkpoints] == [(600, 3), (1024, 2), (7, 1)]
    assert result.tracker_iteration == 20 and result.latest is not None and result.latest.iteration == 20
    assert [c.iteration for c in result.complete] == [10, 20]
    assert [c.iteration for c in result.partial] == [30]
    assert result.total_bytes == 1631
    assert result.last_save_time is not None and abs(result.last_save_time - (NOW - 5 * MIN)) < 2
    assert any(
        "iter_0000030/ is newer than latest_checkpointed_iteration.txt (20)" in w for w in result.warnings
    )
    d = result.as_dict()
    assert d["count"] == 2 and d["latest"]["path"].endswith("iter_0000020")


def test_checkpoint_scan_problems_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "a"
    make_checkpoints(missing, {10: [1]}, "20", NOW)
    assert any(
        "names iteration 20 but iter_0000020/ is missing" in w for w in checkpoints.scan(missing).warnings
    )
    release = tmp_path / "b"
    make_checkpoints(release, {}, "release", NOW)
    assert any(
        "says 'release'" in w and "output.checkpointDir" in w for w in checkpoints.scan(release).warnings
    )
    garbage = tmp_path / "c"
    make_checkpoints(garbage, {}, "latest!", NOW)
    assert any(
        "expected an iteration number, found 'latest!'" in w for w in checkpoints.scan(garbage).warnings
    )
    no_tracker = tmp_path / "d"
    make_checkpoints(no_tracker, {5: [1]}, None, NOW)
    scanned = checkpoints.scan(no_tracker)
    assert scanned.latest is None and any("first save is in progress" in w for w in scanned.warnings)
    assert not checkpoints.scan(tmp_path / "absent").exists
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match=r"output.checkpointDir .*file: expected a directory"):
        checkpoints.scan(tmp_path / "file")


# ---------------------------------------------------------------------------------------------------
# Event files


@pytest.mark.parametrize("style", ["tensor", "simple"])
def test_event_scan_reads_both_scalar_forms(tmp_path: Path, style: str) -> None:
    write_scalars(tmp_path / "tb" / "project" / "exp", run_rows(HEALTHY_REWARDS, LOW_REPETITION, NOW), style)
    (tmp_path / "tb" / "notes.txt").write_text("not an event file")
    scan = events.scan(tmp_path / "tb")
    assert len(scan.files) == 1 and not scan.warnings
    reward = scan.points(REWARD)
    assert [p.step for p in reward] == list(range(12))
    assert [round(p.value, 5) for p in reward] == [round(v, 5) for v in HEALTHY_REWARDS]
    assert abs(reward[-1].wall_time - NOW) < 1e-3 * NOW * 1e-6 + 1
    assert len(scan.points(GRAD_NORM)) == 24 and scan.eval_tags() == ["eval/aime"]
    assert "rollout/step" not in scan.series  # read (it counts as activity) but not kept
    assert scan.last_scalar is not None and scan.last_scalar[0] == pytest.approx(NOW, abs=1)


def test_event_scan_follows_a_resumed_run(tmp_path: Path) -> None:
    """A restart from iter_4 repeats rollouts 5..: the newer file wins from its first step on."""
    tb = tmp_path / "tb"
    first = run_rows([0.1] * 8, [0.01] * 8, NOW - 2 * HOUR)  # steps 0..7, then the job died
    write_scalars(tb, first)
    second = run_rows([0.9] * 2, [0.02] * 2, NOW, first_step=5)  # resumed from iter_4: steps 5, 6 so far
    write_scalars(tb, second, style="simple")
    scan = events.scan(tb)
    reward = scan.points(REWARD)
    assert [p.step for p in reward] == list(range(7))  # the dead run's step 7 is gone
    assert [p.value for p in reward] == pytest.approx([0.1] * 5 + [0.9] * 2)


def test_event_scan_stops_cleanly_at_a_truncated_record(tmp_path: Path) -> None:
    path = write_scalars(tmp_path / "tb", run_rows(HEALTHY_REWARDS, LOW_REPETITION, NOW))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])  # a writer killed mid-flush
    scan = events.scan(tmp_path / "tb")
    reward = scan.points(REWARD)
    assert 3 <= len(reward) < 12
    assert [p.step for p in reward] == list(range(len(reward)))


def test_event_scan_absent_and_wrong_kind(tmp_path: Path) -> None:
    assert not events.scan(tmp_path / "none").exists
    (tmp_path / "f").write_text("x")
    with pytest.raises(BadInput, match=r"output.tensorboardDir .*expected a directory"):
        events.scan(tmp_path / "f")


def test_deadline_names_what_it_was_reading(tmp_path: Path) -> None:
    write_scalars(tmp_path / "tb", run_rows(HEALTHY_REWARDS, LOW_REPETITION, NOW))
    with pytest.raises(HookTimeout, match=r"--timeout 0 s while listing event files under .*tb") as info:
        events.scan(tmp_path / "tb", Deadline(0.0))
    assert info.value.exit_code == 3


# ---------------------------------------------------------------------------------------------------
# Verdict rules (pure)

TH = verdict.Thresholds(flat_reward_rollouts=5, max_repetition_frac=0.4, stall_minutes=60)


def pts(values: list[float], start: int = 0) -> list[Point]:
    return [Point(start + i, NOW, v) for i, v in enumerate(values)]


def assess(series: dict[str, list[Point]], last: float = NOW - MIN, **kw: Any) -> verdict.Assessment:
    kw.setdefault("started", True)
    return verdict.assess(series, [verdict.Activity(last, "metric x")], NOW, TH, **kw)


def test_flat_zero_reward_needs_n_rollouts() -> None:
    four = assess({REWARD: pts([0.3, 0.0, 0.0, 0.0, 0.0])})
    assert four.verdict == "healthy" and not four.findings
    five = assess({REWARD: pts([0.3, 0.0, 0.0, 0.0, 0.0, 0.0])})
    assert five.verdict == "degenerate"
    assert "rollout/raw_reward is 0.0 for the last 5 rollouts (steps 1-5)" in five.findings[0].reason
    blip = assess({REWARD: pts([0.0, 0.0, 0.01, 0.0, 0.0, 0.0])})
    assert blip.verdict == "healthy"
    assert assess({REWARD: pts([0.0] * 4)}).verdict == "healthy"  # 4 zero rollouts < flatRewardRollouts 5
    early = assess({REWARD: pts([0.0, 0.0])})
    assert early.verdict == "healthy" and "0.0 in all 2 rollouts so far" in early.notes[0]
    constant = assess({REWARD: pts([0.5] * 8)})  # flat but not zero: not this rule
    assert constant.verdict == "healthy"


def test_repetition_average_against_the_threshold() -> None:
    above = assess({REPETITION: pts([0.1, 0.1, 0.5, 0.6, 0.7, 0.55, 0.62])})
    assert above.verdict == "degenerate"
    assert "averages 0.594 over the last 5 rollouts (steps 2-6, latest 0.62)" in above.findings[0].reason
    assert "checks.health.maxRepetitionFrac 0.4" in above.findings[0].reason
    at = assess({REPETITION: pts([0.4] * 5)})
    assert at.verdict == "healthy"  # at the threshold is allowed
    two = assess({REPETITION: pts([0.9, 0.9])})
    assert two.verdict == "healthy"  # too few rollouts to judge yet
    three = assess({REPETITION: pts([0.9, 0.9, 0.9])})
    assert three.verdict == "degenerate"


def test_nan_grad_norm_and_reward() -> None:
    nan = float("nan")
    recent = assess({GRAD_NORM: pts([0.3] * 8 + [nan, 0.3])})
    assert (
        recent.verdict == "degenerate"
        and "train/grad_norm is nan at 1 of the last 5" in recent.findings[0].reason
    )
    old = assess({GRAD_NORM: pts([nan] + [0.3] * 9)})
    assert old.verdict == "healthy" and "not finite at 1 earlier step(s) (first at step 0)" in old.notes[0]
    inf_reward = assess({REWARD: pts([0.2, math.inf])})
    assert inf_reward.verdict == "degenerate" and "not finite (inf)" in inf_reward.findings[0].reason


def test_stall_window_and_finished_runs() -> None:
    fresh = assess({REWARD: pts([0.3])}, last=NOW - 59 * MIN)
    assert fresh.verdict == "healthy"
    stale = assess({REWARD: pts([0.3])}, last=NOW - 61 * MIN)
    assert stale.verdict == "stalled" and "no new metric or checkpoint for 61 min" in stale.findings[0].reason
    assert "checks.health.stallMinutes 60" in stale.findings[0].reason
    done = assess({REWARD: pts([0.3] * 12)}, last=NOW - 10 * HOUR, total_rollouts=12)
    assert done.verdict == "healthy" and done.finished
    not_done = assess({REWARD: pts([0.3] * 11)}, last=NOW - 10 * HOUR, total_rollouts=12)
    assert not_done.verdict == "stalled"
    by_tracker = assess(
        {REWARD: pts([0.3] * 3)}, last=NOW - 10 * HOUR, total_rollouts=12, tracker_iteration=11
    )
    assert by_tracker.finished


def test_degenerate_and_stalled_are_both_listed() -> None:
    both = assess({REWARD: pts([0.0] * 6)}, last=NOW - 2 * HOUR)
    assert both.verdict == "degenerate" and [f.kind for f in both.findings] == ["degenerate", "stalled"]


def test_not_started_becomes_stalled_after_the_window() -> None:
    nothing = verdict.assess({}, [], NOW, TH, started=False)
    assert nothing.verdict == "not-started" and nothing.findings[0].kind == "not-started"
    recent = verdict.assess({}, [verdict.Activity(NOW - 10 * MIN, "job j submitted")], NOW, TH, started=False)
    assert recent.verdict == "not-started" and "(job j submitted)" in recent.findings[0].reason
    long_ago = verdict.assess(
        {}, [verdict.Activity(NOW - 3 * HOUR, "job j submitted")], NOW, TH, started=False
    )
    assert long_ago.verdict == "stalled" and "nothing written for 180 min since job j submitted" in (
        long_ago.findings[0].reason
    )


def test_num_rollout_from_train_args() -> None:
    assert verdict.num_rollout(["--x", "--num-rollout", "100", "--y"]) == 100
    assert verdict.num_rollout(["--num-rollout=3000"]) == 3000
    assert verdict.num_rollout(["--num-rollout"]) is None
    assert verdict.num_rollout(["--num-rollout", "many"]) is None


@pytest.mark.parametrize(
    ("tracking", "events_written", "why"),
    [
        (False, False, "TensorBoard tracking is off; set recipe.tracking.tensorboard=true"),
        (True, False, "no TensorBoard event files under the run spec's output.tensorboardDir"),
        (True, True, "hold no rollout/raw_reward"),
    ],
)
def test_a_run_with_nothing_to_judge_it_by_is_unknown_not_healthy(
    tmp_path: Path, tracking: bool, events_written: bool, why: str
) -> None:
    raw = make_spec(tmp_path)
    args = [a for a in raw["train"]["args"] if a != "--use-tensorboard"]
    raw["train"]["args"] = [*args, "--use-tensorboard"] if tracking else args
    make_checkpoints(Path(raw["output"]["checkpointDir"]), {4: [1000]}, "4", NOW - MIN)
    write_provenance(raw, NOW - HOUR)
    if events_written:
        write_scalars(
            Path(raw["output"]["tensorboardDir"]) / "miles",
            [(STEP_TIME, i, 1.0, NOW - MIN) for i in range(3)],
        )
    result = collect(load(raw), now=NOW)
    assert result["verdict"] == "unknown", result["findings"]
    (finding,) = [f for f in result["findings"] if f["kind"] == "unknown"]
    assert why in finding["reason"] and "the verdict is unknown, not healthy" in finding["reason"]
    with pytest.raises(CheckFailed, match="nothing to judge"):
        check(result, parse_fail_on("unknown"))
    check(result, parse_fail_on("degenerate,stalled"))


def test_fail_on_parsing() -> None:
    assert parse_fail_on("degenerate, stalled") == {"degenerate", "stalled"}
    assert parse_fail_on("none") == frozenset() and parse_fail_on("") == frozenset()
    with pytest.raises(
        BadInput, match=r"--fail-on: expected .*degenerate, stalled, not-started, unknown, space.*found 'x'"
    ):
        parse_fail_on("stalled,x")


# ---------------------------------------------------------------------------------------------------
# Whole reports: collect() in-process, then the CLI as a process


def test_healthy_report(tmp_path: Path) -> None:
    result = collect(load(healthy_run(tmp_path)), now=NOW)
    assert result["verdict"] == "healthy" and result["findings"] == []
    assert result["checkpoints"]["count"] == 2 and result["checkpoints"]["latest"]["iteration"] == 9
    assert result["checkpoints"]["totalBytes"] == 3000 + 4010
    m = result["metrics"]
    assert list(m)[:5] == [REWARD, REPETITION, TRUNCATED, GRAD_NORM, STEP_TIME] and "eval/aime" in m
    assert m[REWARD]["points"] == 12 and m[REWARD]["last"] == pytest.approx(0.43, abs=1e-6)
    assert m["eval/aime"]["lastStep"] == 10
    assert result["provenance"]["present"] and result["provenance"]["matchesSpec"]
    assert result["provenance"]["model"]["repoId"] == "Qwen/Qwen3-4B"
    assert result["idleMinutes"] == pytest.approx(2, abs=0.1)


def test_degenerate_report(tmp_path: Path) -> None:
    result = collect(load(degenerate_run(tmp_path)), now=NOW)
    assert result["verdict"] == "degenerate"
    reasons = " | ".join(f["reason"] for f in result["findings"])
    assert "rollout/raw_reward is 0.0 for the last 10 rollouts (steps 2-11)" in reasons
    assert "rollout/repetition_frac averages 0.59" in reasons and "maxRepetitionFrac 0.5" in reasons


def test_thresholds_come_from_the_spec(tmp_path: Path) -> None:
    raw = degenerate_run(tmp_path)
    raw["checks"]["health"].update({"flatRewardRollouts": 20, "maxRepetitionFrac": 0.9})
    result = collect(load(raw), now=NOW)
    assert result["verdict"] == "healthy", result["findings"]
    assert result["thresholds"] == {"flatRewardRollouts": 20, "maxRepetitionFrac": 0.9, "stallMinutes": 60.0}
    raw["checks"]["health"]["stallMinutes"] = 1  # last metric 1 min ago, last save 3 min ago
    raw["checks"]["health"]["maxRepetitionFrac"] = 0.9
    assert collect(load(raw), now=NOW + 2 * MIN)["verdict"] == "stalled"


def test_stalled_report_and_finished_run(tmp_path: Path) -> None:
    raw = stalled_run(tmp_path)
    result = collect(load(raw), now=NOW)
    assert result["verdict"] == "stalled" and kinds(result) == ["stalled"]
    assert "no new metric or checkpoint for 180 min" in result["findings"][0]["reason"]
    assert result["lastActivity"].startswith("metric ")
    raw["train"]["args"] += ["--num-rollout", "12"]  # the same files, but the run was done at rollout 11
    write_provenance(raw, NOW - 5 * HOUR)
    done = collect(load(raw), now=NOW)
    assert done["verdict"] == "healthy" and done["finished"] and done["numRollout"] == 12


def test_provenance_problems_are_warnings(tmp_path: Path) -> None:
    raw = healthy_run(tmp_path)
    raw["submit"]["submissionId"] = "miles-0123456789ab"  # spec changed after submit: the chart's new id
    result = collect(load(raw), now=NOW)
    assert not result["provenance"]["matchesSpec"]
    assert any("expected " + load(raw).submission_id() in w for w in result["warnings"])
    Path(raw["output"]["provenanceFile"]).write_text("{not json")
    bad = collect(load(raw), now=NOW)
    assert not bad["provenance"]["present"] and any(
        "expected JSON, found a parse error" in w for w in bad["warnings"]
    )
    Path(raw["output"]["provenanceFile"]).write_text('{"kind": "something-else"}')
    other = collect(load(raw), now=NOW)
    assert any(
        "expected kind 'miles-hooks/provenance', found 'something-else'" in w for w in other["warnings"]
    )


def test_rolling_tag_without_digest_is_flagged(tmp_path: Path) -> None:
    raw = healthy_run(tmp_path)
    raw["images"].update({"miles": "radixark/miles:latest", "milesRollingTag": True})
    write_provenance(raw, NOW - HOUR)
    result = collect(load(raw), now=NOW)
    assert any("rolling tag without a digest" in w and "image.digest" in w for w in result["warnings"])


def test_cli_healthy_run_exits_0_and_draws_the_plot(tmp_path: Path) -> None:
    raw = healthy_run(tmp_path)
    png = tmp_path / "health.png"
    proc = run_cli("report", "--spec", spec_file(tmp_path, raw), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "verdict        : HEALTHY" in proc.stdout
    assert "rollout/raw_reward" in proc.stdout and "eval/aime" in proc.stdout
    assert f"plot           : {png}" in proc.stdout
    with Image.open(png) as img:
        assert img.format == "PNG" and img.size == (800, 550)
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 20  # lines were drawn, not an empty canvas


def test_cli_degenerate_run_fails_naming_why(tmp_path: Path) -> None:
    raw = degenerate_run(tmp_path)
    env = {**os.environ, "HF_TOKEN": "hf_dont_print_me_123"}
    proc = run_cli("report", "--spec", spec_file(tmp_path, raw), "--fail-on", "degenerate,stalled", env=env)
    assert proc.returncode == 1, proc.stderr
    assert "verdict        : DEGENERATE" in proc.stdout
    assert "is degenerate (failing on degenerate" in proc.stderr
    assert "rollout/raw_reward is 0.0 for the last 10 rollouts" in proc.stderr
    assert "hf_dont_print_me_123" not in proc.stdout + proc.stderr
    report_only = run_cli("report", "--spec", spec_file(tmp_path, raw), "--fail-on", "none")
    assert report_only.returncode == 0, report_only.stderr


def test_a_copied_run_directory_reads_as_the_run_on_the_volume(tmp_path: Path) -> None:
    """From a laptop: the run directory copied out of a pod (`kubectl cp`), read with --output-dir, gives
    the report the volume would; without the volume or the copy, the message says the volume is missing."""
    raw = healthy_run(tmp_path / "volume")
    raw["storage"]["mountPath"] = str(tmp_path / "volume")
    copy = tmp_path / "laptop-copy"
    shutil.copytree(raw["output"]["dir"], copy)
    shutil.rmtree(tmp_path / "volume")
    spec = spec_file(tmp_path, raw)

    unmounted = run_cli("report", "--spec", spec)
    assert unmounted.returncode == 2, unmounted.stdout + unmounted.stderr
    assert f"output.dir {raw['output']['dir']} is not on this machine" in unmounted.stderr
    assert "is not mounted here" in unmounted.stderr and "--output-dir" in unmounted.stderr
    assert "submit has not run" not in unmounted.stderr

    proc = run_cli("report", "--spec", spec, "--output-dir", str(copy))
    assert proc.returncode == 0, proc.stderr
    assert "verdict        : HEALTHY" in proc.stdout and "rollout/raw_reward" in proc.stdout

    missing = run_cli("report", "--spec", spec, "--output-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "--output-dir: expected a directory" in missing.stderr


def test_cli_stalled_run_json(tmp_path: Path) -> None:
    raw = stalled_run(tmp_path)
    proc = run_cli("report", "--spec", spec_file(tmp_path, raw), "--json", "--log-format", "json")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert result["verdict"] == "stalled" and result["kind"] == "miles-hooks/report"
    logs = [json.loads(line) for line in proc.stderr.splitlines()]
    error = next(entry for entry in logs if entry["level"] == "error")
    assert error["step"] == "report" and error["exit_code"] == 1
    assert "is stalled" in error["msg"] and "checks.health.stallMinutes 60" in error["msg"]


def test_import_stays_light() -> None:
    code = (
        "import sys, miles_hooks.steps.report, miles_hooks.cli; "
        "print(sorted(m for m in ('tensorboard', 'matplotlib', 'numpy') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.strip() == "[]"


def test_cli_json_has_no_nan_tokens(tmp_path: Path) -> None:
    raw = make_spec(tmp_path)
    nan = float("nan")
    write_scalars(
        Path(raw["output"]["tensorboardDir"]),
        run_rows([0.2] * 6, [0.05] * 6, NOW, grad=[0.3] * 10 + [nan, nan]),
    )
    proc = run_cli("report", "--spec", spec_file(tmp_path, raw), "--json", "--fail-on", "none")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert result["verdict"] == "degenerate"
    assert result["metrics"][GRAD_NORM]["last"] == "nan" and result["metrics"][GRAD_NORM]["nonFinite"] == 2


def test_cli_not_started_passes_by_default_and_fails_when_asked(tmp_path: Path) -> None:
    raw = make_spec(tmp_path)
    spec_path = spec_file(tmp_path, raw)
    proc = run_cli("report", "--spec", spec_path)
    assert proc.returncode == 0, proc.stderr
    assert "verdict        : NOT-STARTED" in proc.stdout
    assert "no provenance record at" in proc.stdout
    strict = run_cli("report", "--spec", spec_path, "--fail-on", "not-started")
    assert strict.returncode == 1 and "no metric and no checkpoint written yet" in strict.stderr


def test_cli_low_space_fails_only_when_asked(tmp_path: Path) -> None:
    raw = make_spec(tmp_path)
    st = os.statvfs(tmp_path)
    raw["model"]["parameterCount"] = st.f_bavail * st.f_frsize // 14 * 2
    spec_path = spec_file(tmp_path, raw)
    assert run_cli("report", "--spec", spec_path).returncode == 0
    proc = run_cli("report", "--spec", spec_path, "--fail-on", "space")
    assert proc.returncode == 1 and "[space]" in proc.stderr and "model.parameterCount" in proc.stderr


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    raw = make_spec(tmp_path)
    raw["checks"]["health"]["maxRepetitionFrac"] = 1.5
    proc = run_cli("report", "--spec", spec_file(tmp_path, raw))
    assert (
        proc.returncode == 2
        and "checks.health.maxRepetitionFrac: expected maximum 1, found 1.5" in proc.stderr
    )
    good = make_spec(tmp_path)
    assert run_cli("report", "--spec", spec_file(tmp_path, good), "--fail-on", "bogus").returncode == 2
    Path(good["output"]["dir"]).mkdir(parents=True)
    Path(good["output"]["tensorboardDir"]).write_text("oops")
    proc = run_cli("report", "--spec", spec_file(tmp_path, good))
    assert proc.returncode == 2 and "output.tensorboardDir" in proc.stderr and "found a file" in proc.stderr
    Path(good["output"]["tensorboardDir"]).unlink()
    proc = run_cli("report", "--spec", spec_file(tmp_path, good), "--plot", str(tmp_path / "no" / "dir.png"))
    assert (
        proc.returncode == 2 and "--plot" in proc.stderr and "expected an existing directory" in proc.stderr
    )


def test_cli_timeout_exits_3(tmp_path: Path) -> None:
    raw = healthy_run(tmp_path)
    proc = run_cli("report", "--spec", spec_file(tmp_path, raw), "--timeout", "0")
    assert proc.returncode == 3, proc.stderr
    assert "gave up after --timeout 0 s" in proc.stderr


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    raw = degenerate_run(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "miles_hooks", "report", "--spec", spec_file(tmp_path, raw)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "DEGENERATE" in proc.stdout


def as_other_user(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI as an unprivileged user (root reads every directory regardless of its mode)."""
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "miles_hooks", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": "/tmp"},
    )


def test_unreadable_directories_are_named_not_taken_for_an_empty_run(tmp_path: Path) -> None:
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.fail("running as root without setpriv: cannot drop privileges to test permissions")
    base = Path(tempfile.mkdtemp(prefix="miles-report-perm-"))  # outside pytest's 0700 tmp root
    try:
        os.chmod(base, 0o755)
        raw = healthy_run(base)
        spec_path = spec_file(base, raw)
        ckpt, tb = Path(raw["output"]["checkpointDir"]), Path(raw["output"]["tensorboardDir"])
        os.chmod(ckpt, 0o000)
        proc = as_other_user("report", "--spec", spec_path)
        assert proc.returncode == 1, proc.stderr
        assert f"output.checkpointDir {ckpt} cannot be listed: Permission denied" in proc.stderr
        os.chmod(ckpt, 0o755)
        os.chmod(tb / "miles", 0o000)  # a subdirectory: reported, the rest still counts
        proc = as_other_user("report", "--spec", spec_path, "--json")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert result["tensorboard"]["files"] == 0 and result["checkpoints"]["count"] == 2
        assert any(f"{tb / 'miles'} cannot be listed (Permission denied)" in w for w in result["warnings"])
        os.chmod(tb / "miles", 0o755)
        os.chmod(tb, 0o000)  # the top directory: an error, not "not started"
        proc = as_other_user("report", "--spec", spec_path)
        assert proc.returncode == 1, proc.stderr
        assert f"output.tensorboardDir {tb} cannot be listed: Permission denied" in proc.stderr
    finally:
        for dirpath, _, _ in os.walk(base):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(base)
