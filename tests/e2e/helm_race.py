"""Helm 4.3's hook status race, told apart from a failed or timed-out hook by Helm's own output alone.

Helm 4.3's CLI waits for hook Jobs with fluxcd cli-utils' status watcher and 8 status-compute workers.
A worker's stale check and its send are not atomic, so under load a Job's older InProgress status can
reach the collector after its Complete one: Helm then fails the hook "not ready. status: InProgress"
although its own debug log says the Job reached Current, and the Job is Complete. Not this project's
defect, nor the hook's. Pure text matching, no testbed configuration: the harness tests import it.
"""

from __future__ import annotations

import re

STALE_HOOK_STATUS = re.compile(r"resource Job/(?P<ns>[^/\s]+)/(?P<name>\S+) not ready\. status: InProgress")


def stale_hook_job(output: str) -> tuple[str, str] | None:
    """(namespace, name) of the hook Job when Helm 4's output (with --debug) shows that race: the error,
    and after the last "waiting for resources" before it, Helm's own "all resources achieved desired
    status"; None for any other output."""
    m = STALE_HOOK_STATUS.search(output)
    if not m:
        return None
    wait = output.rfind('msg="waiting for resources"', 0, m.start())
    if wait < 0 or 'msg="all resources achieved desired status"' not in output[wait : m.start()]:
        return None
    return m["ns"], m["name"]
