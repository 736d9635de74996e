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


def test_a_generated_secret_under_the_earlier_key_gets_kuberays_key_copied() -> None:
    raw = base_spec()
    ref = ray_token_ref(key="auth_token", generate=True)
    ours = ray_token.generated_labels(raw)
    assert ray_token.key_to_copy(ref, raw, {**ours, "extra": "x"}, {"token"}) == "token"
    # already there, or nothing to copy from
    assert ray_token.key_to_copy(ref, raw, ours, {"token", "auth_token"}) is None
    assert ray_token.key_to_copy(ref, raw, ours, {"other"}) is None


def test_a_secret_preflight_did_not_generate_for_this_release_is_never_rewritten() -> None:
    raw = base_spec()
    ours = ray_token.generated_labels(raw)
    ref = ray_token_ref(key="auth_token", generate=True)
    assert ray_token.key_to_copy(ref, raw, None, {"token"}) is None  # the user's own Secret
    another = {**ours, "app.kubernetes.io/instance": "another-release"}
    assert ray_token.key_to_copy(ref, raw, another, {"token"}) is None
    named = ray_token_ref(key="auth_token", generate=False)  # secrets.rayAuth.existingSecret
    assert ray_token.key_to_copy(named, raw, ours, {"token"}) is None
