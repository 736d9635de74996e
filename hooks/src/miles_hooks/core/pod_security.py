"""Pod Security when preflight may not send its dry run (``hooks.preflight.apiDryRun: false``).

The dry run (``core.dry_run``) is Pod Security admission's own verdict on every rule and every level.
Without it, preflight still reads the namespace's ``enforce`` label and judges the release's pods
against the rules of ``restricted`` that the release breaks by design: the miles image runs as root, so
the Ray, single-node and convert pods set no ``runAsNonRoot: true``. Those rules are judged exactly as
Pod Security does (the container's own field, else the pod's); no other rule is judged here.
"""

from __future__ import annotations

from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
RESTRICTED = "restricted"
CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")

RESTRICTED_REMEDY = (
    "the Ray, single-node and convert pods run the miles image as root, which `baseline` admits; "
    f"label the namespace {ENFORCE_LABEL}=baseline"
)


def enforce_hint(level: str) -> str:
    """What to change when the namespace's enforced level refuses one of the release's pods."""
    label = f"the namespace's label {ENFORCE_LABEL}={level}"
    if level == RESTRICTED:
        return f"{label} refuses it: {RESTRICTED_REMEDY}"
    return f"{label} refuses it: bring the pod's securityContext values within `{level}`"


def enforced_level(namespace_labels: dict[str, str]) -> str:
    """The level the namespace enforces, '' when it sets none (the cluster's default applies)."""
    return namespace_labels.get(ENFORCE_LABEL, "")


def restricted_user_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Why ``restricted`` refuses this pod for its user: each container that may run as root (no
    effective ``runAsNonRoot: true``) or is set to uid 0, named; [] when the user rules hold."""
    pod_context = pod_spec.get("securityContext") or {}
    problems = []
    if pod_context.get("runAsUser") == 0:
        problems.append("spec.securityContext.runAsUser=0")
    for field in CONTAINER_FIELDS:
        for container in pod_spec.get(field) or []:
            context = container.get("securityContext") or {}
            name = container.get("name", "?")
            non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
            if non_root is not True:
                problems.append(f"container {name!r} sets no runAsNonRoot: true")
            if context.get("runAsUser") == 0:
                problems.append(f"container {name!r} sets runAsUser=0")
    return problems
