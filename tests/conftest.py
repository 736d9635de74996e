"""Collection order for `make test`, which hands the tests to pytest-xdist workers one at a time, in the
order collected (`--dist loadgroup --no-loadscope-reorder`: each test is a unit of its own except those of
an `xdist_group`, which one worker runs together, and the units keep this order; `loadfile` would order
whole files by their number of tests, which puts the few long end-to-end tests last). The end-to-end tests
take minutes each, the rest seconds: collected first, longest first, they start while every worker is free
and the short tests fill in behind them, instead of one long test starting last on an otherwise idle
machine."""

from __future__ import annotations

from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent / "e2e"

# The e2e files, those of the longest tests first (minutes on 2 cores, from `--durations`); one missing here
# runs after them.
E2E_LONGEST_FIRST = (
    "test_lifecycle.py",
    "test_kueue_admission.py",
    "test_real_convert.py",
    "test_rayjob.py",
    "test_lost_head.py",
    "test_scenarios.py",
    "test_disruption.py",
    "test_existing_checkpoints.py",
    "test_runbook.py",
    "test_two_testbeds.py",
    "test_preflight_failures.py",
)


BUILT_IMAGES = Path(__file__).resolve().parent / "images" / "test_built_images.py"


def _rank(item: pytest.Item) -> tuple[int, int]:
    if item.path == BUILT_IMAGES:
        return (1, 1)  # one unit of minutes (xdist_group): right after the e2e tests, not at the tail
    if item.path.parent != E2E:
        return (2, 0)
    name = item.path.name
    return (0, E2E_LONGEST_FIRST.index(name)) if name in E2E_LONGEST_FIRST else (1, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each file's tests keep their order
