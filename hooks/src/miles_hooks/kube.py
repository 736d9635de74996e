"""Kubernetes API access for the steps that need it (``kubernetes`` imported lazily).

``connect()`` returns an :class:`Api` whose client counts every HTTP request it makes, so the benchmark
can show that wait-ready's requests do not grow with node count or wait time. Objects are handed to the
pure functions as plain dicts (the API's JSON shape), which is also what a test can build by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from miles_hooks.errors import BadInput, CheckFailed

RAY_GROUP = "ray.io"
RAY_VERSION = "v1"
RAY_PLURAL = "rayclusters"


@dataclass
class Api:
    client: Any  # kubernetes.client.ApiClient subclass with a ``requests`` counter

    @property
    def requests(self) -> int:
        return int(self.client.requests)

    def core(self) -> Any:
        from kubernetes import client  # noqa: PLC0415

        return client.CoreV1Api(self.client)

    def custom(self) -> Any:
        from kubernetes import client  # noqa: PLC0415

        return client.CustomObjectsApi(self.client)

    def to_dict(self, obj: Any) -> dict[str, Any]:
        value = self.client.sanitize_for_serialization(obj)
        return value if isinstance(value, dict) else {}

    def get_json(self, path: str) -> Any:
        """GET an arbitrary API path (discovery documents); raises the client's ApiException."""
        cl = self.client
        if hasattr(cl, "param_serialize"):  # kubernetes >= 32: generated client with param_serialize
            method, url, headers, body, post = cl.param_serialize("GET", path, auth_settings=["BearerToken"])
            resp = cl.call_api(method, url, header_params=headers, body=body, post_params=post)
            resp.read()
            if not 200 <= int(resp.status) < 300:
                from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

                raise ApiException(status=resp.status, reason=getattr(resp, "reason", ""))
            return json.loads(resp.data)
        return cl.call_api(  # older clients
            path, "GET", response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True
        )


def connect() -> Api:
    """In-cluster config (hook pods) or $KUBECONFIG (testbed, laptops); requests are counted."""
    from kubernetes import client, config  # noqa: PLC0415
    from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415

    class CountingApiClient(client.ApiClient):
        """Every HTTP request of every API class goes through call_api: count them there."""

        requests = 0

        def call_api(self, *args: Any, **kwargs: Any) -> Any:
            self.requests += 1
            return super().call_api(*args, **kwargs)

    try:
        config.load_incluster_config()
    except ConfigException:
        try:
            config.load_kube_config()
        except (ConfigException, OSError, TypeError) as exc:
            raise BadInput(
                "no Kubernetes configuration: expected the pod's service account (in-cluster) "
                f"or $KUBECONFIG; found neither ({exc})"
            ) from exc
    api_client = CountingApiClient()
    api_client.requests = 0
    return Api(api_client)


def status_of(exc: BaseException) -> int | None:
    value = getattr(exc, "status", None)
    return int(value) if isinstance(value, int) else None


def api_failure(what: str, exc: BaseException) -> CheckFailed:
    code = status_of(exc)
    if code == 403:
        return CheckFailed(
            f"{what}: forbidden (HTTP 403); the hook's Role/ClusterRole lacks this permission "
            "(check the chart's hooks.rbac settings)"
        )
    reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
    return CheckFailed(f"{what}: Kubernetes API error {code or ''} {reason}".rstrip())


def parse_count(value: Any) -> int:
    """A Kubernetes quantity as an integer: a count (``"8"``, ``"1k"``) or bytes (``"1200Gi"``,
    ``"1.2Ti"``); 0 when absent or unreadable."""
    if value is None:
        return 0
    text = str(value).strip()
    suffixes = {
        "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    }  # fmt: skip
    for suffix, factor in sorted(suffixes.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    if text.endswith("m"):
        return int(float(text[:-1]) / 1000)
    try:
        return int(float(text))
    except ValueError:
        return 0
