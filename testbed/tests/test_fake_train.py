"""The miles stand-in's checkpoints (testbed/fake-miles/train.py): Megatron's tracker and iter dirs, the
save schedule, resuming, and the fail-once fault injection the e2e tests use to show a retried job
resuming."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TRAIN_PY = Path(__file__).resolve().parents[1] / "fake-miles" / "train.py"
REPO = Path(__file__).resolve().parents[2]


def load_train() -> ModuleType:
    # fake-miles is /root/miles on the Ray workers, not a package here; a name of its own keeps it apart
    # from anything else called "train".
    spec = importlib.util.spec_from_file_location("fake_miles_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = load_train()


def test_no_tracker_means_no_checkpoint(tmp_path: Path) -> None:
    assert train.latest_iteration(str(tmp_path)) is None
    assert train.latest_iteration(str(tmp_path / "not-there")) is None
    assert train.latest_iteration(None) is None


def test_a_save_writes_the_iter_dir_then_the_tracker_which_reads_back(tmp_path: Path) -> None:
    save = tmp_path / "checkpoints"
    iter_dir = train.save_checkpoint(str(save), 2)
    assert iter_dir == save / "iter_0000002"
    assert json.loads((iter_dir / "stand-in.json").read_text())["iteration"] == 2
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert train.latest_iteration(str(save)) == 2

    train.save_checkpoint(str(save), 10)
    assert train.latest_iteration(str(save)) == 10
    # the tracker was renamed into place: no temp file is left beside it
    assert sorted(p.name for p in save.iterdir()) == [
        "iter_0000002",
        "iter_0000010",
        "latest_checkpointed_iteration.txt",
    ]


@pytest.mark.parametrize("content", ["release", "ten", ""])
def test_a_tracker_without_an_iteration_number_stops_the_run(
    tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    tracker.write_text(content)
    with pytest.raises(SystemExit) as exc:
        train.latest_iteration(str(tmp_path))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(tracker) in err and repr(content) in err


def test_the_fail_once_marker_is_taken_by_the_first_call_only(tmp_path: Path) -> None:
    save = tmp_path / "out" / "checkpoints"
    marker = tmp_path / "out" / "testbed-fail-once"
    assert train.fail_once_marker(str(save)) == marker
    marker.parent.mkdir()
    marker.write_text("fail once\n")
    assert train.take_fail_once(str(save)) == marker
    assert not marker.exists()
    assert train.take_fail_once(str(save)) is None


def test_the_hold_marker_is_taken_at_the_iteration_it_names_only(tmp_path: Path) -> None:
    save = tmp_path / "out" / "checkpoints"
    marker = tmp_path / "out" / "testbed-hold-after-save"
    marker.parent.mkdir()
    marker.write_text("3\n")
    assert train.take_hold(str(save), 1) is None and marker.exists()
    assert train.take_hold(str(save), 3) == marker
    assert not marker.exists()
    assert train.take_hold(str(save), 3) is None


class HeldError(Exception):
    """Raised by the stand-in's sleep once it holds: the process would sleep until its Ray head is gone."""


def test_a_held_driver_saves_its_iteration_then_never_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, ref = tmp_path / "out", tmp_path / "ref"
    ref.mkdir()
    out.mkdir()
    (out / "testbed-hold-after-save").write_text("3")

    class HoldingClock:
        now = 0.0

        def monotonic(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            if seconds >= 3600:
                raise HeldError
            self.now += seconds

    monkeypatch.setattr(train, "time", HoldingClock())
    with pytest.raises(HeldError):
        run_main(monkeypatch, capsys, out, ref)
    stdout = capsys.readouterr().out
    assert "saved checkpoint iteration 3" in stdout and "rollout 4:" not in stdout, stdout
    assert f"holding after saving iteration 3 ({out / 'testbed-hold-after-save'}, removed)" in stdout
    assert train.latest_iteration(str(out / "checkpoints")) == 3


@pytest.mark.parametrize(
    ("num_rollout", "save_interval", "iterations"),
    [
        (5, 2, [1, 3, 4]),
        (6, 2, [1, 3, 5]),
        (3, 20, [2]),  # the last rollout always saves
        (5, None, []),
        (5, 0, []),
    ],
)
def test_the_save_schedule(num_rollout: int, save_interval: int | None, iterations: list[int]) -> None:
    # upstream numbers a save after rollout i as iteration i
    saved = [i for i in range(num_rollout) if train.saves_after(i, save_interval, num_rollout)]
    assert saved == iterations


def test_the_load_flag_is_read_as_given(tmp_path: Path) -> None:
    assert train.given_flag(["--load", "/a", "--save", "/b"], "--load") == "/a"
    assert train.given_flag(["--load=/a", "--load", "/c"], "--load") == "/c"
    assert train.given_flag(["--ref-load", "/r"], "--load") is None


def run_main(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    out: Path,
    ref: Path,
    rollout_seconds: str = "0",
    *,
    extra_argv: tuple[str, ...] = (),
) -> tuple[int, str, str]:
    """main() with the arguments the chart passes, as miles' parser resolves them; num_rollout 5,
    save_interval 2."""
    ckpt = str(out / "checkpoints")
    argv = ["--ref-load", str(ref), "--load", ckpt, "--save", ckpt, "--save-interval", "2", *extra_argv]
    # What miles' parser resolves on a fresh run: --load replaced by --ref-load (miles_validate_args).
    fresh = not (out / "checkpoints" / "latest_checkpointed_iteration.txt").exists()
    args: dict[str, Any] = {
        "actor_num_nodes": 1,
        "actor_num_gpus_per_node": 8,
        "colocate": True,
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "expert_model_parallel_size": 1,
        "rollout_num_gpus": 8,
        "load": str(ref) if fresh else ckpt,
        "ref_load": str(ref),
        "save": ckpt,
        "save_interval": 2,
        "num_rollout": 5,
    }
    monkeypatch.setattr(train, "parse_with_upstream", lambda _argv: {"ok": True, "args": args})
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    monkeypatch.setenv("TESTBED_ROLLOUT_SECONDS", rollout_seconds)
    rc = train.main()
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_an_attempt_fails_on_purpose_after_a_save_and_the_next_one_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, ref = tmp_path / "out", tmp_path / "Qwen3-4B_torch_dist"
    ref.mkdir()
    (ref / "latest_checkpointed_iteration.txt").write_text("release")  # a converted checkpoint
    out.mkdir()
    marker = out / "testbed-fail-once"
    marker.write_text("")

    rc, stdout, stderr = run_main(monkeypatch, capsys, out, ref)
    assert rc == 1
    assert f"no checkpoint in {out / 'checkpoints'}; starting at rollout 0 from {ref}" in stdout
    assert "rollout 1:" in stdout and "rollout 2:" not in stdout
    assert f"saved checkpoint iteration 1 to {out / 'checkpoints'}" in stdout
    assert f"failing on purpose after saving iteration 1 ({marker}, removed)" in stderr
    assert not marker.exists()

    rc, stdout, stderr = run_main(monkeypatch, capsys, out, ref)
    assert rc == 0, stderr
    assert f"loaded checkpoint iteration 1 from {out / 'checkpoints'} (resuming at rollout 2)" in stdout
    assert "rollout 1:" not in stdout and "rollout 2:" in stdout and "rollout 4:" in stdout
    assert "saved checkpoint iteration 3" in stdout and "saved checkpoint iteration 4" in stdout
    assert stdout.rstrip().endswith("testbed train.py: done")
    assert sorted(p.name for p in (out / "checkpoints").glob("iter_*")) == [
        "iter_0000001",
        "iter_0000003",
        "iter_0000004",
    ]
    assert train.latest_iteration(str(out / "checkpoints")) == 4


class FakeClock:
    """Stands in for the time module: each simulated rollout's sleep moves the clock on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_run_stopped_by_its_time_budget_saves_nothing_past_its_last_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, ref = tmp_path / "out", tmp_path / "ref"
    ref.mkdir()
    monkeypatch.setattr(train, "time", FakeClock())
    monkeypatch.setenv("TESTBED_TRAIN_SECONDS", "2.5")
    rc, stdout, _ = run_main(monkeypatch, capsys, out, ref, rollout_seconds="1")
    assert rc == 0
    assert "rollout 2:" in stdout and "rollout 3:" not in stdout
    assert sorted(p.name for p in (out / "checkpoints").glob("iter_*")) == ["iter_0000001"]
    assert train.latest_iteration(str(out / "checkpoints")) == 1


@pytest.mark.parametrize("flat", [False, True], ids=["learning", "flat reward marker"])
def test_tensorboard_events_the_report_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flat: bool
) -> None:
    """With --use-tensorboard the stand-in writes miles' reward and repetition per rollout through
    TensorBoard's own writer (the contract venv's), and the hooks' report reads them back."""
    from miles_hooks.steps.report import events

    contract_python = REPO / ".tools" / "miles-contract" / "bin" / "python"
    assert contract_python.exists(), "the contract venv is missing: run `make tools`"
    out, ref = tmp_path / "out", tmp_path / "ref"
    ref.mkdir()
    out.mkdir()
    if flat:
        (out / "testbed-flat-reward").write_text("")
    monkeypatch.setenv("MILES_CONTRACT_PYTHON", str(contract_python))
    monkeypatch.setenv("TENSORBOARD_DIR", str(out / "tensorboard"))
    rc, stdout, stderr = run_main(monkeypatch, capsys, out, ref, extra_argv=("--use-tensorboard",))
    assert rc == 0, stderr
    scan = events.scan(out / "tensorboard")
    rewards = [p.value for p in scan.points(events.REWARD)]
    assert [p.step for p in scan.points(events.REWARD)] == [0, 1, 2, 3, 4]
    if flat:
        assert rewards == [0.0] * 5 and "rollout 4: raw_reward=0.0" in stdout
    else:
        assert (
            rewards == pytest.approx([0.2, 0.325, 0.45, 0.575, 0.7]) and "rollout 4: raw_reward=0.7" in stdout
        )
    assert [p.value for p in scan.points(events.REPETITION)] == pytest.approx([0.02] * 5)
