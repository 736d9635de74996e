"""The Ray token Secret's shape (the API calls of ray_token.ensure run against the testbed's API server:
tests/e2e/test_ray_token_secret.py)."""

from __future__ import annotations

from hooks_testlib import base_spec, ray_token_ref
from miles_hooks.core import ray_token


def test_only_secrets_marked_generate_are_created() -> None:
    raw = base_spec()
    raw["secrets"] = [ray_token_ref(name="named", generate=False), ray_token_ref(generate=True)]
    assert [r["name"] for r in ray_token.to_create(raw)] == ["rt-ray-auth"]


def test_the_secret_holds_the_token_under_its_key_with_the_release_labels() -> None:
    raw = base_spec()
    body = ray_token.secret_body(ray_token_ref(key="tok"), raw, "t0ken")
    assert body["stringData"] == {"tok": "t0ken"}
    assert body["metadata"]["namespace"] == raw["release"]["namespace"]
    assert body["metadata"]["labels"]["app.kubernetes.io/instance"] == raw["release"]["name"]
    assert "t0ken" not in str(body["metadata"])
