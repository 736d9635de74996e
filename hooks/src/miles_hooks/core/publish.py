"""A directory made by a long external tool (the converter, the exporter) and published all at once.

The tool writes into a staging directory beside the target (``.<target>.tmp-<host>-<pid>``: the same file
system, so publishing is one rename). The caller validates the staging directory and writes its marker there;
:func:`publish` renames it over and fsyncs the parent. A reader sees either no target or a complete one; a
killed writer leaves only a staging directory, which the next writer removes under the same lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from miles_hooks.core import fsutil, log
from miles_hooks.core.errors import CheckFailed, HookTimeout
from miles_hooks.core.lockfile import FileLock

LOG = log.get("publish")


def staging_dir(target: Path) -> Path:
    return target.parent / f".{target.name}.tmp-{socket.gethostname()}-{os.getpid()}"


def remove_leftovers(target: Path, what: str) -> None:
    """Staging directories of killed writers and results moved aside; call with the target's lock held."""
    for leftover in target.parent.glob(f".{target.name}.tmp-*"):
        LOG.info(f"removing the leftover of an interrupted {what}", extra={"fields": {"path": str(leftover)}})
        shutil.rmtree(leftover, ignore_errors=True)
    for old in target.parent.glob(f".{target.name}.stale-*"):
        shutil.rmtree(old, ignore_errors=True)


def move_aside(target: Path, why: str | None) -> None:
    """Take an invalid or outdated published result out of the way (rename first: readers never see it half
    deleted)."""
    if not target.exists():
        return
    aside = target.parent / f".{target.name}.stale-{int(time.time())}"
    LOG.info("moving the invalid/outdated result aside", extra={"fields": {"reason": why, "to": str(aside)}})
    os.rename(target, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_tool(
    argv: list[str],
    *,
    what: str,
    env: Mapping[str, str],
    cwd: str | None,
    deadline: float,
    lock: FileLock,
    failure_hint: str,
    deadline_hint: str,
) -> float:
    """Run ``argv`` (its output goes to our stderr, the pod's log; stdout stays for ``--json``) until it ends,
    the lock is lost or the deadline passes; killed with its process group otherwise, and when this process
    dies. Returns the seconds it ran; CheckFailed / HookTimeout naming ``what`` when it did not succeed
    (``failure_hint`` added when the tool was SIGKILLed, as the OOM killer does)."""
    LOG.info(f"running the {what}", extra={"fields": {"command": shlex.join(argv), "cwd": cwd or "."}})
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(env),
        stdout=sys.stderr,
        start_new_session=True,
        preexec_fn=_set_pdeathsig,  # noqa: PLW1509 - the only other thread is the lock heartbeat
    )
    try:
        while True:
            try:
                code = proc.wait(timeout=5)
                break
            except subprocess.TimeoutExpired:
                pass
            if lock.lost:
                raise CheckFailed(f"lost the lock {lock.path} while the {what} ran; another one took over")
            if time.monotonic() >= deadline:
                raise HookTimeout(
                    f"the {what} ran past the deadline ({time.monotonic() - started:.0f}s); {deadline_hint}"
                )
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = time.monotonic() - started
    if code != 0:
        killed = code in (-signal.SIGKILL, 128 + signal.SIGKILL)  # the kernel's OOM killer sends SIGKILL
        raise CheckFailed(
            f"the {what} exited with code {code} after {seconds:.0f}s; see its output above"
            + (f" (killed: {failure_hint})" if killed else "")
        )
    LOG.info(f"{what} finished", extra={"fields": {"seconds": round(seconds, 1)}})
    return seconds


def publish(staging: Path, target: Path, lock: FileLock) -> None:
    """Rename the validated, marked staging directory over ``target``: readable by every user (servers and
    the hooks' uid read it; some writers leave 0600 files), then one rename, then the parent fsynced."""
    if not lock.held():
        raise CheckFailed(f"lost the lock {lock.path} before publishing; not publishing")
    for path in [staging, *staging.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | (0o755 if path.is_dir() else 0o444))
    os.rename(staging, target)
    fsutil.fsync_dir(target.parent)


def build_under_lock(
    target: Path,
    lock: FileLock,
    *,
    what: str,
    still_needed: Callable[[], str | None],
    build: Callable[[Path], None],
    make_staging: bool,
    on_published: Callable[[], None] = lambda: None,
) -> bool:
    """With ``lock`` held (released here): False when ``still_needed`` finds nothing to do any more (another
    writer published while we waited for the lock); otherwise the leftovers of killed writers removed, an
    invalid result moved aside, ``build(staging)`` (the tool's output, validated, its marker written into
    it) and the staging directory published, then ``on_published()``, still under the lock. A failure
    removes the staging directory and publishes nothing."""
    try:
        why = still_needed()
        if why is None:
            return False
        remove_leftovers(target, what)
        move_aside(target, why)
        staging = staging_dir(target)
        if make_staging:
            staging.mkdir()
        try:
            build(staging)
            publish(staging, target, lock)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        on_published()
    finally:
        lock.release()
    return True
