"""One exception hierarchy; each class carries the process exit code the CLI returns.

0 ok, 1 check failed, 2 bad input or spec, 3 timeout, 143 stopped by SIGTERM. Messages are written for
the person reading the failed Helm hook's log: what was expected, what was found and which value to change.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_TIMEOUT = 3
# 128 + SIGTERM, as a shell reports a process the signal ended
EXIT_TERMINATED = 143


class HookError(Exception):
    """Base class: a failure the hook reports as a message (no traceback) and an exit code."""

    exit_code = EXIT_CHECK_FAILED

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details or [])

    def __str__(self) -> str:
        if not self.details:
            return self.message
        return self.message + "\n" + "\n".join(f"  - {d}" for d in self.details)


class CheckFailed(HookError):
    """The cluster, the storage or the job is not in the state the step guarantees (exit 1)."""

    exit_code = EXIT_CHECK_FAILED


class BadInput(HookError):
    """The spec, a CLI argument or an input file is wrong (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class SpecError(BadInput):
    """The run spec does not match the schema this hooks version ships (exit 2)."""


class HookTimeout(HookError):
    """The step gave up waiting (exit 3)."""

    exit_code = EXIT_TIMEOUT


class Terminated(BaseException):
    """The process got SIGTERM (its pod is deleted, evicted or drained): raised out of whatever runs, past
    ``except Exception``, so that every ``finally`` releases its lock and removes its partial output before
    the kubelet's grace period ends in SIGKILL (exit 143)."""
