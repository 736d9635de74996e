"""A lock file on the shared volume with stale-lock recovery (standard library only).

Acquire = ``O_CREAT|O_EXCL`` create of ``<path>`` holding a JSON token (host, pid, random id). The holder
touches the file every few seconds (heartbeat); a lock whose mtime is older than ``stale_seconds`` is
stale, and so is one left by a dead process of this host (or by this very pid, i.e. a restarted
container). A stale lock is broken by renaming it aside (only one breaker can win the rename) and
checking that what was renamed is the stale token; a fresh lock renamed by mistake is put back with
``link`` (which never overwrites).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

from miles_hooks.core import log
from miles_hooks.core.errors import HookTimeout

LOG = log.get("lock")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(
    info: dict[str, Any] | None, age_seconds: float, stale_seconds: float, host: str, pid: int
) -> bool:
    """Pure rule: is a lock with this token and this age abandoned?"""
    if age_seconds > stale_seconds:
        return True
    if not isinstance(info, dict):
        # unreadable/half-written token: only the age can tell (a creator writes it immediately)
        return age_seconds > min(stale_seconds, 30.0)
    if info.get("host") == host:
        other = info.get("pid")
        if other == pid:
            return True  # our own pid but not our lock: a restarted container reusing the pid
        if isinstance(other, int) and not pid_alive(other):
            return True
    return False


class FileLock:
    def __init__(self, path: str | Path, stale_seconds: float) -> None:
        self.path = Path(path)
        self.stale_seconds = float(stale_seconds)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.token = secrets.token_hex(8)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def _read(self, path: Path | None = None) -> dict[str, Any] | None:
        try:
            value = json.loads((path or self.path).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump(
                {
                    "host": self.host,
                    "pid": self.pid,
                    "token": self.token,
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                fh,
            )
            fh.flush()
            os.fsync(fh.fileno())
        return True

    def _break(self, stale: dict[str, Any] | None) -> None:
        aside = self.path.with_name(f"{self.path.name}.broken-{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # someone else broke or released it
        moved = self._read(aside)
        if stale is not None and moved is not None and moved.get("token") != stale.get("token"):
            # we renamed a lock that was re-created after our look: put it back, never overwrite
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
        else:
            LOG.warning("broke a stale lock", extra={"fields": {"lock": str(self.path), "holder": stale}})
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)

    def acquire(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        last_note = 0.0
        while True:
            if self._try_create():
                self._start_heartbeat()
                return
            info = self._read()
            try:
                age = time.time() - self.path.stat().st_mtime
            except FileNotFoundError:
                continue
            if is_stale(info, age, self.stale_seconds, self.host, self.pid):
                self._break(info)
                continue
            now = time.monotonic()
            if now >= deadline:
                raise HookTimeout(
                    f"lock {self.path} still held by {info} after {timeout:.0f}s; if no converter "
                    f"is running, it becomes stale after hooks.convert.lockStaleSeconds="
                    f"{self.stale_seconds:.0f}s without a heartbeat"
                )
            if now - last_note >= 30:
                LOG.info("another converter holds the lock; waiting", extra={"fields": {"holder": info}})
                last_note = now
            time.sleep(min(1.0, max(0.05, deadline - now)))

    def _start_heartbeat(self) -> None:
        interval = max(0.5, min(10.0, self.stale_seconds / 4))

        def beat() -> None:
            while not self._stop.wait(interval):
                if not self.held():
                    self.lost = True
                    LOG.error(
                        "lost the lock (it was broken as stale)", extra={"fields": {"lock": str(self.path)}}
                    )
                    return
                with contextlib.suppress(OSError):
                    os.utime(self.path)

        self._thread = threading.Thread(target=beat, name="lock-heartbeat", daemon=True)
        self._thread.start()

    def held(self) -> bool:
        info = self._read()
        return bool(info and info.get("token") == self.token)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.held():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
