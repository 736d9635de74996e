"""A container's environment as the kubelet resolves it (the Ray workers join their head with it). The e2e
tier resolves real pods' env against the real API server; here the ConfigMaps and Secrets are plain dicts."""

from __future__ import annotations

import pytest
from kubernetes import client

from miles_testbed.kubelet_env import EnvError, container_env, expand_vars

DATA = {
    ("ConfigMap", "ns", "settings"): {"MODE": "token", "ADDRESS": "head:6379"},
    ("Secret", "ns", "ray-auth"): {"token": "s3cr3t"},
}


def lookup(kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
    found = DATA.get((kind, namespace, name))
    if found is None and not optional:
        raise EnvError(f'{kind.lower()} "{name}" not found')
    return found


def key_ref(kind: str, name: str, key: str, optional: bool = False) -> client.V1EnvVarSource:
    if kind == "Secret":
        return client.V1EnvVarSource(
            secret_key_ref=client.V1SecretKeySelector(name=name, key=key, optional=optional)
        )
    return client.V1EnvVarSource(
        config_map_key_ref=client.V1ConfigMapKeySelector(name=name, key=key, optional=optional)
    )


def test_env_expansion_follows_the_kubelet() -> None:
    env = {"A": "x", "B": "$(A)"}
    assert expand_vars("$(A)/$(B)", env) == "x/$(A)"  # one pass, as the kubelet does
    assert expand_vars("$(MISSING) stays", env) == "$(MISSING) stays"
    assert expand_vars("$$(A) is escaped, $$ too", env) == "$(A) is escaped, $ too"


def test_env_from_first_then_env_in_order_with_references() -> None:
    container = client.V1Container(
        name="ray-worker",
        env_from=[
            client.V1EnvFromSource(config_map_ref=client.V1ConfigMapEnvSource(name="settings"), prefix="CM_"),
            client.V1EnvFromSource(secret_ref=client.V1SecretEnvSource(name="absent", optional=True)),
        ],
        env=[
            client.V1EnvVar(name="RAY_AUTH_TOKEN", value_from=key_ref("Secret", "ray-auth", "token")),
            client.V1EnvVar(name="URL", value="ray://$(CM_ADDRESS)/$(LATER)"),
            client.V1EnvVar(name="LATER", value="x"),
            client.V1EnvVar(name="CM_MODE", value="overridden"),
            client.V1EnvVar(
                name="OPTIONAL", value_from=key_ref("ConfigMap", "settings", "nope", optional=True)
            ),
            client.V1EnvVar(
                name="POD_IP",
                value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path="status.podIP")
                ),
            ),
        ],
    )
    assert container_env("ns", container, lookup) == {
        "CM_MODE": "overridden",
        "CM_ADDRESS": "head:6379",
        "RAY_AUTH_TOKEN": "s3cr3t",
        "URL": "ray://head:6379/$(LATER)",  # only what is defined before it
        "LATER": "x",
    }


@pytest.mark.parametrize(
    ("var", "message"),
    [
        (
            client.V1EnvVar(name="T", value_from=key_ref("Secret", "ray-auth", "auth_token")),
            "couldn't find key auth_token in Secret ns/ray-auth",
        ),
        (client.V1EnvVar(name="T", value_from=key_ref("Secret", "gone", "token")), 'secret "gone" not found'),
    ],
)
def test_a_missing_required_reference_stops_the_container(var: client.V1EnvVar, message: str) -> None:
    with pytest.raises(EnvError, match=message):
        container_env("ns", client.V1Container(name="c", env=[var]), lookup)
