"""prepare-data: the model (at its pinned revision) and the datasets on shared storage.

Each target directory gets a completion marker written last and atomically, recording the repo, the
requested and resolved revision and every file's size and sha256. When the marker matches the spec and
every recorded file is present with its recorded size, the step returns without any network access
(well under a second). Otherwise the marker is removed first, missing or wrong files are fetched
(resumably: partial files are continued, not restarted), hashes are checked against the hub's LFS
hashes when the hub publishes them, and a new marker is written.

Sources: the Hugging Face hub through ``huggingface_hub`` (token from the Secret env, optional mirror
endpoint from the env var named by ``prepare.hfEndpointEnv``), or a local mirror directory laid out as
``<dir>/models|datasets/<owner>/<name>/<revision>/<files>`` (``--source-dir``, ``$MILES_HOOKS_SOURCE_DIR``
or ``prepare.sourceDir``), which is what the offline tests and air-gapped clusters use.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from miles_hooks.core import fsutil, image_facts, kube, log, resume, writable
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("prepare-data")

MODEL_MARKER = ".miles-hooks-prepared.json"
MARKER_KIND = "miles-hooks/prepared"
_SKIP_NAMES = {".gitattributes"}
_PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class RemoteFile:
    name: str
    size: int | None
    sha256: str | None


@dataclass(frozen=True)
class Target:
    """One repo to materialise: the model (all files) or a dataset (the listed files)."""

    kind: str  # "model" | "dataset"
    repo_id: str
    revision: str
    directory: Path
    files: tuple[str, ...] | None  # None: every file of the repo

    @property
    def marker(self) -> Path:
        return self.directory / marker_name(self.kind, self.repo_id)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.repo_id}@{self.revision}"


def marker_name(kind: str, repo_id: str) -> str:
    if kind == "model":
        return MODEL_MARKER
    return ".miles-hooks-prepared." + re.sub(r"[^A-Za-z0-9_.-]", "__", repo_id) + ".json"


def targets(raw: RawSpec) -> list[Target]:
    model = raw["model"]
    out = [Target("model", model["repoId"], model["revision"], Path(model["hfPath"]), None)]
    for ds in raw["data"]["datasets"]:
        out.append(Target("dataset", ds["repoId"], ds["revision"], Path(ds["path"]), tuple(ds["files"])))
    return out


def safe_relpath(name: str) -> str:
    """A repo file name as a relative path that cannot escape the target directory."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise BadInput(
            f"file name {name!r}: expected a relative path inside the repo, found one that escapes it"
        )
    return str(p)


# --------------------------------------------------------------------------- markers (pure-ish)


def build_marker(target: Target, resolved: str, files: list[dict[str, Any]], source: str) -> dict[str, Any]:
    return {
        "kind": MARKER_KIND,
        "version": 1,
        "type": target.kind,
        "repoId": target.repo_id,
        "revision": target.revision,
        "resolvedRevision": resolved,
        "source": source,
        "files": sorted(files, key=lambda f: str(f["name"])),
        "completedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def marker_mismatch(target: Target, marker: Any) -> str | None:
    """Why ``marker`` does not cover ``target`` (None when it does). Only stats files: no hashing."""
    if not isinstance(marker, dict) or marker.get("kind") != MARKER_KIND:
        return "no completion marker"
    if marker.get("repoId") != target.repo_id:
        return f"marker is for repo {marker.get('repoId')}, spec wants {target.repo_id}"
    if marker.get("revision") != target.revision:
        return f"marker is for revision {marker.get('revision')}, spec wants {target.revision}"
    files = marker.get("files")
    if not isinstance(files, list) or not files:
        return "marker lists no files"
    recorded = {str(f.get("name")): f for f in files if isinstance(f, dict)}
    if target.files is not None:
        missing = [f for f in target.files if f not in recorded]
        if missing:
            return f"marker does not list {', '.join(missing)}"
    bad = fsutil.size_mismatch(target.directory, recorded.values())
    if bad is None:
        return None
    path, size, marked = bad
    return f"{path} is missing" if size is None else f"{path} has {size} bytes, marker recorded {marked}"


# --------------------------------------------------------------------------- sources

Progress = Callable[[int], None]


class Source(Protocol):
    def describe(self) -> str: ...

    def list_files(self, target: Target) -> tuple[str, list[RemoteFile]]: ...

    def fetch(self, target: Target, resolved: str, f: RemoteFile, dest: Path, progress: Progress) -> None: ...


class LocalSource:
    """A directory mirroring the hub: ``<root>/models|datasets/<owner>/<name>/<revision>/``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"local mirror {self.root}"

    def _repo_dir(self, target: Target) -> Path:
        return self.root / (target.kind + "s") / target.repo_id / target.revision

    def list_files(self, target: Target) -> tuple[str, list[RemoteFile]]:
        base = self._repo_dir(target)
        if not base.is_dir():
            raise CheckFailed(f"{target.label} not found in {self.describe()}: expected directory {base}")
        files = [
            RemoteFile(str(p.relative_to(base)), p.stat().st_size, None)
            for p in sorted(base.rglob("*"))
            if p.is_file()
        ]
        return target.revision, files

    def fetch(self, target: Target, resolved: str, f: RemoteFile, dest: Path, progress: Progress) -> None:
        src = self._repo_dir(target) / f.name
        part = dest.with_name(dest.name + ".incomplete")
        dest.parent.mkdir(parents=True, exist_ok=True)
        done = part.stat().st_size if part.exists() else 0
        total = src.stat().st_size
        if done > total:
            part.unlink()
            done = 0
        if done:
            LOG.info("resuming partial file", extra={"fields": {"file": f.name, "at_bytes": done}})
            progress(done)
        with open(src, "rb") as fin, open(part, "ab") as fout:
            fin.seek(done)
            while True:
                block = fin.read(4 << 20)
                if not block:
                    break
                fout.write(block)
                progress(len(block))
            fout.flush()
            os.fsync(fout.fileno())
        os.replace(part, dest)


class HubSource:
    """The Hugging Face hub (or a mirror endpoint) through ``huggingface_hub``."""

    def __init__(self, endpoint: str | None, token: str | None) -> None:
        self.endpoint = endpoint or None
        self._token = token or None

    def describe(self) -> str:
        return f"hub {self.endpoint or '(default endpoint)'}"

    def list_files(self, target: Target) -> tuple[str, list[RemoteFile]]:
        # huggingface_hub is heavy and only the hub source needs it: imported on use
        from huggingface_hub import HfApi  # noqa: PLC0415

        api = HfApi(endpoint=self.endpoint, token=self._token)
        info: Any
        try:
            if target.kind == "model":
                info = api.model_info(target.repo_id, revision=target.revision, files_metadata=True)
            else:
                info = api.dataset_info(target.repo_id, revision=target.revision, files_metadata=True)
        except Exception as exc:
            raise CheckFailed(
                f"cannot list {target.label} on {self.describe()}: {type(exc).__name__}: {_short(exc)}; "
                "check the repo id and revision (model.repoId/model.revision or data.datasets[]), the "
                "network path to the hub, and the token Secret for gated repos"
            ) from exc
        files = []
        for s in info.siblings or []:
            lfs = getattr(s, "lfs", None)
            files.append(RemoteFile(s.rfilename, s.size, getattr(lfs, "sha256", None) if lfs else None))
        return str(info.sha or target.revision), files

    def fetch(self, target: Target, resolved: str, f: RemoteFile, dest: Path, progress: Progress) -> None:
        # as above: the hub client (and its progress bars) only when downloading
        from huggingface_hub import hf_hub_download  # noqa: PLC0415
        from tqdm.auto import tqdm  # noqa: PLC0415

        class _LogBar(tqdm):  # type: ignore[misc]
            def update(self, n: float | None = 1) -> bool | None:
                progress(int(n or 0))
                return None

            def display(self, *args: Any, **kwargs: Any) -> None:
                return None

        try:
            hf_hub_download(
                target.repo_id,
                f.name,
                repo_type=target.kind,
                revision=resolved,
                local_dir=str(target.directory),
                token=self._token,
                endpoint=self.endpoint,
                tqdm_class=_LogBar,
            )
        except Exception as exc:
            raise CheckFailed(
                f"downloading {f.name} of {target.label} failed: {type(exc).__name__}: "
                f"{_short(exc)}; re-run prepare-data to resume"
            ) from exc


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:300]


class _ProgressLog:
    def __init__(self, label: str, name: str, total: int | None) -> None:
        self.label, self.name, self.total = label, name, total
        self.done = 0
        self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= _PROGRESS_EVERY_S:
            self.last = now
            pct = f"{100.0 * self.done / self.total:.0f}%" if self.total else "?"
            LOG.info(
                "downloading",
                extra={
                    "fields": {
                        "target": self.label,
                        "file": self.name,
                        "progress": pct,
                        "bytes": fsutil.human_bytes(self.done),
                    }
                },
            )


# --------------------------------------------------------------------------- orchestration


def hf_token(raw: RawSpec) -> str | None:
    names = [s["env"] for s in raw["secrets"] if s["purpose"] == "huggingface"] or ["HF_TOKEN"]
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


def pick_source(raw: RawSpec, source_dir: str | None) -> Source:
    local = source_dir or raw["prepare"].get("sourceDir") or ""
    if local:
        return LocalSource(local)
    env_name = raw["prepare"]["hfEndpointEnv"]
    endpoint = os.environ.get(env_name) if env_name else None
    return HubSource(endpoint, hf_token(raw))


def _wanted(target: Target, listing: list[RemoteFile]) -> list[RemoteFile]:
    by_name = {f.name: f for f in listing}
    if target.files is None:
        wanted = [f for f in listing if f.name not in _SKIP_NAMES]
        if not wanted:
            raise CheckFailed(f"{target.label} has no files at that revision")
        return wanted
    missing = [name for name in target.files if name not in by_name]
    if missing:
        raise CheckFailed(
            f"{target.label}: file(s) {', '.join(missing)} not in the repo at that revision; "
            f"expected them to exist (data.datasets[].files); the repo has: "
            + ", ".join(sorted(by_name)[:20])
        )
    return [by_name[name] for name in target.files]


def _present_ok(path: Path, f: RemoteFile) -> tuple[bool, str | None]:
    """(already good, its sha256 when it had to be computed)."""
    try:
        size = path.stat().st_size
    except OSError:
        return False, None
    if f.size is not None and size != f.size:
        return False, None
    if f.sha256 is None:
        return True, None
    digest = fsutil.sha256_file(path)
    return digest == f.sha256, digest


def ensure(target: Target, source: Source) -> dict[str, Any]:
    """Bring ``target`` up to date from ``source``; returns a summary. Idempotent and resumable."""
    started = time.monotonic()
    marker = fsutil.read_json(target.marker)
    why = marker_mismatch(target, marker)
    if why is None:
        LOG.info(
            "already prepared; skipping",
            extra={
                "fields": {
                    "target": target.label,
                    "dir": str(target.directory),
                    "seconds": round(time.monotonic() - started, 4),
                }
            },
        )
        files = marker.get("files") if isinstance(marker, dict) else None
        return {"target": target.label, "skipped": True, "files": len(files or [])}
    LOG.info(
        "preparing",
        extra={
            "fields": {
                "target": target.label,
                "dir": str(target.directory),
                "reason": why,
                "source": source.describe(),
            }
        },
    )
    with contextlib.suppress(FileNotFoundError):
        target.marker.unlink()  # never leave a marker claiming files we are about to change
    resolved, listing = source.list_files(target)
    wanted = _wanted(target, listing)
    total = sum(f.size or 0 for f in wanted)
    LOG.info(
        "files to check",
        extra={
            "fields": {
                "target": target.label,
                "resolved": resolved,
                "files": len(wanted),
                "total": fsutil.human_bytes(total),
            }
        },
    )
    target.directory.mkdir(parents=True, exist_ok=True)
    fetched = 0
    records: list[dict[str, Any]] = []
    for i, f in enumerate(wanted, 1):
        dest = target.directory / safe_relpath(f.name)
        present, digest = _present_ok(dest, f)
        if present:
            LOG.debug("present", extra={"fields": {"file": f.name}})
        else:
            LOG.info(
                f"fetching file {i}/{len(wanted)}",
                extra={
                    "fields": {
                        "target": target.label,
                        "file": f.name,
                        "size": fsutil.human_bytes(f.size) if f.size is not None else "?",
                    }
                },
            )
            source.fetch(target, resolved, f, dest, _ProgressLog(target.label, f.name, f.size))
            fetched += 1
            digest = None
        size = dest.stat().st_size
        if digest is None:
            digest = fsutil.sha256_file(dest)
        if (f.size is not None and size != f.size) or (f.sha256 and digest != f.sha256):
            dest.unlink()
            raise CheckFailed(
                f"{target.label}: {f.name} is corrupt after download (expected size {f.size} "
                f"sha256 {f.sha256}, found {size} {digest}); deleted it, re-run prepare-data"
            )
        records.append({"name": f.name, "size": size, "sha256": digest})
    fsutil.atomic_write_json(target.marker, build_marker(target, resolved, records, source.describe()))
    LOG.info(
        "prepared",
        extra={
            "fields": {
                "target": target.label,
                "fetched": fetched,
                "files": len(records),
                "seconds": round(time.monotonic() - started, 2),
            }
        },
    )
    return {
        "target": target.label,
        "skipped": False,
        "fetched": fetched,
        "files": len(records),
        "resolvedRevision": resolved,
    }


def check_present(target: Target) -> dict[str, Any]:
    """``prepare.download: false``: accept a matching marker or the expected files, else fail."""
    why = marker_mismatch(target, fsutil.read_json(target.marker))
    if why is None:
        return {"target": target.label, "skipped": True}
    if target.files is not None:
        missing = [str(target.directory / n) for n in target.files if not (target.directory / n).is_file()]
    else:
        missing = (
            [] if (target.directory / "config.json").is_file() else [str(target.directory / "config.json")]
        )
        if not any(target.directory.glob("*.safetensors")) and not any(target.directory.glob("*.bin")):
            missing.append(str(target.directory / "*.safetensors"))
    if missing:
        raise CheckFailed(
            f"{target.label} is not on the shared volume and downloads are off: missing "
            + ", ".join(missing)
            + "; set hooks.prepareData.download=true or pre-populate the volume"
        )
    LOG.warning(
        "files present without a completion marker; accepted because downloads are off",
        extra={"fields": {"target": target.label, "reason": why}},
    )
    return {"target": target.label, "skipped": True, "unverified": True}


def run(spec: RunSpec, source_dir: str | None = None) -> dict[str, Any]:
    raw = spec.raw
    proven = writable.require(writable.directories_written(raw))
    LOG.info(
        "the shared volume takes this user's writes", extra={"fields": {"uid": os.getuid(), "dirs": proven}}
    )
    # before any download: what the job will do with the checkpoints already in output.dir (or why not)
    decision = resume.decide(raw)
    LOG.info(decision.describe(), extra={"fields": decision.as_dict()})
    facts = record_image_facts(raw)
    results = []
    download = bool(raw["prepare"]["download"])
    source = pick_source(raw, source_dir) if download else None
    for target in targets(raw):
        if source is None:
            results.append(check_present(target))
        else:
            results.append(ensure(target, source))
    return {"targets": results, "resume": decision.as_dict(), "imageFacts": facts}


def record_image_facts(raw: RawSpec) -> dict[str, Any] | None:
    """The miles image's versions, read on the cluster (refused when its Ray is not the chart's) and kept
    under output.dir for submit's provenance record; None when hooks.prepareData.imageFacts is off."""
    wanted = raw["prepare"]["imageFacts"]
    if not wanted["enabled"]:
        return None
    facts = image_facts.check(kube.connect(), raw).as_dict()
    Path(wanted["file"]).parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write_json(wanted["file"], facts)
    return facts
