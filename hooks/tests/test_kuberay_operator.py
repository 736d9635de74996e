"""The running KubeRay operator as its pod describes it: version from the image tag, and KubeRay 1.7's
RayJob status-check timeout, which preflight weighs against the time a Ray cluster is given to be ready."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from hooks_testlib import base_spec
from miles_hooks.core import kuberay_operator
from miles_hooks.steps import preflight


def operator_pod(image: str, env: list[client.V1EnvVar] | None = None) -> client.V1Pod:
    container = client.V1Container(name="kuberay-operator", image=image, env=env)
    meta = client.V1ObjectMeta(name="kuberay-operator-abc", namespace="kuberay")
    return client.V1Pod(metadata=meta, spec=client.V1PodSpec(containers=[container]))


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("quay.io/kuberay/operator:v1.7.0", (1, 7)),
        ("registry.local:5000/kuberay/operator:1.6.2", (1, 6)),
        ("quay.io/kuberay/operator:v1.7.1-rc.1", (1, 7)),
        ("quay.io/kuberay/operator@sha256:" + "a" * 64, None),
        ("quay.io/kuberay/operator:nightly", None),
    ],
)
def test_the_operators_version_is_its_image_tag(image: str, expected: tuple[int, int] | None) -> None:
    assert kuberay_operator.version(operator_pod(image)) == expected


def rayjob_spec(wait_ready: int = 1800) -> dict[str, Any]:
    raw = base_spec()
    raw["mode"] = "rayJob"
    raw["checks"]["waitReadyTimeoutSeconds"] = wait_ready
    return raw


def test_a_status_check_timeout_shorter_than_a_cluster_may_take_is_a_warning_naming_the_fix() -> None:
    (found,) = preflight.status_check_findings(rayjob_spec(), operator_pod("quay.io/kuberay/operator:v1.7.0"))
    assert found.level == preflight.WARNING
    assert "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS unset: KubeRay's default: 300s" in found.message
    assert "shorter than the 1800s" in found.message and "JobStatusCheckTimeoutExceeded" in found.message
    assert "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS to at least 1800" in found.message


def test_a_long_enough_status_check_timeout_is_reported() -> None:
    env = [client.V1EnvVar(name=kuberay_operator.STATUS_CHECK_ENV, value="3600")]
    pod = operator_pod("quay.io/kuberay/operator:v1.7.0", env)
    (found,) = preflight.status_check_findings(rayjob_spec(), pod)
    assert (
        found.level == preflight.INFO and "RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS=3600: 3600s" in found.message
    )


def test_an_unreadable_status_check_timeout_is_named_not_guessed() -> None:
    ref = client.V1EnvVarSource(config_map_key_ref=client.V1ConfigMapKeySelector(name="c", key="k"))
    pod = operator_pod(
        "quay.io/kuberay/operator:v1.7.0",
        [client.V1EnvVar(name=kuberay_operator.STATUS_CHECK_ENV, value_from=ref)],
    )
    (found,) = preflight.status_check_findings(rayjob_spec(), pod)
    assert found.level == preflight.INFO and "set from a reference" in found.message
    bad = operator_pod("x:v1.7.0", [client.V1EnvVar(name=kuberay_operator.STATUS_CHECK_ENV, value="5m")])
    (found,) = preflight.status_check_findings(rayjob_spec(), bad)
    assert "'5m' is not a whole number of seconds" in found.message


def test_nothing_to_say_before_kuberay_1_7_or_outside_mode_rayjob() -> None:
    assert (
        preflight.status_check_findings(rayjob_spec(), operator_pod("quay.io/kuberay/operator:v1.6.2")) == []
    )
    raw = rayjob_spec()
    raw["mode"] = "rayCluster"
    assert preflight.status_check_findings(raw, operator_pod("quay.io/kuberay/operator:v1.7.0")) == []
