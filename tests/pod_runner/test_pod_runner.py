"""The testbed's pod runner and hook journal (ci/cluster/pod_runner.py, ci/cluster/node_journal.py), the parts
that need no testbed: how a Ray worker node is started for a simulated worker pod (env expansion, the start
parameters it keeps, the namespaces it runs in) and what the journal watches. The e2e tier runs all of it
against the real API server."""

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


def worker_pod(start_cmd: str) -> client.V1Pod:
    env = [client.V1EnvVar(name="KUBERAY_GEN_RAY_START_CMD", value=start_cmd)]
    container = client.V1Container(name="ray-worker", image="localhost/miles-standin:testbed", env=env)
    meta = client.V1ObjectMeta(labels={"ray.io/is-ray-node": "yes", "ray.io/node-type": "worker"})
    return client.V1Pod(metadata=meta, spec=client.V1PodSpec(containers=[container]))


def test_a_ray_worker_keeps_the_pods_resources_and_no_more_cpus_than_allowed(tmp_path: Path) -> None:
    workers = pod_runner.RayWorkers(
        node_netns="unused",
        node_ip="10.250.10.2",
        temp_dir=str(tmp_path),
        binds=[],
        work_dir=tmp_path,
        venv_bin=tmp_path,
        cpus=2,
        limit=1,
        port_base=12000,
    )
    generated = (
        "ray start  --address=$FQ_RAY_IP:6379  --num-cpus=16  --num-gpus=8 --metrics-export-port=8080 "
        """--resources='{"rollout": 1}'  --block"""
    )
    pod = worker_pod(generated)
    assert pod_runner.RayWorkers.is_worker(pod)
    # the pod's GPUs and custom resources as KubeRay wrote them; its CPUs capped; its ports the runner's own
    assert workers.start_params(pod) == ["--num-cpus=2", "--num-gpus=8", '--resources={"rollout": 1}']
    assert workers.start_params(worker_pod("ray start --address=x:6379")) == ["--num-cpus=2"]


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
    assert not journal.watches(pod("gpu-0001", "localhost/miles-hooks:testbed", waiting))  # a simulated node
    assert not journal.watches(pod("real-cpu-0", "localhost/miles-standin:testbed", waiting))  # a Ray head
    # the convert pod: the miles image, the hooks copied in by an init container of the hooks image
    convert = pod("real-cpu-0", "localhost/miles-standin:testbed", waiting)
    copy = client.V1Container(name="copy-hooks", image="localhost/miles-hooks:testbed")
    convert.spec.init_containers = [copy]
    assert journal.watches(convert)

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
