"""export: a saved iteration → a Hugging Face model, validated, published atomically, recorded.

Runs inside the miles image (upstream's exporter imports miles, Megatron and SGLang), with this package copied
in by an init container, like convert: it imports only the standard library; ``transformers`` is loaded in a
child process to check the result.

Sequence:
1. The iteration: ``--iteration N``, else the tracker's (the run's newest complete checkpoint). Its directory
   ``<output.checkpointDir>/iter_NNNNNNN`` must hold a torch_dist checkpoint (``.metadata``).
2. Fast path: ``<export.dir>/iter_NNNNNNN`` holds a marker naming the same source (iteration, the sha256 of
   its ``.metadata``, the base model) and every recorded file with its size → nothing to do (seconds).
3. Take ``<export.dir>/.export.lock`` (one exporter per run at a time: each holds a model in host memory);
   re-check 2; remove what killed exporters left; move an invalid result aside.
4. Run ``export.command --input-dir <iter dir> --output-dir <staging> --origin-hf-dir <model.hfPath>
   --vocab-size <the base config's> --chunk-size <export.chunkBytes>``; the staging directory is
   ``.iter_NNNNNNN.tmp-<host>-<pid>`` beside the target and does not exist yet (upstream refuses an
   existing output directory).
5. Validate the staging directory against the base model: the same tensor names, shapes and dtypes as its
   safetensors index (a difference names the tensor), ``config.json`` and a tokenizer file present, and
   both loaded by ``transformers`` (offline, no remote code).
6. Write the marker (source, every file with its size and sha256, the tool and image), rename into place,
   fsync; add the export to the provenance record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from miles_hooks.core import exported, fsutil, hf_checkpoint, log, publish, resume
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.core.lockfile import FileLock
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("export")

MARKER = exported.MARKER
MARKER_KIND = exported.MARKER_KIND
LOCK = ".export.lock"
DEFAULT_TIMEOUT = 4 * 3600.0
LOADABLE_CHECK = """
import sys
from transformers import AutoConfig, AutoTokenizer
config = AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=False)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=False)
print(type(config).__name__, type(tokenizer).__name__)
"""


def iteration_dir(raw: RawSpec, iteration: int) -> Path:
    return Path(raw["output"]["checkpointDir"]) / f"iter_{iteration:07d}"


def target_dir(raw: RawSpec, iteration: int) -> Path:
    return Path(raw["export"]["dir"]) / f"iter_{iteration:07d}"


def choose_iteration(raw: RawSpec, iteration: int | None) -> int:
    """The iteration to export; BadInput naming what exists when there is none to export."""
    checkpoints = Path(raw["output"]["checkpointDir"])
    if iteration is None:
        latest = resume.latest_iteration(checkpoints)
        if latest is None:
            raise CheckFailed(
                f"{checkpoints} holds no complete checkpoint yet (no {resume.TRACKER}): nothing to export"
            )
        iteration = latest
    if iteration < 0:
        raise BadInput(f"--iteration: expected a saved iteration (0 or more), found {iteration}")
    source = iteration_dir(raw, iteration)
    if not (source / ".metadata").is_file():
        saved = sorted(p.name for p in checkpoints.glob("iter_*") if (p / ".metadata").is_file())
        raise BadInput(
            f"--iteration {iteration}: {source} holds no torch_dist checkpoint (no .metadata); saved "
            f"iterations in {checkpoints}: {', '.join(saved) or 'none'}"
        )
    return iteration


def source_identity(raw: RawSpec, iteration: int) -> dict[str, Any]:
    """What the export is made from; a change in any field means exporting again."""
    source = iteration_dir(raw, iteration)
    return {
        "checkpointDir": raw["output"]["checkpointDir"],
        "iteration": iteration,
        "metadataSha256": fsutil.sha256_file(source / ".metadata"),
        "baseModel": {
            "hfPath": raw["model"]["hfPath"],
            "repoId": raw["model"]["repoId"],
            "revision": raw["model"]["revision"],
        },
    }


def published_mismatch(target: Path, source: dict[str, Any]) -> str | None:
    """Why ``target`` is not a valid export of ``source`` (None when it is). Stats only."""
    if not target.exists():
        return "not exported yet"
    marker = exported.marker(target)
    if marker is None:
        return f"{target} has no completion marker (partial or foreign result)"
    if marker.get("source") != source:
        changed = sorted(k for k in source if (marker.get("source") or {}).get(k) != source[k])
        return f"source changed since the export: {', '.join(changed)}"
    bad = fsutil.size_mismatch(target, marker.get("files") or [])
    if bad is None:
        return None
    path, size, recorded = bad
    return f"{path} missing" if size is None else f"{path} has {size} bytes, marker recorded {recorded}"


def base_vocab_size(hf_path: Path) -> int | None:
    config = fsutil.read_json(hf_path / "config.json")
    if not isinstance(config, dict):
        return None
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return vocab if isinstance(vocab, int) else None


def exporter_argv(raw: RawSpec, iteration: int, staging: Path) -> list[str]:
    hf_path = Path(raw["model"]["hfPath"])
    argv = [str(c) for c in raw["export"]["command"]]
    argv += ["--input-dir", str(iteration_dir(raw, iteration)), "--output-dir", str(staging)]
    argv += ["--origin-hf-dir", str(hf_path), "--chunk-size", str(raw["export"]["chunkBytes"])]
    vocab = base_vocab_size(hf_path)
    if vocab is not None:
        argv += ["--vocab-size", str(vocab)]
    return argv


def check_loadable(model_dir: Path) -> str:
    """Load the config and tokenizer with ``transformers`` in a child process (offline); its summary."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", LOADABLE_CHECK, str(model_dir)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        if "No module named 'transformers'" in proc.stderr:
            raise CheckFailed(
                "transformers is not importable here; export must run in the miles image (it checks that "
                "transformers loads the exported config and tokenizer)"
            )
        raise CheckFailed(f"transformers cannot load the exported config and tokenizer: {last}")
    return proc.stdout.strip()


def validate(staging: Path, base: Path) -> dict[str, Any]:
    """The export against the base model; CheckFailed listing every difference, naming the tensor."""
    problems = [f"{name}: missing from the export" for name in hf_checkpoint.missing_assets(staging)]
    tensors = hf_checkpoint.tensor_table(staging)
    problems += hf_checkpoint.compare(hf_checkpoint.tensor_table(base), tensors)
    if problems:
        raise CheckFailed(f"the exported model does not match the base model {base}:", problems)
    loaded = check_loadable(staging)
    return {"tensors": len(tensors), "loadedAs": loaded}


def checksummed_files(directory: Path) -> list[dict[str, Any]]:
    """Every file with its size and sha256, with progress in the log (a 60 GB model takes minutes)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MARKER)
    total = sum(p.stat().st_size for p in files)
    done = 0
    out = []
    for i, path in enumerate(files, 1):
        size = path.stat().st_size
        out.append(
            {"name": str(path.relative_to(directory)), "size": size, "sha256": fsutil.sha256_file(path)}
        )
        done += size
        LOG.info(
            "checksummed",
            extra={
                "fields": {
                    "file": f"{i}/{len(files)}",
                    "bytes": f"{fsutil.human_bytes(done)} of {fsutil.human_bytes(total)}",
                }
            },
        )
    return out


def record_provenance(raw: RawSpec, entry: dict[str, Any]) -> None:
    """Add the export to the run's provenance record (one entry per iteration, the newest last)."""
    path = Path(raw["output"]["provenanceFile"])
    record = fsutil.read_json(path)
    if not isinstance(record, dict):
        LOG.warning("no provenance record to add the export to", extra={"fields": {"path": str(path)}})
        return
    exports = [e for e in record.get("exports") or [] if e.get("iteration") != entry["iteration"]]
    record["exports"] = [*exports, entry]
    fsutil.atomic_write_json(path, record)


def run(
    spec: RunSpec, iteration: int | None = None, timeout: float = DEFAULT_TIMEOUT, force: bool = False
) -> dict[str, Any]:
    raw = spec.raw
    if not raw["export"]["enabled"]:
        LOG.info("hooks.export.enabled is false: skipping")
        return {"exported": False, "skipped": True, "reason": "disabled"}
    started = time.monotonic()
    deadline = started + timeout
    iteration = choose_iteration(raw, iteration)
    target = target_dir(raw, iteration)
    source = source_identity(raw, iteration)
    why = published_mismatch(target, source)
    if why is None and not force:
        LOG.info(
            "this iteration is exported already; nothing to do",
            extra={"fields": {"target": str(target), "seconds": round(time.monotonic() - started, 3)}},
        )
        return {"exported": False, "skipped": True, "reason": "up to date", "target": str(target)}
    LOG.info(
        "export needed",
        extra={"fields": {"iteration": iteration, "target": str(target), "reason": why or "--force"}},
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(target.parent / LOCK, raw["export"]["lockStaleSeconds"])
    lock.acquire(max(0.0, deadline - time.monotonic()))
    done: dict[str, Any] = {}

    def build(staging: Path) -> None:
        workdir = Path(raw["train"]["workdir"])
        done["exportSeconds"] = publish.run_tool(
            exporter_argv(raw, iteration, staging),
            what="exporter",
            env={**os.environ, **raw["runtimeEnv"]["envVars"]},
            cwd=str(workdir) if workdir.is_dir() else None,
            deadline=deadline,
            lock=lock,
            failure_hint="host OOM? the exporter holds the whole model in host memory: raise "
            "hooks.export.resources' memory",
            deadline_hint="raise hooks.export.activeDeadlineSeconds",
        )
        LOG.info(
            "validating the export against the base model", extra={"fields": {"base": raw["model"]["hfPath"]}}
        )
        t0 = time.monotonic()
        summary = validate(staging, Path(raw["model"]["hfPath"]))
        done["validateSeconds"] = time.monotonic() - t0
        files = checksummed_files(staging)
        marker = {
            "kind": MARKER_KIND,
            "version": 1,
            "source": source,
            "files": files,
            "tensors": summary["tensors"],
            "loadedAs": summary["loadedAs"],
            "tool": {"command": list(raw["export"]["command"]), "image": raw["images"]["miles"]},
            "exportedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        fsutil.atomic_write_json(staging / MARKER, marker)
        done["marker"] = marker

    def still_needed() -> str | None:
        return "--force" if force else published_mismatch(target, source)

    def record() -> None:
        marker = done["marker"]
        entry = {
            "iteration": iteration,
            "path": str(target),
            "exportedAt": marker["exportedAt"],
            "files": [{"name": f["name"], "sha256": f["sha256"]} for f in marker["files"]],
            "tool": marker["tool"],
        }
        record_provenance(raw, entry)

    if not publish.build_under_lock(
        target,
        lock,
        what="export",
        still_needed=still_needed,
        build=build,
        make_staging=False,
        on_published=record,
    ):
        LOG.info("another exporter published it while we waited; nothing to do")
        return {"exported": False, "skipped": True, "reason": "exported concurrently", "target": str(target)}
    marker = done["marker"]
    files = marker["files"]
    result = {
        "exported": True,
        "skipped": False,
        "iteration": iteration,
        "target": str(target),
        "tensors": marker["tensors"],
        "bytes": sum(f["size"] for f in files),
        "exportSeconds": round(done["exportSeconds"], 1),
        "validateSeconds": round(done["validateSeconds"], 1),
        "seconds": round(time.monotonic() - started, 1),
    }
    LOG.info("published the Hugging Face model", extra={"fields": result})
    return result
