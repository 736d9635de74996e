"""Test-only: lets a test hold a real scoring worker inside a check until it says so.

Active only in a service started by the tests with this directory on PYTHONPATH and
REWARD_TEST_GATE_DIR set (see ``reward_http.Gate``). Every interpreter of that service runs this
file, the multiprocessing fork server included, so the workers forked from it inherit the wrapper.

A sample whose response is ``gate:<name>:<rest>`` makes the worker write ``<name>.entered`` into the
gate directory, wait until ``<name>.release`` appears there, and then score ``<rest>`` with the real
backend. Every other sample is scored as usual. Nothing here is used outside the tests.
"""

from __future__ import annotations

import os

_GATE_DIR = os.environ.get("REWARD_TEST_GATE_DIR")

if _GATE_DIR:
    import time
    from dataclasses import replace
    from pathlib import Path

    from miles_reward import worker as _worker
    from miles_reward.outcome import Outcome, Sample

    _real_score_safely = _worker.score_safely
    _gate_dir = Path(_GATE_DIR)

    def _gated_score_safely(scorer: _worker.Scorer, sample: Sample) -> Outcome:
        if sample.response.startswith("gate:"):
            _, name, rest = sample.response.split(":", 2)
            # whole or not at all: the test reads the pid as soon as the file exists
            partial = _gate_dir / f"{name}.entered.{os.getpid()}"
            partial.write_text(str(os.getpid()))
            os.replace(partial, _gate_dir / f"{name}.entered")
            release = _gate_dir / f"{name}.release"
            while not release.exists():  # the check "runs" until the test releases it
                time.sleep(0.005)
            sample = replace(sample, response=rest)
        return _real_score_safely(scorer, sample)

    _worker.score_safely = _gated_score_safely
