"""The simulated nodes' shapes, from the settings testbed/config.sh exports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from miles_testbed.nodes import SettingError, node_list


def test_gpu_nodes_look_like_hyperpod_p5en_and_cpu_nodes_form_the_cpu_pool() -> None:
    nodes = node_list({"NODES": "3", "CPU_NODES": "1", "GPU_PER_NODE": "4"})["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["cpu-000", "gpu-0000", "gpu-0001", "gpu-0002"]
    cpu, gpu = nodes[0], nodes[1]
    assert all(n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"} for n in nodes)
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert gpu["metadata"]["labels"]["nvidia.com/gpu.count"] == "4"
    assert gpu["metadata"]["labels"]["sagemaker.amazonaws.com/instance-group-name"] == "gpu-p5en"
    assert gpu["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert cpu["spec"]["taints"] == [] and "nvidia.com/gpu" not in cpu["status"]["allocatable"]
    assert cpu["metadata"]["labels"]["testbed.miles.dev/pool"] == "cpu"


def test_arguments_win_over_the_environment_and_nodes_can_be_added_later() -> None:
    nodes = node_list({"NODES": "100"}, gpu_nodes=2, cpu_nodes=0, start_index=10)["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-0010", "gpu-0011"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NODES": "two"}, "NODES: expected an integer >= 0, got 'two'"),
        ({"GPU_PER_NODE": "-1"}, "GPU_PER_NODE: expected an integer >= 0, got '-1'"),
        ({"GPU_NODE_MEMORY": "2TB"}, "GPU_NODE_MEMORY: expected a Kubernetes quantity .*, got '2TB'"),
        ({"NODES": "5001"}, "NODES: expected at most 5000 .*, got 5001"),
    ],
)
def test_a_bad_setting_is_named_with_what_was_expected(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingError, match=message):
        node_list(env)


def test_the_command_prints_a_list_or_exits_2_naming_the_setting() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "miles_testbed.nodes", "--gpu-nodes", "1", "--cpu-nodes", "1"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert len(json.loads(ok.stdout)["items"]) == 2
    bad = subprocess.run(
        [sys.executable, "-m", "miles_testbed.nodes"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "CPU_NODE_CPU": "lots"},
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "CPU_NODE_CPU: expected a Kubernetes quantity" in bad.stderr
