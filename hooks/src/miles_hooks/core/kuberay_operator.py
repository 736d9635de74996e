"""What the running KubeRay operator's pod tells about it: its version (the image tag) and how long, from
KubeRay 1.7 on, it lets a RayJob's dashboard stay silent before it fails the RayJob for good.

KubeRay 1.7's RayJob controller fails a RayJob with reason ``JobStatusCheckTimeoutExceeded`` once the job's
status cannot be read from the dashboard for ``RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS`` (an env var of the
operator; 300 s when unset), and, as for ``DeadlineExceeded``, never retries it: a head that takes longer
than that to come back (a lost node, a new one pulling the miles image) ends the run however large
``rayJob.backoffLimit`` is. 1.6 and older have no such timeout.
"""

from __future__ import annotations

import re
from typing import Any

STATUS_CHECK_ENV = "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS"
STATUS_CHECK_DEFAULT_SECONDS = 300
FIRST_WITH_STATUS_CHECK = (1, 7)
_TAG_VERSION = re.compile(r":v?([0-9]+)\.([0-9]+)(?:\.[0-9]+)?(?:[-+@][^/]*)?$")


def version(pod: Any) -> tuple[int, int] | None:
    """(major, minor) from the operator container's image tag (``quay.io/kuberay/operator:v1.7.0``); None
    for a digest-only or custom tag."""
    for container in pod.spec.containers or []:
        found = _TAG_VERSION.search(str(container.image or "").split("@", 1)[0])
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def status_check_timeout(pod: Any) -> tuple[int | None, str]:
    """(seconds, where from) of the operator's RayJob status-check timeout: its container env's literal
    value, the default when unset, None when set from elsewhere (valueFrom) or not a whole number."""
    for container in pod.spec.containers or []:
        for env in container.env or []:
            if env.name != STATUS_CHECK_ENV:
                continue
            if env.value is None:
                return None, f"{STATUS_CHECK_ENV} is set from a reference preflight does not resolve"
            text = str(env.value).strip()
            if not text.isdigit():
                return None, f"{STATUS_CHECK_ENV}={text!r} is not a whole number of seconds"
            return int(text), f"{STATUS_CHECK_ENV}={text}"
    return STATUS_CHECK_DEFAULT_SECONDS, f"{STATUS_CHECK_ENV} unset: KubeRay's default"
