"""Core helpers: Kubernetes error translation, quantities, run-spec types, the file helpers."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest

from miles_hooks.core import fsutil, kube, runspec_types
from miles_hooks.core.errors import EXIT_CHECK_FAILED, BadInput, CheckFailed
from miles_hooks.core.quantity import parse_count

SCHEMA = Path(__file__).resolve().parents[1] / "src" / "miles_hooks" / "schemas" / "run-spec.schema.json"


class FakeApiException(Exception):
    """What the kubernetes client raises: an exception with ``status`` and ``reason``."""

    def __init__(self, status: int, reason: str = "Reason", body: str | None = None) -> None:
        super().__init__(f"({status})\nReason: {reason}")
        self.status = status
        self.reason = reason
        self.body = body


# ---------------------------------------------------------------- error translation
@pytest.mark.parametrize(
    ("status", "cls"), [(404, kube.NotFound), (403, kube.Forbidden), (410, kube.Gone), (500, kube.ApiError)]
)
def test_translate_picks_the_class_by_status(status: int, cls: type[kube.ApiError]) -> None:
    err = kube.translate("reading secret/x", FakeApiException(status))
    assert type(err) is cls and err.status == status
    assert isinstance(err, CheckFailed) and err.exit_code == EXIT_CHECK_FAILED


def test_translate_messages() -> None:
    forbidden = kube.translate("reading secret/x", FakeApiException(403))
    assert str(forbidden) == (
        "reading secret/x: forbidden (HTTP 403); the hook's Role/ClusterRole lacks this permission "
        "(check the chart's hooks.rbac settings)"
    )
    assert str(kube.translate("watching raycluster/r", FakeApiException(500, "Internal"))) == (
        "watching raycluster/r: Kubernetes API error 500 Internal"
    )


def test_translate_carries_the_api_servers_own_reason() -> None:
    """The Status message is the one place the API server says what is wrong (a 500 from server-side
    apply names the field a CRD lacks): it is never dropped."""
    said = "failed to create typed patch object (/r; ray.io/v1, Kind=RayCluster): .spec.x: field not declared"
    status = json.dumps({"kind": "Status", "status": "Failure", "message": said, "code": 500})
    err = kube.translate("dry-running RayCluster/r", FakeApiException(500, "Internal Server Error", status))
    assert str(err) == f"dry-running RayCluster/r: Kubernetes API error 500 Internal Server Error: {said}"
    for body in (None, "not json", json.dumps(["a list"]), json.dumps({"message": ""})):
        plain = kube.translate("reading secret/x", FakeApiException(500, "Internal", body))
        assert str(plain) == "reading secret/x: Kubernetes API error 500 Internal"


def test_api_call_translates_only_api_errors() -> None:
    with pytest.raises(kube.NotFound, match="reading pvc/data"), kube.api_call("reading pvc/data"):
        raise FakeApiException(404)
    with pytest.raises(ZeroDivisionError), kube.api_call("anything"):
        raise ZeroDivisionError  # no HTTP status: a bug, not an API answer
    already = kube.Forbidden("x", 403)
    with pytest.raises(kube.Forbidden) as caught, kube.api_call("outer"):
        raise already
    assert caught.value is already


def test_optional_returns_none_for_the_absent_statuses() -> None:
    def fail(status: int) -> Any:
        raise FakeApiException(status)

    assert kube.optional("read", lambda: {"kind": "Secret"}) == {"kind": "Secret"}
    assert kube.optional("read", lambda: fail(404)) is None
    with pytest.raises(kube.Forbidden):
        kube.optional("read", lambda: fail(403))
    assert kube.optional("list", lambda: fail(403), absent=(kube.Forbidden,)) is None
    assert kube.optional("read", lambda: fail(403), absent=(kube.NotFound, kube.Forbidden)) is None
    with pytest.raises(kube.ApiError, match="Kubernetes API error 500"):
        kube.optional("read", lambda: fail(500), absent=(kube.NotFound, kube.Forbidden))


def test_status_of() -> None:
    assert kube.status_of(FakeApiException(409)) == 409
    assert kube.status_of(ValueError("x")) is None


# ---------------------------------------------------------------- quantities
@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("8", 8),
        (8, 8),
        ("1k", 1000),
        ("2Ki", 2048),
        ("1200Gi", 1200 * 2**30),
        ("1.5Ti", int(1.5 * 2**40)),
        ("2M", 2_000_000),
        ("500m", 0),
        ("2500m", 2),
        (" 4 ", 4),
        (None, 0),
        ("x", 0),
        ("", 0),
    ],
)
def test_parse_count(value: Any, count: int) -> None:
    assert parse_count(value) == count


# ---------------------------------------------------------------- run spec types
def _typed_keys(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=False)


def _compare(schema: dict[str, Any], cls: Any, where: str, defs: dict[str, Any]) -> list[str]:
    if "$ref" in schema:
        schema = defs[schema["$ref"].split("/")[-1]]
    hints = _typed_keys(cls)
    problems = []
    props = schema.get("properties", {})
    if set(props) != set(hints):
        problems.append(f"{where}: schema {sorted(props)} != TypedDict {sorted(hints)}")
    for key in sorted(set(props) & set(hints)):
        if key in schema.get("required", []) and key not in cls.__required_keys__:
            problems.append(f"{where}.{key}: required in the schema, NotRequired in {cls.__name__}")
        sub = props[key]
        sub = defs[sub["$ref"].split("/")[-1]] if "$ref" in sub else sub
        if sub.get("type") == "array":
            items = sub.get("items", {})
            items = defs[items["$ref"].split("/")[-1]] if "$ref" in items else items
            if "properties" in items:
                problems += _compare(items, typing.get_args(hints[key])[0], f"{where}.{key}[]", defs)
        elif sub.get("type") == "object" and "properties" in sub:
            problems += _compare(sub, hints[key], f"{where}.{key}", defs)
    return problems


def test_typed_dicts_match_the_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    assert _compare(schema, runspec_types.RawSpec, "spec", schema.get("definitions", {})) == []


# ---------------------------------------------------------------- file helpers
def test_size_mismatch(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"12345")
    assert fsutil.size_mismatch(tmp_path, [{"name": "a", "size": 5}]) is None
    assert fsutil.size_mismatch(tmp_path, [{"name": "a", "size": 4}]) == (tmp_path / "a", 5, 4)
    assert fsutil.size_mismatch(tmp_path, [{"name": "a", "size": 5}, {"name": "b", "size": 1}]) == (
        tmp_path / "b",
        None,
        1,
    )


def test_existing_dir(tmp_path: Path) -> None:
    assert fsutil.existing_dir(tmp_path, "output.dir", "a directory") is True
    assert fsutil.existing_dir(tmp_path / "missing", "output.dir", "a directory") is False
    (tmp_path / "f").write_text("x")
    with pytest.raises(BadInput, match=r"output.dir .*/f: expected a directory, found a file"):
        fsutil.existing_dir(tmp_path / "f", "output.dir", "a directory")
