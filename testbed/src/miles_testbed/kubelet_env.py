"""A container's environment as the kubelet resolves it, for the Ray worker nodes that stand in for simulated
worker pods: they must join the head with the pod's own settings (its token from a Secret, its address from
``$(VAR)`` references), and a reference the kubelet could not resolve must stop them as it stops a container.

Resolution order, as the kubelet's: every ``envFrom`` source (with its prefix), then each ``env`` entry in
order -- ``value`` with ``$(VAR)`` expansion against what is defined so far, ``configMapKeyRef``,
``secretKeyRef``. Downward-API values (``fieldRef``, ``resourceFieldRef``) are left out: the Ray worker needs
none of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")

# (kind "ConfigMap" or "Secret", namespace, name, optional) -> the object's data, decoded; None for a missing
# optional object. A missing required object raises EnvError.
DataSource = Callable[[str, str, str, bool], "dict[str, str] | None"]


class EnvError(Exception):
    """The env names a ConfigMap, Secret or key that is not there: the kubelet would not start the container
    (CreateContainerConfigError)."""


def expand_vars(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion, one pass: defined vars are replaced, ``$$`` escapes, unknown
    references stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return VAR_REF.sub(sub, value)


def container_env(namespace: str, container: Any, data: DataSource) -> dict[str, str]:
    """The env of ``container`` (a ``V1Container``) in a pod of ``namespace``, ConfigMaps and Secrets read
    through ``data``."""
    env: dict[str, str] = {}
    for source in container.env_from or []:
        ref, kind = (
            (source.config_map_ref, "ConfigMap") if source.config_map_ref else (source.secret_ref, "Secret")
        )
        if ref is not None:
            found = data(kind, namespace, ref.name, bool(ref.optional)) or {}
            env.update({(source.prefix or "") + k: v for k, v in found.items()})
    for var in container.env or []:
        value_from = var.value_from
        if value_from is None:
            env[var.name] = expand_vars(var.value or "", env)
            continue
        key_ref, kind = (
            (value_from.config_map_key_ref, "ConfigMap")
            if value_from.config_map_key_ref
            else (value_from.secret_key_ref, "Secret")
        )
        if key_ref is None:
            continue
        referenced = data(kind, namespace, key_ref.name, bool(key_ref.optional))
        if referenced is not None and key_ref.key in referenced:
            env[var.name] = referenced[key_ref.key]
        elif not key_ref.optional:
            raise EnvError(f"couldn't find key {key_ref.key} in {kind} {namespace}/{key_ref.name}")
    return env
