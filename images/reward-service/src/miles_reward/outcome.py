"""What scoring one sample can end in, and how each ending maps to HTTP.

A failure is never turned into a number: only ``Scored`` carries a score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FailureKind = Literal[
    "unusable_label",  # 422: the label cannot be checked against (missing, empty, not math)
    "timeout",  # 503: the check ran past REWARD_TIMEOUT_SECONDS and its worker was killed
    "worker_died",  # 503: the worker process exited while scoring this sample
    "internal_error",  # 503: the backend raised
    "overloaded",  # 503: REWARD_MAX_INFLIGHT samples are already admitted
    "shutting_down",  # 503: the pool is closing
]

STATUS_BY_KIND: dict[FailureKind, int] = {
    "unusable_label": 422,
    "timeout": 503,
    "worker_died": 503,
    "internal_error": 503,
    "overloaded": 503,
    "shutting_down": 503,
}


@dataclass(frozen=True, slots=True)
class Scored:
    score: float


@dataclass(frozen=True, slots=True)
class Failed:
    kind: FailureKind
    detail: str

    @property
    def status(self) -> int:
        return STATUS_BY_KIND[self.kind]


Outcome = Scored | Failed


# A prompt as miles sends it: the text, or (``--apply-chat-template`` off) the chat messages as
# (role, content) pairs.
Prompt = str | tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    prompt: Prompt
    response: str
    label: str | None
