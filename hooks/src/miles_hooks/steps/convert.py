"""convert: the HF checkpoint → torch_dist, once, validated, published atomically.

Runs inside the miles image (GPUs, torch, the upstream converter) with this package copied in by an
init container, so it imports only the standard library (and torch lazily, to read ``.metadata``).

Sequence:
1. ``convert.enabled: false`` → nothing to do.
2. Fast path: the published target's marker names the same source (HF path, repo, revision, sha256 of
   ``config.json``) and every recorded file is present with its size → skip (seconds, no torch).
   ``--check-only`` (the pre-upgrade convert-check Job: hooks image, CPU, no converter) stops here and
   fails naming what to do when the target is missing or outdated.
3. Take ``.<target>.lock`` next to the target (stale-lock recovery, heartbeat); re-check 2 (another
   converter may have finished meanwhile); remove leftovers of killed runs and an invalid target.
4. Run ``convert.command <model args> --hf-checkpoint <hfPath> --save <tmp>`` where ``<tmp>`` is
   ``.<target>.tmp-<host>-<pid>`` next to the target (same file system, so the publish is a rename);
   model args come from ``train.modelArgsCommand`` expanded in the same shell.
5. Validate ``<tmp>``: ``latest_checkpointed_iteration.txt`` = ``release``; ``release/.metadata``
   readable by torch.distributed.checkpoint, listing tensors, every storage file it references present
   and long enough, and the word-embedding tensor matching the HF config (vocab, hidden size).
6. Write the marker into ``<tmp>``, rename ``<tmp>`` → target, fsync the parent. A reader sees either
   no target or a complete, validated one.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

from miles_hooks.core import fsutil, log, publish
from miles_hooks.core.errors import CheckFailed
from miles_hooks.core.lockfile import FileLock
from miles_hooks.core.model_args import expand_model_args
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("convert")

MARKER = ".miles-hooks-converted.json"
MARKER_KIND = "miles-hooks/converted"
ITERATION_FILE = "latest_checkpointed_iteration.txt"
RELEASE = "release"
DEFAULT_TIMEOUT = 4 * 3600.0  # seconds for the lock and the converter; the chart passes its own


# --------------------------------------------------------------------------- pure parts


def source_identity(raw: RawSpec) -> dict[str, Any]:
    """What the conversion was made from; a change in any field means reconversion."""
    hf = Path(raw["model"]["hfPath"])
    config = hf / "config.json"
    try:
        config_hash = hashlib.sha256(config.read_bytes()).hexdigest()
    except OSError as exc:
        raise CheckFailed(
            f"{config} is not readable ({exc.strerror}); expected the HF checkpoint at "
            "model.hfPath (run prepare-data first)"
        ) from exc
    prepared = fsutil.read_json(hf / ".miles-hooks-prepared.json")
    resolved = prepared.get("resolvedRevision") if isinstance(prepared, dict) else None
    return {
        "hfPath": str(hf),
        "repoId": raw["model"]["repoId"],
        "revision": raw["model"]["revision"],
        "resolvedRevision": resolved,
        "configSha256": config_hash,
        "profile": raw["model"]["profile"],
    }


def converter_argv(raw: RawSpec, save_dir: str) -> list[str]:
    """``bash -c`` running the converter with the profile's model args expanded in the same shell."""
    cfg = raw["convert"]
    command = [str(c) for c in cfg["command"]]
    nproc = int(cfg["nprocPerNode"])
    if nproc > 1 and command and os.path.basename(command[0]) in ("python", "python3"):
        command = ["torchrun", f"--nproc-per-node={nproc}", *command[1:]]
    body = "; ".join(
        [
            "set -eo pipefail",
            *expand_model_args(raw),
            'exec "$@" $MODEL_ARGS --hf-checkpoint '
            + shlex.quote(str(raw["model"]["hfPath"]))
            + " --save "
            + shlex.quote(save_dir),
        ]
    )
    return ["bash", "-c", body, "miles-convert", *command]


def listed_files(directory: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MARKER:
            out.append({"name": str(p.relative_to(directory)), "size": p.stat().st_size})
    return out


def published_mismatch(target: Path, source: dict[str, Any]) -> str | None:
    """Why the published target is not a valid conversion of ``source`` (None when it is). Stats only."""
    if not target.exists():
        return "no converted checkpoint yet"
    marker = fsutil.read_json(target / MARKER)
    if not isinstance(marker, dict) or marker.get("kind") != MARKER_KIND:
        return f"{target} has no completion marker (partial or foreign result)"
    if marker.get("source") != source:
        changed = sorted(k for k in source if (marker.get("source") or {}).get(k) != source[k])
        return f"source changed since conversion: {', '.join(changed)}"
    try:
        iteration = (target / ITERATION_FILE).read_text().strip()
    except OSError:
        return f"{target / ITERATION_FILE} missing"
    if iteration != RELEASE:
        return f"{ITERATION_FILE} says {iteration!r}, expected 'release'"
    bad = fsutil.size_mismatch(target, marker.get("files") or [])
    if bad is None:
        return None
    path, size, recorded = bad
    return f"{path} missing" if size is None else f"{path} has {size} bytes, marker recorded {recorded}"


def check_tensors(tensors: dict[str, tuple[int, ...]], hf_config: dict[str, Any]) -> list[str]:
    """Does the tensor list look like a conversion of a model with this HF config?"""
    problems: list[str] = []
    if not tensors:
        return ["release/.metadata lists no tensors"]
    emb = sorted(k for k in tensors if "word_embeddings" in k)
    if not emb:
        problems.append(
            "no word-embedding tensor (a key containing 'word_embeddings') in release/.metadata; "
            f"found e.g. {', '.join(sorted(tensors)[:5])}"
        )
        return problems
    shape = tensors[emb[0]]
    vocab, hidden = hf_config.get("vocab_size"), hf_config.get("hidden_size")
    if isinstance(vocab, int) and (len(shape) < 1 or shape[0] < vocab):
        problems.append(
            f"{emb[0]} has shape {list(shape)}; expected at least vocab_size={vocab} rows (config.json)"
        )
    if isinstance(hidden, int) and (len(shape) < 2 or shape[-1] != hidden):
        problems.append(
            f"{emb[0]} has shape {list(shape)}; expected hidden_size={hidden} columns (config.json)"
        )
    return problems


# --------------------------------------------------------------------------- validation with torch


def read_dcp_metadata(release_dir: Path) -> tuple[dict[str, tuple[int, ...]], list[tuple[str, int]]]:
    """(tensor name → global shape, [(storage file, bytes needed)]) from a DCP ``.metadata``."""
    try:
        # torch is in the miles image only (and heavy): imported when a result is validated
        from torch.distributed.checkpoint import FileSystemReader  # noqa: PLC0415
    except ImportError as exc:
        raise CheckFailed(
            "torch is not importable here; convert must run in the miles image (it reads "
            "release/.metadata with torch.distributed.checkpoint)"
        ) from exc
    try:
        md = FileSystemReader(str(release_dir)).read_metadata()
    except Exception as exc:
        raise CheckFailed(
            f"{release_dir / '.metadata'} is not a readable torch.distributed.checkpoint "
            f"metadata file: {type(exc).__name__}: {exc}"
        ) from exc
    tensors: dict[str, tuple[int, ...]] = {}
    for key, value in md.state_dict_metadata.items():
        size = getattr(value, "size", None)
        if size is not None:
            tensors[str(key)] = tuple(int(d) for d in size)
    needed: dict[str, int] = {}
    for info in (md.storage_data or {}).values():
        rel = str(getattr(info, "relative_path", ""))
        end = int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0))
        needed[rel] = max(needed.get(rel, 0), end)
    return tensors, sorted(needed.items())


def validate(result_dir: Path, hf_config: dict[str, Any]) -> dict[str, Any]:
    problems: list[str] = []
    try:
        iteration = (result_dir / ITERATION_FILE).read_text().strip()
    except OSError:
        iteration = None
    if iteration != RELEASE:
        problems.append(
            f"{ITERATION_FILE}: expected 'release', found "
            + (repr(iteration) if iteration is not None else "no file")
        )
    release = result_dir / RELEASE
    if not (release / ".metadata").is_file():
        problems.append(f"{release / '.metadata'} missing")
        raise CheckFailed("the converter's output is not a valid torch_dist checkpoint:", problems)
    tensors, needed = read_dcp_metadata(release)
    for rel, end in needed:
        path = release / rel
        try:
            size = path.stat().st_size
        except OSError:
            problems.append(f"{path} referenced by .metadata is missing")
            continue
        if size < end:
            problems.append(f"{path} has {size} bytes, .metadata needs {end}")
    problems.extend(check_tensors(tensors, hf_config))
    if problems:
        raise CheckFailed("the converter's output is not a valid torch_dist checkpoint:", problems)
    return {"tensors": len(tensors), "storageFiles": len(needed)}


# --------------------------------------------------------------------------- orchestration


def run_converter(raw: RawSpec, save_dir: Path, deadline: float, lock: FileLock) -> None:
    env = dict(os.environ)
    env.update(raw["runtimeEnv"]["envVars"])
    workdir = Path(raw["train"]["workdir"])
    publish.run_tool(
        converter_argv(raw, str(save_dir)),
        what="converter",
        env=env,
        cwd=str(workdir) if workdir.is_dir() else None,
        deadline=deadline,
        lock=lock,
        failure_hint="host OOM on large models? raise the convert Job's memory, or use "
        "hooks.convert.nprocPerNode",
        deadline_hint="raise the convert Job's activeDeadlineSeconds / --timeout",
    )


def run(
    spec: RunSpec, timeout: float = DEFAULT_TIMEOUT, force: bool = False, check_only: bool = False
) -> dict[str, Any]:
    raw = spec.raw
    if not raw["convert"]["enabled"]:
        LOG.info("hooks.convert.enabled is false: skipping")
        return {"converted": False, "skipped": True, "reason": "disabled"}
    started = time.monotonic()
    deadline = started + timeout
    target = Path(raw["model"]["torchDistPath"])
    source = source_identity(raw)
    why = published_mismatch(target, source)
    if why is None and not force:
        LOG.info(
            "valid torch_dist checkpoint already published; skipping",
            extra={"fields": {"target": str(target), "seconds": round(time.monotonic() - started, 3)}},
        )
        return {"converted": False, "skipped": True, "reason": "up to date", "target": str(target)}
    if check_only:
        raise CheckFailed(
            f"model.torchDistPath {target}: {why or 'reconversion forced'}. Converting needs GPUs, which the "
            "running RayCluster holds during an upgrade: uninstall the release and install it again (the "
            "install's convert hook converts), or set model.torchDistPath to a checkpoint converted from "
            "this model"
        )
    LOG.info("conversion needed", extra={"fields": {"target": str(target), "reason": why or "--force"}})
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(target.parent / f".{target.name}.lock", raw["convert"]["lockStaleSeconds"])
    lock.acquire(max(0.0, deadline - time.monotonic()))
    summary: dict[str, Any] = {}

    def build(tmp: Path) -> None:
        run_converter(raw, tmp, deadline, lock)
        hf_config = fsutil.read_json(Path(raw["model"]["hfPath"]) / "config.json") or {}
        summary.update(validate(tmp, hf_config if isinstance(hf_config, dict) else {}))
        marker = {
            "kind": MARKER_KIND,
            "version": 1,
            "source": source,
            "files": listed_files(tmp),
            "tensors": summary["tensors"],
            "convertedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        fsutil.atomic_write_json(tmp / MARKER, marker)

    def still_needed() -> str | None:
        return "--force" if force else published_mismatch(target, source)

    if not publish.build_under_lock(
        target, lock, what="conversion", still_needed=still_needed, build=build, make_staging=True
    ):
        LOG.info("another converter published it while we waited; skipping")
        return {
            "converted": False,
            "skipped": True,
            "reason": "converted concurrently",
            "target": str(target),
        }
    LOG.info(
        "published the torch_dist checkpoint",
        extra={
            "fields": {
                "target": str(target),
                "tensors": summary["tensors"],
                "seconds": round(time.monotonic() - started, 1),
            }
        },
    )
    return {"converted": True, "skipped": False, "target": str(target), **summary}
