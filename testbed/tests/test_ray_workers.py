"""The local Ray workers that stand in for simulated worker pods: what they keep of KubeRay's generated
start command, how the head's address is read from it, and the namespaces a worker runs in (the e2e tier
joins them to real heads through the real API server)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from miles_testbed import ray_workers
from miles_testbed.ray_workers import WorkerSettings

GENERATED = (
    "ray start  --address=$FQ_RAY_IP:6379  --num-cpus=16  --num-gpus=8 --metrics-export-port=8080 "
    """--resources='{"rollout": 1}'  --block"""
)


def worker_pod(start_cmd: str, node_type: str = "worker") -> client.V1Pod:
    env = [client.V1EnvVar(name="KUBERAY_GEN_RAY_START_CMD", value=start_cmd)]
    container = client.V1Container(name="ray-worker", image="localhost/miles-standin:testbed", env=env)
    meta = client.V1ObjectMeta(
        name="miles-gpu-abc",
        namespace="team-a",
        labels={"ray.io/is-ray-node": "yes", "ray.io/node-type": node_type},
    )
    return client.V1Pod(metadata=meta, spec=client.V1PodSpec(containers=[container]))


def test_only_kuberay_worker_pods_get_a_ray_worker() -> None:
    assert ray_workers.is_worker(worker_pod(GENERATED))
    assert not ray_workers.is_worker(worker_pod(GENERATED, node_type="head"))
    assert not ray_workers.is_worker(client.V1Pod(metadata=client.V1ObjectMeta(labels={"a": "b"})))


def test_a_ray_worker_keeps_the_pods_resources_and_no_more_cpus_than_allowed() -> None:
    generated = ray_workers.generated_start(worker_pod(GENERATED))
    assert generated == GENERATED
    # the pod's GPUs and custom resources as KubeRay wrote them; its CPUs capped; its ports the runner's own
    assert ray_workers.start_params(generated, 2) == [
        "--num-cpus=2",
        "--num-gpus=8",
        '--resources={"rollout": 1}',
    ]
    assert ray_workers.start_params(generated, 64) == [
        "--num-cpus=16",
        "--num-gpus=8",
        '--resources={"rollout": 1}',
    ]
    assert ray_workers.start_params("ray start --num-cpus=0.5", 4) == ["--num-cpus=1"]  # at least one CPU
    assert ray_workers.start_params("ray start --address=x:6379", 2) == ["--num-cpus=2"]


def test_the_head_address_is_the_generated_one_with_the_containers_shell_variables() -> None:
    env = {"FQ_RAY_IP": "miles-head-svc.team-a.svc.cluster.local"}
    address = ray_workers.start_address(GENERATED, env)
    assert address == "miles-head-svc.team-a.svc.cluster.local:6379"
    assert ray_workers.start_address("ray start --address=${FQ_RAY_IP}:6379", env) == address
    assert ray_workers.start_address("ray start --address=$UNSET:6379", env) == "$UNSET:6379"
    assert ray_workers.start_address("ray start --block", env) is None


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("miles-head-svc.team-a.svc.cluster.local:6379", ("team-a", "miles-head-svc", 6379)),
        ("miles-head-svc.team-b.svc:6379", ("team-b", "miles-head-svc", 6379)),
        ("miles-head-svc.team-b:6380", ("team-b", "miles-head-svc", 6380)),
        ("miles-head-svc:6379", ("default-ns", "miles-head-svc", 6379)),  # the pod's own namespace
        ("10.0.0.5:6379", None),  # no head Service: nothing to resolve
        ("miles-head-svc", None),  # no port
    ],
)
def test_the_head_service_of_an_address(address: str, expected: tuple[str, str, int] | None) -> None:
    assert ray_workers.head_service(address, "default-ns") == expected


def plain_settings(tmp_path: Path) -> WorkerSettings:
    """Settings of a pod runner whose workers run in namespace "node", their venv under ``tmp_path``."""
    return WorkerSettings(
        node_netns="node",
        node_ip="10.250.10.2",
        temp_dir="/tmp/ray-workers",
        binds=[],
        work_dir=tmp_path,
        venv_bin=tmp_path / "bin",
        cpus=2,
        limit=4,
        port_base=12000,
    )


def test_each_worker_gets_its_own_ports_tmp_and_the_pods_labels(tmp_path: Path) -> None:
    settings = plain_settings(tmp_path)
    argv = ray_workers.ray_start_argv(settings, worker_pod(GENERATED), "10.250.10.7:6379", slot=1)
    assert argv[:4] == [str(tmp_path / "bin" / "ray"), "start", "--block", "--disable-usage-stats"]
    options = dict(a.split("=", 1) for a in argv[4:])
    assert options["--address"] == "10.250.10.7:6379"
    assert options["--node-ip-address"] == "10.250.10.2"
    assert options["--temp-dir"] == "/tmp/ray"  # in the worker's own /tmp, a host dir per slot
    assert ray_workers.worker_tmp(settings, 1) == Path("/tmp/ray-workers/worker-1")
    # slot 1's range: 12100..12199, clear of slot 0's and slot 2's
    ports = [int(options[k]) for k in options if k.endswith("-port")]
    assert min(ports) >= 12100 and max(ports) <= 12199, options
    assert json.loads(options["--labels"]) == {
        ray_workers.NODE_LABEL_NAMESPACE: "team-a",
        ray_workers.NODE_LABEL_POD: "miles-gpu-abc",
    }
    assert options["--num-gpus"] == "8" and options["--num-cpus"] == "2"


def can_make_namespaces() -> bool:
    return (
        os.geteuid() == 0
        and shutil.which("ip") is not None
        and subprocess.run(["unshare", "--pid", "--fork", "--mount", "true"], check=False).returncode == 0
    )


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of the test's own, standing in for the real node's."""
    name = f"miles-unit-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and network, PID and mount namespaces")
def test_a_ray_worker_node_runs_as_a_container_would(tmp_path: Path, netns: str) -> None:
    """pod_like: the node's network namespace, a PID namespace of its own (the host's processes are not
    listed) and the pod's volumes bound at their mount paths, only there."""
    volume, mount_point = tmp_path / "fsx-local", tmp_path / "fsx"
    volume.mkdir()
    mount_point.mkdir()
    (volume / "spec.json").write_text("{}")
    script = 'cat "$1"/spec.json; echo; echo "$$"; ls /proc | grep -c "^[0-9]"; ip -o link show | wc -l'
    argv = [*ray_workers.pod_like(netns, [(str(volume), str(mount_point))]), "sh", "-c", script, "sh"]
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
        [*ray_workers.pod_like(netns, [(str(tmp_path / "absent"), str(mount_point))]), "true"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert failed.returncode == 1, failed  # a volume that cannot be bound: the container does not start


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and network, PID and mount namespaces")
def test_a_worker_has_its_own_tmp_and_leaves_nothing_in_the_hosts(tmp_path: Path, netns: str) -> None:
    """Bound last, the worker's own /tmp takes what the worker and its jobs write there (a driver killed
    before its cleanup included), while a volume whose source lies under the host's /tmp is still bound."""
    # the volume's source lies under the host's /tmp (tmp_path), its mount point outside it, as /fsx does
    own_tmp, volume, mount_point = tmp_path / "worker-0", tmp_path / "fsx-local", Path("/mnt")
    for d in (own_tmp, volume):
        d.mkdir()
    (volume / "spec.json").write_text("{}")
    marker = f"scratch-{uuid.uuid4().hex}"
    binds = [(str(volume), str(mount_point)), (str(own_tmp), "/tmp")]
    script = f'mkdir /tmp/{marker} && cat "$1"/spec.json'
    out = subprocess.run(
        [*ray_workers.pod_like(netns, binds), "sh", "-c", script, "sh", str(mount_point)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out == "{}"
    assert (own_tmp / marker).is_dir()
    assert not Path("/tmp", marker).exists()


@pytest.mark.skipif(not can_make_namespaces(), reason="needs root and network, PID and mount namespaces")
def test_a_checkout_in_the_hosts_tmp_stays_visible_under_the_workers_own_tmp(
    tmp_path: Path, netns: str
) -> None:
    """A checkout cloned into the host's /tmp holds the Ray venv the worker runs: the worker's own /tmp must
    not hide it (it did: `ray` was "No such file or directory" and no worker started), while what the worker
    writes to /tmp still lands in its own."""
    checkout, own_tmp = tmp_path / "clone", tmp_path / "ray" / "worker-0"
    (checkout / "bin").mkdir(parents=True)
    (checkout / "bin" / "ray").write_text("#!/bin/sh\necho ray-from-the-checkout\n")
    (checkout / "bin" / "ray").chmod(0o755)
    own_tmp.mkdir(parents=True)
    settings = ray_workers.WorkerSettings(
        node_netns=netns,
        node_ip="10.250.10.2",
        temp_dir=str(own_tmp.parent),
        binds=[],
        work_dir=tmp_path,
        venv_bin=checkout / "bin",
        cpus=2,
        limit=1,
        port_base=12000,
        host_paths=[str(checkout)],
    )
    binds = ray_workers.tmp_binds(settings, own_tmp)
    assert binds[-1] == (str(own_tmp), "/tmp")  # the worker's /tmp, last
    marker = f"scratch-{uuid.uuid4().hex}"
    script = f'"$1"/bin/ray && mkdir /tmp/{marker}'
    out = subprocess.run(
        [*ray_workers.pod_like(netns, binds), "sh", "-c", script, "sh", str(checkout)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert out.strip() == "ray-from-the-checkout"
    assert (own_tmp / marker).is_dir() and not Path("/tmp", marker).exists()
    # a checkout outside the host's /tmp needs nothing
    outside = dataclasses.replace(settings, host_paths=["/work/checkout"])
    assert ray_workers.tmp_binds(outside, own_tmp) == [(str(own_tmp), "/tmp")]


class _PodsThatExist:
    """The slice of the pod runner restart_after_exit asks: whether the pod is still there."""

    def __init__(self, exists: bool) -> None:
        self.exists = exists

    def pod_exists(self, pod: client.V1Pod) -> bool:
        return self.exists


@pytest.mark.parametrize(
    ("pod_exists", "stopped_on_purpose", "restarted"),
    [(True, False, True), (False, False, False), (True, True, False)],
    ids=["head-lost", "pod-deleted", "stopped"],
)
def test_a_joined_worker_that_exits_is_restarted_as_a_container_would_be(
    tmp_path: Path, pod_exists: bool, stopped_on_purpose: bool, restarted: bool
) -> None:
    """A raylet whose head is lost exits; KubeRay's worker pod then restarts its container, which joins the
    head its address names by then. A worker stopped because its pod went is never started again."""
    settings = plain_settings(tmp_path)
    workers = ray_workers.RayWorkers(settings, _PodsThatExist(pod_exists))  # type: ignore[arg-type]
    started: list[str] = []
    workers.start = lambda pod: started.append(pod.metadata.name)  # type: ignore[method-assign]
    pod = worker_pod(GENERATED)
    assert pod.metadata is not None
    pod.metadata.uid = "uid-1"
    exited = subprocess.Popen(["true"], process_group=0)
    workers.procs["uid-1"] = (exited, 0)
    if stopped_on_purpose:
        del workers.procs["uid-1"]
    workers.restart_after_exit(pod, exited)
    assert started == (["miles-gpu-abc"] if restarted else [])
    assert "uid-1" not in workers.procs
