"""The testbed's pod runner and hook journal (ci/cluster/pod_runner.py, ci/cluster/node_journal.py), the parts
that need no testbed: the kubelet semantics it imitates for the convert pod, and the namespaces its Ray worker
nodes run in. The e2e tier runs all of it against the real API server."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ci" / "cluster"))
import pod_runner
from node_journal import HookPodJournal


def test_env_expansion_follows_the_kubelet() -> None:
    env = {"A": "x", "B": "$(A)"}
    assert pod_runner.expand_vars("$(A)/$(B)", env) == "x/$(A)"  # one pass, as the kubelet does
    assert pod_runner.expand_vars("$(MISSING) stays", env) == "$(MISSING) stays"
    assert pod_runner.expand_vars("$$(A) is escaped, $$ too", env) == "$(A) is escaped, $ too"


def test_mount_paths_map_whole_path_components_only() -> None:
    pairs = [("/fsx", "/tmp/fsx-local"), ("/fsx/models", "/tmp/models-local"), ("/", "/nowhere")]
    mapped = pod_runner.Runner.map_paths(
        "--load /fsx/models/Qwen --save=/fsx/runs/a /fsx2/x data:/fsx '/fsx/q' http://h/fsx/y", pairs
    )
    assert mapped == (
        "--load /tmp/models-local/Qwen --save=/tmp/fsx-local/runs/a /fsx2/x data:/tmp/fsx-local "
        "'/tmp/fsx-local/q' http://h/fsx/y"
    )
    assert pod_runner.Runner.map_paths("/fsx", []) == "/fsx"


def test_log_lines_are_in_the_cri_format() -> None:
    full, partial = pod_runner.cri_line(b"done\n"), pod_runner.cri_line(b"no newline")
    assert re.fullmatch(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z stdout F done\n", full), full
    assert partial.endswith(b" stdout P no newline\n"), partial


def can_make_namespaces() -> bool:
    return (
        os.geteuid() == 0
        and shutil.which("ip") is not None
        and subprocess.run(["unshare", "--pid", "--fork", "--mount", "true"], check=False).returncode == 0
    )


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and network, PID and mount namespaces")
def test_a_ray_worker_node_runs_as_a_container_would(tmp_path: Path) -> None:
    """pod_like: the node's network namespace, a PID namespace of its own (the host's processes are not
    listed) and the pod's volumes bound at their mount paths, only there."""
    netns = f"miles-unit-{uuid.uuid4().hex[:8]}"
    volume, mount_point = tmp_path / "fsx-local", tmp_path / "fsx"
    volume.mkdir()
    mount_point.mkdir()
    (volume / "spec.json").write_text("{}")
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        script = 'cat "$1"/spec.json; echo; echo "$$"; ls /proc | grep -c "^[0-9]"; ip -o link show | wc -l'
        argv = [*pod_runner.pod_like(netns, [(str(volume), str(mount_point))]), "sh", "-c", script, "sh"]
        out = subprocess.run(
            [*argv, str(mount_point)], capture_output=True, text=True, check=True, timeout=30
        ).stdout.split("\n")
        assert out[0] == "{}"  # the volume, at its mount path
        # a PID namespace of its own (pod_like's shell is PID 1 there) with its own /proc: a handful of
        # processes (the shells, ls, grep), not the host's hundreds
        assert int(out[1]) < 10 and int(out[2]) < 10, out
        assert int(out[3]) == 1, out  # the node's namespace: here a fresh one, with lo alone
        assert not (mount_point / "spec.json").exists()  # bound inside that mount namespace only
        failed = subprocess.run(
            [*pod_runner.pod_like(netns, [(str(tmp_path / "absent"), str(mount_point))]), "true"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert failed.returncode == 1, failed  # a volume that cannot be bound: the container does not start
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and mount namespaces")
def test_the_convert_pods_processes_see_the_claim_at_its_mount_path_only(tmp_path: Path) -> None:
    """in_mount_namespace: what the runner and the tests' seeding run under, so the run spec's storage paths
    resolve as in a pod, and nothing of it shows on the host."""
    claim, mount_point = tmp_path / "claim", tmp_path / "fsx"
    claim.mkdir()
    mount_point.mkdir()
    prefix = pod_runner.in_mount_namespace([(str(claim), str(mount_point))])
    write = subprocess.run(
        [*prefix, "sh", "-c", 'echo seeded > "$1/marker"', "sh", str(mount_point)], check=False
    )
    assert write.returncode == 0
    assert (claim / "marker").read_text() == "seeded\n" and not (mount_point / "marker").exists()
    assert pod_runner.in_mount_namespace([]) == []  # nothing bound: the command runs as it is


def pod(node: str, image: str, phase_state: client.V1ContainerState) -> client.V1Pod:
    container = client.V1Container(name="submit", image=image, command=["miles-hooks", "submit"], args=["-v"])
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="miles-submit-x", namespace="ns", uid="u1", labels={"a": "b"}),
        spec=client.V1PodSpec(node_name=node, containers=[container]),
        status=client.V1PodStatus(
            container_statuses=[
                client.V1ContainerStatus(
                    name="submit", image=image, image_id="", ready=False, restart_count=0, state=phase_state
                )
            ]
        ),
    )


def test_the_journal_watches_hook_pods_of_the_real_node_only(tmp_path: Path) -> None:
    written: list[dict[str, object]] = []
    journal = HookPodJournal(
        client.CoreV1Api(),
        tmp_path,
        re.compile("miles-hooks"),
        lambda node: node.startswith("gpu-"),
        written.append,
    )
    waiting = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="ContainerCreating"))
    assert journal.watches(pod("real-cpu-0", "localhost/miles-hooks:testbed", waiting))
    assert not journal.watches(pod("gpu-0001", "localhost/miles-hooks:testbed", waiting))  # the runner's
    assert not journal.watches(pod("real-cpu-0", "localhost/miles-standin:testbed", waiting))  # a Ray head

    terminated = client.V1ContainerStateTerminated(exit_code=3, reason="Error")
    seen = pod("real-cpu-0", "localhost/miles-hooks:testbed", client.V1ContainerState(terminated=terminated))
    journal.first_seen["u1"] = 100.0
    entry = journal.entry(seen, seen.spec.containers[0], terminated, tmp_path / "submit.log", 107.5)
    assert entry == {
        "namespace": "ns",
        "pod": "miles-submit-x",
        "uid": "u1",
        "container": "submit",
        "image": "localhost/miles-hooks:testbed",
        "argv": ["miles-hooks", "submit", "-v"],
        "start": 100.0,
        "end": 107.5,
        "exitCode": 3,
        "reason": "Error",
        "labels": {"a": "b"},
        "log": str(tmp_path / "submit.log"),
        "node": "real-cpu-0",
    }
    assert written == []  # nothing is written before the kubelet reports an end
