"""The Ray token Secret (``secrets.rayAuth`` without ``existingSecret``): created once, by preflight,
with a random token, so the value never appears in a manifest, the Helm release or a log.

The Ray pods and the hooks that call the Ray Jobs API read it through ``secretKeyRef``; the chart
renders ``RAY_AUTH_MODE=token`` beside it. An existing token is never rewritten: rotating it is deleting
the Secret and restarting the RayCluster (docs/chart.md, "Ray authentication"). The one change made to
an existing Secret is to one preflight generated under the earlier default key ``token``: the same value
is added under ``auth_token``, the key KubeRay's ``authOptions`` reads.
"""

from __future__ import annotations

import functools
import secrets
from typing import Any

from miles_hooks.core import kube
from miles_hooks.core.runspec_types import RawSpec, SecretSpec

TOKEN_BYTES = 32  # 43 URL-safe characters
# the key chart versions before KubeRay's authOptions generated the token under; KubeRay reads only auth_token
EARLIER_KEY = "token"


def to_create(raw: RawSpec) -> list[SecretSpec]:
    """The Secrets the chart asks preflight to create when absent (``generate``)."""
    return [ref for ref in raw["secrets"] if ref.get("generate")]


def generated_labels(raw: RawSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "miles",
        "app.kubernetes.io/instance": raw["release"]["name"],
        "app.kubernetes.io/component": "ray-auth",
        "app.kubernetes.io/managed-by": "miles-hooks",
    }


def key_to_copy(ref: SecretSpec, raw: RawSpec, labels: dict[str, str] | None, keys: set[str]) -> str | None:
    """The key whose value preflight copies under ``ref``'s key: the earlier default key, in a Secret it
    generated itself for this release (a Secret the user made is never rewritten); None otherwise."""
    ours = ref.get("generate") and generated_labels(raw).items() <= (labels or {}).items()
    if ours and ref["key"] not in keys and EARLIER_KEY in keys:
        return EARLIER_KEY
    return None


def secret_body(ref: SecretSpec, raw: RawSpec, token: str) -> dict[str, Any]:
    release = raw["release"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ref["name"],
            "namespace": release["namespace"],
            "labels": generated_labels(raw),
            "annotations": {
                "miles.dev/purpose": (
                    "Ray token authentication (secrets.rayAuth); created by preflight, kept on "
                    "upgrade and uninstall; delete it and restart the Ray pods to rotate"
                ),
            },
        },
        "stringData": {ref["key"]: token},
    }


def ensure(api: kube.Api, raw: RawSpec) -> list[str]:
    """Create each absent token Secret; returns what was done, one line per Secret (no values)."""
    namespace = raw["release"]["namespace"]
    done = []
    for ref in to_create(raw):
        name = ref["name"]
        found = kube.optional(
            f"reading secret/{name}", functools.partial(api.core().read_namespaced_secret, name, namespace)
        )
        if found is not None:
            data = found.data or {}
            source = key_to_copy(ref, raw, found.metadata.labels, set(data))
            if source is not None:
                with kube.api_call(f"adding key {ref['key']!r} to secret/{name} (secrets.rayAuth)"):
                    api.core().patch_namespaced_secret(name, namespace, {"data": {ref["key"]: data[source]}})
                done.append(
                    f"secret/{name}: key {ref['key']!r} (the key KubeRay reads) added with the value of key "
                    f"{source!r}, which stays"
                )
            continue
        body = secret_body(ref, raw, secrets.token_urlsafe(TOKEN_BYTES))
        try:
            with kube.api_call(f"creating secret/{name} (the Ray token, secrets.rayAuth)"):
                api.core().create_namespaced_secret(namespace, body)
        except kube.Conflict:
            done.append(f"secret/{name}: created meanwhile by another preflight; kept")
            continue
        done.append(
            f"secret/{name}: created with a random Ray token (key {ref['key']!r}); kept on upgrade and "
            "uninstall"
        )
    return done
