"""Kubernetes API access for the steps that need it, and the translation of its errors.

``kubernetes`` is imported on use: the CLI imports every step, and ``convert`` and ``gpu-check`` run in
the miles image, which does not have it. API errors become :class:`ApiError` and its subclasses
(:class:`NotFound`, :class:`Forbidden`, :class:`Gone`) through :func:`api_call` / :func:`optional`,
so a step says which status it expects instead of comparing HTTP codes.

``connect()`` returns an :class:`Api` whose client counts every HTTP request it makes, so the benchmark
can show that wait-ready's requests do not grow with node count or wait time. Objects are handed to the
pure functions as plain dicts (the API's JSON shape), which is also what a test can build by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from miles_hooks.core.errors import BadInput, CheckFailed

T = TypeVar("T")

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
        return _client_module().CoreV1Api(self.client)

    def custom(self) -> Any:
        return _client_module().CustomObjectsApi(self.client)

    def batch(self) -> Any:
        return _client_module().BatchV1Api(self.client)

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
                raise _client_module().exceptions.ApiException(
                    status=resp.status, reason=getattr(resp, "reason", "")
                )
            return json.loads(resp.data)
        return cl.call_api(  # older clients
            path, "GET", response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True
        )


def _client_module() -> Any:
    # kubernetes is absent from the miles image, where convert and gpu-check run: imported on use
    from kubernetes import client  # noqa: PLC0415

    return client


def connect() -> Api:
    """In-cluster config (hook pods) or $KUBECONFIG (testbed, laptops); requests are counted."""
    # as in _client_module: kubernetes is imported on use
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
    """The HTTP status of a Kubernetes API error (the client's ``ApiException`` or anything with an
    integer ``status``); None for every other exception."""
    value = getattr(exc, "status", None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class ApiError(CheckFailed):
    """A Kubernetes API call failed (exit 1). ``status`` is the HTTP status the API answered."""

    status: int | None = None

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(ApiError):
    """HTTP 404: the object (or API group) does not exist."""


class Forbidden(ApiError):
    """HTTP 403: the hook's Role/ClusterRole lacks the permission."""


class Conflict(ApiError):
    """HTTP 409: the object already exists (create) or changed under us (update)."""


class Gone(ApiError):
    """HTTP 410: a watch's resource version expired; list again."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 403: Forbidden, 409: Conflict, 410: Gone}


def server_message(exc: BaseException) -> str:
    """The API server's own explanation (the ``message`` of the Status it answered), '' when absent."""
    body = getattr(exc, "body", None)
    try:
        status = json.loads(body) if isinstance(body, (str, bytes)) else None
    except ValueError:
        return ""
    return str(status.get("message") or "") if isinstance(status, dict) else ""


def translate(what: str, exc: BaseException) -> ApiError:
    """The :class:`ApiError` subclass for the status of ``exc``, with a message naming ``what`` was
    being done and the API server's own reason (and, for 403, what to change)."""
    code = status_of(exc)
    said = server_message(exc)
    if code == 403:
        message = (
            f"{what}: forbidden (HTTP 403); the hook's Role/ClusterRole lacks this permission "
            "(check the chart's hooks.rbac settings)"
        )
    else:
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        message = f"{what}: Kubernetes API error {code or ''} {reason}".rstrip()
    if said:
        message += f": {said}"
    cls = _BY_STATUS.get(code, ApiError) if code is not None else ApiError
    return cls(message, code)


@contextmanager
def api_call(what: str) -> Iterator[None]:
    """Run Kubernetes client calls; an API error leaves as :class:`ApiError` (or its 404/403/410
    subclass) naming ``what``. Exceptions without an HTTP status (bugs, network) pass unchanged."""
    try:
        yield
    except ApiError:
        raise
    except Exception as exc:
        if status_of(exc) is None:
            raise
        raise translate(what, exc) from exc


def optional(what: str, call: Callable[[], T], absent: tuple[type[ApiError], ...] = (NotFound,)) -> T | None:
    """``call()`` with API errors translated, or None when the error is one of ``absent`` (by default a
    404: the object does not exist). Any other API error is raised as an :class:`ApiError`."""
    try:
        with api_call(what):
            return call()
    except absent:
        return None
