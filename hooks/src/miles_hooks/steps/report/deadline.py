"""A wall-clock budget for reading the shared volume (exit 3 when it runs out)."""

from __future__ import annotations

import time

from miles_hooks.core.errors import HookTimeout


class Deadline:
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds

    def check(self, doing: str) -> None:
        """Raise :class:`HookTimeout` naming what was being read when the budget is spent."""
        if self._end is not None and time.monotonic() > self._end:
            raise HookTimeout(
                f"report gave up after --timeout {self.seconds:g} s while {doing}; expected the "
                "shared volume to answer faster (raise --timeout, or check the volume)"
            )
