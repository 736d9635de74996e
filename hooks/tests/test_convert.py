"""convert: real orchestration around a test converter writing real torch.distributed.checkpoint files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hooks_testlib import REPO, read_until, run_cli, spec_in, write
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import EXIT_TERMINATED, CheckFailed
from miles_hooks.steps import convert

if os.environ.get("MILES_HOOKS_ALLOW_NO_TORCH") == "1":
    pytest.importorskip("torch", reason="torch not installed and MILES_HOOKS_ALLOW_NO_TORCH=1")

CONVERTER = REPO / "testbed" / "fake-miles" / "tools" / "dcp_converter.py"


def conv_spec(tmp: Path) -> dict[str, Any]:
    raw = spec_in(tmp)
    hf = Path(raw["model"]["hfPath"])
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(
        json.dumps({"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 2})
    )
    raw["convert"]["command"] = [sys.executable, str(CONVERTER)]
    raw["convert"]["lockStaleSeconds"] = 60
    raw["train"]["workdir"] = str(tmp)
    raw["train"]["modelArgsCommand"] = "echo --num-layers 2 --hidden-size 32"
    raw["runtimeEnv"]["envVars"].pop("PYTHONPATH", None)
    return raw


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def assert_valid_or_absent(raw: dict[str, Any]) -> bool:
    """Invariant after any interruption: either nothing is published or a complete, valid result is."""
    target = Path(raw["model"]["torchDistPath"])
    if not target.exists():
        return False
    source = convert.source_identity(raw)
    assert convert.published_mismatch(target, source) is None
    convert.validate(target, json.loads((Path(raw["model"]["hfPath"]) / "config.json").read_text()))
    return True


def test_converter_argv_quotes_and_expands_model_args(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    raw["model"]["hfPath"] = "/fsx/models/with space"
    argv = convert.converter_argv(raw, "/fsx/x y/.tmp")
    assert argv[:2] == ["bash", "-c"]
    assert "MODEL_ARGS=$(echo --num-layers 2 --hidden-size 32)" in argv[2]
    assert "--hf-checkpoint '/fsx/models/with space' --save '/fsx/x y/.tmp'" in argv[2]
    assert argv[4:] == [sys.executable, str(CONVERTER)]
    raw["convert"]["nprocPerNode"] = 8
    raw["convert"]["command"] = ["python3", "tools/convert_hf_to_torch_dist.py"]
    assert convert.converter_argv(raw, "/s")[4:] == [
        "torchrun",
        "--nproc-per-node=8",
        "tools/convert_hf_to_torch_dist.py",
    ]


def test_check_tensors_against_hf_config() -> None:
    cfg = {"vocab_size": 1000, "hidden_size": 32}
    assert convert.check_tensors({"embedding.word_embeddings.weight": (1024, 32)}, cfg) == []
    assert convert.check_tensors({}, cfg) == ["release/.metadata lists no tensors"]
    assert "vocab_size=1000" in convert.check_tensors({"embedding.word_embeddings.weight": (500, 32)}, cfg)[0]
    assert "hidden_size=32" in convert.check_tensors({"embedding.word_embeddings.weight": (1024, 16)}, cfg)[0]
    assert "no word-embedding" in convert.check_tensors({"x": (1,)}, cfg)[0]


def test_convert_publishes_then_skips_fast(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    path = write(tmp_path / "run.json", raw)
    count = tmp_path / "count"
    t0 = time.monotonic()
    proc = run_cli("convert", "--spec", str(path), "--json", env=env_with(DCP_CONVERTER_COUNT=str(count)))
    first_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["converted"] is True
    target = Path(raw["model"]["torchDistPath"])
    assert (target / "latest_checkpointed_iteration.txt").read_text().strip() == "release"
    assert assert_valid_or_absent(raw)
    assert count.read_text().count("\n") == 1
    assert "--num-layers 2 --hidden-size 32" in count.read_text()
    assert not list(target.parent.glob(".*.tmp-*")) and not (target.parent / f".{target.name}.lock").exists()

    spec = specmod.load(path)
    t1 = time.perf_counter()
    out = convert.run(spec)
    skip_s = time.perf_counter() - t1
    t2 = time.monotonic()
    again = run_cli("convert", "--spec", str(path), env=env_with(DCP_CONVERTER_COUNT=str(count)))
    cli_skip_s = time.monotonic() - t2
    timings = f"first run {first_s:.2f}s, skip in-process {skip_s * 1000:.1f} ms, skip CLI {cli_skip_s:.2f}s"
    print(f"convert: {timings}")
    assert out["skipped"] is True and again.returncode == 0
    assert count.read_text().count("\n") == 1
    assert skip_s < 1.0


def test_check_only_never_converts_and_names_what_to_do(tmp_path: Path) -> None:
    """The pre-upgrade convert-check (hooks image, no GPU, no converter in the image): a missing or outdated
    result fails naming the field and the way out, and nothing is started or written."""
    raw = conv_spec(tmp_path)
    path = write(tmp_path / "run.json", raw)
    count = tmp_path / "count"
    target = Path(raw["model"]["torchDistPath"])
    env = env_with(DCP_CONVERTER_COUNT=str(count))

    missing = run_cli("convert", "--spec", str(path), "--check-only", env=env)
    assert missing.returncode == 1, missing.stderr
    assert f"model.torchDistPath {target}: no converted checkpoint yet" in missing.stderr
    assert "uninstall the release and install it again" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert not count.exists() and not target.exists()
    assert not list(target.parent.glob(f".{target.name}*"))  # no lock, no temp dir

    assert run_cli("convert", "--spec", str(path), env=env).returncode == 0
    published = sorted(p.relative_to(target) for p in target.rglob("*"))
    valid = run_cli("convert", "--spec", str(path), "--check-only", "--json", env=env)
    assert valid.returncode == 0 and json.loads(valid.stdout)["skipped"] is True

    (Path(raw["model"]["hfPath"]) / "config.json").write_text(
        json.dumps({"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 3})
    )
    outdated = run_cli("convert", "--spec", str(path), "--check-only", env=env)
    assert outdated.returncode == 1 and "source changed since conversion" in outdated.stderr, outdated.stderr
    assert count.read_text().count("\n") == 1
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == published


@pytest.mark.parametrize("damage", ["marker", "shard", "config"])
def test_partial_or_stale_result_is_redone(tmp_path: Path, damage: str) -> None:
    raw = conv_spec(tmp_path)
    spec = specmod.load(write(tmp_path / "run.json", raw))
    count = tmp_path / "count"
    os.environ["DCP_CONVERTER_COUNT"] = str(count)
    try:
        convert.run(spec)
        target = Path(raw["model"]["torchDistPath"])
        if damage == "marker":
            (target / convert.MARKER).unlink()
        elif damage == "shard":
            shard = next((target / "release").glob("*.distcp"))
            shard.write_bytes(shard.read_bytes()[:10])
        else:
            (Path(raw["model"]["hfPath"]) / "config.json").write_text(
                json.dumps({"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 3})
            )
        source = convert.source_identity(raw)
        assert convert.published_mismatch(target, source) is not None
        out = convert.run(spec)
        assert out["converted"] is True
        assert count.read_text().count("\n") == 2
        assert assert_valid_or_absent(raw)
    finally:
        os.environ.pop("DCP_CONVERTER_COUNT", None)


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ("bad-iteration", "expected 'release'"),
        ("small-vocab", "vocab_size=1000"),
        ("missing-shard", "referenced by .metadata is missing"),
    ],
)
def test_invalid_converter_output_is_never_published(tmp_path: Path, fault: str, needle: str) -> None:
    raw = conv_spec(tmp_path)
    proc = run_cli(
        "convert", "--spec", str(write(tmp_path / "run.json", raw)), env=env_with(DCP_CONVERTER_FAULT=fault)
    )
    assert proc.returncode == 1
    assert needle in proc.stderr
    target = Path(raw["model"]["torchDistPath"])
    assert not target.exists()
    assert not list(target.parent.glob(".*.tmp-*")) and not (target.parent / f".{target.name}.lock").exists()


def test_image_without_model_args_utils_is_named(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    raw["train"]["modelArgsCommand"] = f"{sys.executable} {tmp_path}/no/model_args_utils.py qwen3-4B"
    proc = run_cli("convert", "--spec", str(write(tmp_path / "run.json", raw)))
    assert proc.returncode == 1
    assert "set image.tag to v0.1.0 or newer" in proc.stderr
    assert not Path(raw["model"]["torchDistPath"]).exists()


def test_missing_hf_checkpoint_is_a_clear_failure(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    (Path(raw["model"]["hfPath"]) / "config.json").unlink()
    proc = run_cli("convert", "--spec", str(write(tmp_path / "run.json", raw)))
    assert proc.returncode == 1 and "model.hfPath" in proc.stderr and "prepare-data" in proc.stderr


def child_pids(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_gone(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(gone(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} still alive {timeout:g}s after the kill"
        time.sleep(0.01)


def start_convert(path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "miles_hooks", "convert", "--spec", str(path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


# Where a conversion is killed, in the order they happen, and what must be published afterwards:
# False nothing, True a complete valid result, None either (the kill races the publish itself).
KILL_POINTS: list[tuple[str, str | None, bool | None]] = [
    ("conversion needed", None, False),  # before the lock
    ("running the converter", None, False),  # lock held, temporary directory made
    ("dcp_converter: paused at start", "start", False),  # converter running, nothing written
    ("dcp_converter: paused at saved", "saved", False),  # shards written, no iteration file
    ("dcp_converter: paused at finished", "finished", False),  # all written, converter not exited
    ("converter finished", None, None),  # the hook validates, writes its marker, renames
    ("published the torch_dist checkpoint", None, True),  # published, lock being released
]


def test_killed_twenty_times_never_publishes_partial_and_then_completes(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    path = write(tmp_path / "run.json", raw)
    target = Path(raw["model"]["torchDistPath"])
    for i in range(20):
        needle, pause, expected = KILL_POINTS[i % len(KILL_POINTS)]
        if target.exists():
            shutil.rmtree(target)  # start each round from "not converted" so every kill point is exercised
        env = env_with(DCP_CONVERTER_PAUSE_AT=pause) if pause else env_with()
        proc = start_convert(path, env)
        read_until(proc, needle)
        children = child_pids(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        wait_gone(children)  # the converter dies with the hook (PDEATHSIG)
        published = assert_valid_or_absent(raw)
        print(f"kill {i + 1:2d} at {needle!r}: {'published complete' if published else 'nothing published'}")
        if expected is not None:
            assert published is expected, f"killed at {needle!r}"
    done = run_cli("convert", "--spec", str(path))
    assert done.returncode == 0, done.stderr
    assert assert_valid_or_absent(raw)
    assert not list(target.parent.glob(".*.tmp-*")) and not list(target.parent.glob(".*.stale-*"))


def test_two_concurrent_converters_convert_once(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    path = write(tmp_path / "run.json", raw)
    count = tmp_path / "count"
    release = tmp_path / "release-converter"
    env = env_with(
        DCP_CONVERTER_PAUSE_AT="start",
        DCP_CONVERTER_RELEASE=str(release),
        DCP_CONVERTER_COUNT=str(count),
    )
    first = start_convert(path, env)
    read_until(first, "dcp_converter: paused at start")  # the first holds the lock, converting
    second = subprocess.Popen(
        [sys.executable, "-m", "miles_hooks", "convert", "--spec", str(path), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    read_until(second, "another converter holds the lock; waiting")
    release.touch()
    assert first.wait(300) == 0
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert json.loads(out) == {
        "converted": False,
        "skipped": True,
        "reason": "converted concurrently",
        "target": str(Path(raw["model"]["torchDistPath"])),
    }
    assert count.read_text().count("\n") == 1
    assert assert_valid_or_absent(raw)


def test_source_identity_requires_config(tmp_path: Path) -> None:
    raw = conv_spec(tmp_path)
    ident = convert.source_identity(raw)
    assert ident["repoId"] == "Qwen/Qwen3-4B" and len(ident["configSha256"]) == 64
    (Path(raw["model"]["hfPath"]) / "config.json").unlink()
    with pytest.raises(CheckFailed):
        convert.source_identity(raw)


def test_sigterm_stops_the_conversion_and_frees_the_lock_at_once(tmp_path: Path) -> None:
    """A drained or evicted convert pod gets SIGTERM: the hook stops the converter, removes its partial output
    and releases the lock within the grace period, so the Job's next pod converts without waiting for the lock
    to go stale (lockStaleSeconds) -- that pod is on another host, where the holder's pid tells nothing."""
    raw = conv_spec(tmp_path)
    path = write(tmp_path / "run.json", raw)
    target = Path(raw["model"]["torchDistPath"])
    proc = start_convert(path, env_with(DCP_CONVERTER_PAUSE_AT="saved"))
    read_until(proc, "dcp_converter: paused at saved")  # lock held, shards half written
    children = child_pids(proc.pid)
    assert list(target.parent.glob(f".{target.name}.tmp-*"))
    assert list(target.parent.glob(f".{target.name}.lock"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_TERMINATED
    assert proc.stderr is not None
    assert "stopped by SIGTERM" in proc.stderr.read()
    wait_gone(children)
    assert not list(target.parent.glob(f".{target.name}*")), list(target.parent.glob(f".{target.name}*"))
    assert assert_valid_or_absent(raw) is False
    # another converter (another host: a stale-looking pid would not help it) takes the lock at once
    done = run_cli("convert", "--spec", str(path), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["converted"] is True
