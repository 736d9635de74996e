"""The e2e helper that tells Helm 4.3's hook status race from a failed or timed-out hook
(tests/e2e/helm_race.py, stale_hook_job): it decides when an e2e install is upgraded again, so it must
match the race alone. The log lines are Helm 4.3.2's own (`--debug`), the errors its statuswait format."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

import helm_race

WAIT = """level=DEBUG msg="creating resource(s)" resources=1
level=DEBUG msg="Created resource via patch" namespace=ml name=miles-wait-ready gvk="batch/v1, Kind=Job"
level=DEBUG msg="waiting for resources" count=1 timeout=8m0s
level=DEBUG msg="waiting for resource" namespace=ml name=miles-wait-ready kind=Job expectedStatus=Current \
actualStatus=InProgress
"""
ACHIEVED = 'level=DEBUG msg="all resources achieved desired status" desiredStatus=Current resourceCount=1\n'
STALE = (
    "Error: UPGRADE FAILED: post-upgrade hooks failed: resource Job/ml/miles-wait-ready not ready. "
    "status: InProgress, message: Job in progress\n"
)


def test_the_race_names_the_job() -> None:
    assert helm_race.stale_hook_job(WAIT + ACHIEVED + STALE) == ("ml", "miles-wait-ready")


def test_a_timeout_is_not_the_race() -> None:
    timed_out = STALE.rstrip("\n") + "\ncontext deadline exceeded\n"
    assert helm_race.stale_hook_job(WAIT + timed_out) is None


def test_a_failed_job_is_not_the_race() -> None:
    failed = STALE.replace("InProgress, message: Job in progress", "Failed, message: Job Failed")
    assert helm_race.stale_hook_job(WAIT + ACHIEVED + failed) is None


def test_an_earlier_hook_reaching_current_does_not_count() -> None:
    # the previous hook's wait ended Current; this hook's own wait never did
    earlier = WAIT.replace("miles-wait-ready", "miles-prepare-data") + ACHIEVED
    assert helm_race.stale_hook_job(earlier + WAIT + STALE) is None


def test_other_output_is_not_the_race() -> None:
    output = "Error: INSTALLATION FAILED: pre-install hooks failed: BackoffLimitExceeded\n"
    assert helm_race.stale_hook_job(output) is None
