"""Kubernetes quantities (``"8"``, ``"1k"``, ``"1200Gi"``, ``"500m"``), exactly or as whole numbers.

The parsing itself is the kubernetes client's ``parse_quantity``; this module only turns its exact
``Decimal`` into what the checks compare (CPUs exactly, GPU counts and bytes whole), with 0 for an absent or
unreadable value (a node without the resource has none of it).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def parse_exact(value: Any) -> Decimal:
    """A Kubernetes quantity exactly (``"500m"`` is 0.5); 0 when absent or unreadable."""
    if value is None:
        return Decimal(0)
    # kubernetes is imported on use: `import miles_hooks.cli` must work in the miles image without it
    from kubernetes.utils import parse_quantity  # noqa: PLC0415

    try:
        return Decimal(parse_quantity(str(value).strip()))
    except (ValueError, TypeError, ArithmeticError):
        return Decimal(0)


def parse_count(value: Any) -> int:
    """A Kubernetes quantity as an integer, rounded down: a count (``"8"``, ``"1k"``) or bytes
    (``"1200Gi"``, ``"1.2Ti"``); 0 when absent or unreadable (``"500m"`` of a GPU is 0 GPUs)."""
    return int(parse_exact(value))
