"""prepare-data against local HF-layout mirrors made here (no hub access)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hooks_testlib import read_until, run_cli, spec_in, write
from miles_hooks.core import runspec as specmod
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.steps import prepare_data as pd


def make_mirror(root: Path, raw: dict[str, Any], weights_bytes: int = 3 << 20) -> Path:
    model = root / "models" / raw["model"]["repoId"] / raw["model"]["revision"]
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        json.dumps({"hidden_size": 64, "vocab_size": 1000, "num_hidden_layers": 2})
    )
    (model / "model.safetensors").write_bytes(os.urandom(weights_bytes))
    (model / "tokenizer").mkdir()
    (model / "tokenizer" / "tokenizer.json").write_text("{}")
    (model / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    for ds in raw["data"]["datasets"]:
        d = root / "datasets" / ds["repoId"] / ds["revision"]
        d.mkdir(parents=True)
        for name in ds["files"]:
            (d / name).write_text('{"prompt": [{"role": "user", "content": "1+1?"}], "label": "2"}\n' * 50)
        (d / "README.md").write_text("not requested")
    return root


def test_marker_name_and_safe_paths() -> None:
    assert pd.marker_name("model", "Qwen/Qwen3-4B") == ".miles-hooks-prepared.json"
    assert pd.marker_name("dataset", "zhuzilin/aime-2024") == ".miles-hooks-prepared.zhuzilin__aime-2024.json"
    assert pd.safe_relpath("a/b.json") == "a/b.json"
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(BadInput):
            pd.safe_relpath(bad)


def test_marker_mismatch_reasons(tmp_path: Path) -> None:
    t = pd.Target("dataset", "o/d", "v1", tmp_path, ("a.jsonl",))
    (tmp_path / "a.jsonl").write_text("xyz")
    good = pd.build_marker(t, "abc", [{"name": "a.jsonl", "size": 3, "sha256": "0"}], "test")
    assert pd.marker_mismatch(t, good) is None
    assert pd.marker_mismatch(t, None) == "no completion marker"
    assert "revision" in (pd.marker_mismatch(t, {**good, "revision": "v0"}) or "")
    assert "repo" in (pd.marker_mismatch(t, {**good, "repoId": "o/other"}) or "")
    t2 = pd.Target("dataset", "o/d", "v1", tmp_path, ("a.jsonl", "b.jsonl"))
    assert "b.jsonl" in (pd.marker_mismatch(t2, good) or "")
    (tmp_path / "a.jsonl").write_text("xy")
    assert "2 bytes" in (pd.marker_mismatch(t, good) or "")


def test_prepare_from_local_mirror_then_skip_fast(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    mirror = make_mirror(tmp_path / "mirror", raw)
    spec_path = write(tmp_path / "run.json", raw)
    first = run_cli("prepare-data", "--spec", str(spec_path), "--source-dir", str(mirror), "--json")
    assert first.returncode == 0, first.stderr
    hf = Path(raw["model"]["hfPath"])
    src = mirror / "models" / raw["model"]["repoId"] / "main"
    assert (hf / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert (hf / "tokenizer" / "tokenizer.json").is_file()
    assert not (hf / ".gitattributes").exists()
    marker = json.loads((hf / pd.MODEL_MARKER).read_text())
    entry = next(f for f in marker["files"] if f["name"] == "model.safetensors")
    assert entry["sha256"] == hashlib.sha256((src / "model.safetensors").read_bytes()).hexdigest()
    assert marker["repoId"] == "Qwen/Qwen3-4B" and marker["revision"] == "main"
    ds_dir = Path(raw["data"]["datasets"][0]["path"])
    assert (ds_dir / "dapo-math-17k.jsonl").is_file() and not (ds_dir / "README.md").exists()

    # second run: skip from the markers alone; the in-process step must take well under a second

    spec = specmod.load(spec_path)
    started = time.perf_counter()
    result = pd.run(spec, source_dir=str(tmp_path / "no-such-mirror"))  # proves no source access
    elapsed = time.perf_counter() - started
    print(f"prepare-data skip (3 targets, in-process): {elapsed * 1000:.1f} ms")
    assert all(r["skipped"] for r in result["targets"])
    assert elapsed < 0.5


def test_changed_file_is_refetched_and_revision_change_redone(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    mirror = make_mirror(tmp_path / "mirror", raw)

    spec = specmod.load(write(tmp_path / "run.json", raw))
    pd.run(spec, source_dir=str(mirror))
    hf = Path(raw["model"]["hfPath"])
    (hf / "model.safetensors").write_bytes(b"truncated")
    out = pd.run(spec, source_dir=str(mirror))
    model = out["targets"][0]
    assert model["skipped"] is False and model["fetched"] == 1
    assert (hf / "model.safetensors").stat().st_size == 3 << 20

    raw["model"]["revision"] = "v2"
    (mirror / "models" / raw["model"]["repoId"] / "v2").mkdir()
    (mirror / "models" / raw["model"]["repoId"] / "v2" / "config.json").write_text('{"hidden_size": 32}')
    spec2 = specmod.load(write(tmp_path / "run2.json", raw))
    out2 = pd.run(spec2, source_dir=str(mirror))
    assert out2["targets"][0]["resolvedRevision"] == "v2"
    assert json.loads((hf / pd.MODEL_MARKER).read_text())["revision"] == "v2"


def test_resume_continues_a_partial_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raw = spec_in(tmp_path)
    mirror = make_mirror(tmp_path / "mirror", raw, weights_bytes=8 << 20)
    src = mirror / "models" / raw["model"]["repoId"] / "main" / "model.safetensors"
    hf = Path(raw["model"]["hfPath"])
    hf.mkdir(parents=True)
    (hf / "model.safetensors.incomplete").write_bytes(src.read_bytes()[: 5 << 20])

    logging.getLogger("miles_hooks").propagate = True
    with caplog.at_level(logging.INFO, logger="miles_hooks"):
        pd.run(specmod.load(write(tmp_path / "run.json", raw)), source_dir=str(mirror))
    resumed = [r for r in caplog.records if r.getMessage() == "resuming partial file"]
    assert resumed and resumed[0].fields["at_bytes"] == 5 << 20  # type: ignore[attr-defined]
    assert (hf / "model.safetensors").read_bytes() == src.read_bytes()
    assert not (hf / "model.safetensors.incomplete").exists()


def test_killed_download_never_leaves_a_lying_marker(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    mirror = make_mirror(tmp_path / "mirror", raw, weights_bytes=96 << 20)
    spec_path = write(tmp_path / "run.json", raw)
    hf = Path(raw["model"]["hfPath"])
    marker = hf / pd.MODEL_MARKER
    # Kill points, read from the hook's own log, and whether the model's marker must exist after:
    # listed but nothing fetched (no), the weights being fetched (no, or complete and true), the
    # model prepared and the datasets not yet (yes).
    for needle, marked in (
        ("files to check", False),
        ("file=model.safetensors", None),
        ('prepared target="model ', True),
    ):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "miles_hooks",
                "prepare-data",
                "--spec",
                str(spec_path),
                "--source-dir",
                str(mirror),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        read_until(proc, needle)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if marker.exists():  # then it must be complete and true
            target = pd.targets(raw)[0]
            assert pd.marker_mismatch(target, json.loads(marker.read_text())) is None
        if marked is not None:
            assert marker.exists() is marked, f"killed at {needle!r}"
        marker.unlink(missing_ok=True)
    done = run_cli("prepare-data", "--spec", str(spec_path), "--source-dir", str(mirror))
    assert done.returncode == 0, done.stderr
    src = mirror / "models" / raw["model"]["repoId"] / "main" / "model.safetensors"
    assert (
        hashlib.sha256((hf / "model.safetensors").read_bytes()).digest()
        == hashlib.sha256(src.read_bytes()).digest()
    )


def test_missing_dataset_file_names_the_field(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    mirror = make_mirror(tmp_path / "mirror", raw)
    raw["data"]["datasets"][1]["files"] = ["aime-2025.jsonl"]
    proc = run_cli(
        "prepare-data", "--spec", str(write(tmp_path / "run.json", raw)), "--source-dir", str(mirror)
    )
    assert proc.returncode == 1
    assert "aime-2025.jsonl" in proc.stderr and "data.datasets[].files" in proc.stderr


def test_hub_unreachable_fails_cleanly_without_marker(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    raw = spec_in(tmp_path)
    raw["prepare"]["hfEndpointEnv"] = "MILES_TEST_HF_ENDPOINT"
    env = dict(
        os.environ,
        MILES_TEST_HF_ENDPOINT=f"http://127.0.0.1:{port}",
        HF_TOKEN="hf_secret_value_123",
        HF_HUB_OFFLINE="0",
        HF_HUB_ETAG_TIMEOUT="2",
        HF_HUB_DOWNLOAD_TIMEOUT="2",
    )
    env.pop("MILES_HOOKS_SOURCE_DIR", None)
    proc = run_cli("prepare-data", "--spec", str(write(tmp_path / "run.json", raw)), env=env)
    assert proc.returncode == 1, proc.stderr
    assert "cannot list model Qwen/Qwen3-4B@main" in proc.stderr
    assert "hf_secret_value_123" not in proc.stderr + proc.stdout
    assert not (Path(raw["model"]["hfPath"]) / pd.MODEL_MARKER).exists()


def test_download_off_checks_presence(tmp_path: Path) -> None:
    raw = spec_in(tmp_path)
    raw["prepare"]["download"] = False

    spec = specmod.load(write(tmp_path / "run.json", raw))
    with pytest.raises(CheckFailed) as err:
        pd.run(spec)
    assert "hooks.prepareData.download=true" in str(err.value) and "config.json" in str(err.value)
    make = make_mirror(tmp_path / "mirror", raw)
    raw["prepare"]["download"] = True
    pd.run(specmod.load(write(tmp_path / "run2.json", raw)), source_dir=str(make))
    assert all(r["skipped"] for r in pd.run(spec)["targets"])
