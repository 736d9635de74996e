"""The Ray containers' command, run by the real bash: it raises the open-files limit for the process
that becomes raylet and execs KubeRay's generated `ray start` with its quoting intact (the worker's
`--resources="{\\"gpu_node\\": 1}"`). A recording program stands in for the `ray` executable only:
what is under test is our shell command, and a real `ray start` would start a cluster on this shared
machine. KUBERAY_GEN_RAY_START_CMD below has the layout KubeRay's convertParamMap produces (the same function
in 1.5 and 1.6).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
import yaml
from chartlib import CHART, KUBE_VERSION, run, tool

GENERATED = (
    "ray start  --address=miles-head-svc.ns.svc.cluster.local:6379  --block  --num-gpus=8 "
    ' --resources="{\\"gpu_node\\": 1}" '
)


def worker_args(limit: int) -> str:
    out = run(
        [
            tool("helm4"),
            "template",
            "miles",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "-s",
            "templates/raycluster/raycluster.yaml",
            "--set",
            f"rayCluster.workers.openFilesLimit={limit}",
        ]
    ).stdout
    rc = yaml.safe_load(out)
    container = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-c", "--"]
    return container["args"][0]


@pytest.fixture
def fake_ray(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.json"
    script = bin_dir / "ray"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, resource, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps("
        "{'argv': sys.argv[1:], 'nofile': resource.getrlimit(resource.RLIMIT_NOFILE)}))\n"
    )
    script.chmod(0o755)
    return bin_dir, record


def _bash(args: str, bin_dir) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", KUBERAY_GEN_RAY_START_CMD=GENERATED)
    return subprocess.run(
        ["/bin/bash", "-c", "--", args], capture_output=True, text=True, env=env, check=False
    )


def test_raises_the_limit_and_keeps_kuberay_quoting(fake_ray):
    bin_dir, record = fake_ray
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = min(hard, 16384) if hard != resource.RLIM_INFINITY else 16384
    res = _bash(worker_args(limit), bin_dir)
    assert res.returncode == 0, res.stderr
    seen = json.loads(record.read_text())
    assert seen["argv"][-1] == '--resources={"gpu_node": 1}'
    assert seen["argv"][:2] == ["start", "--address=miles-head-svc.ns.svc.cluster.local:6379"]
    assert seen["nofile"][0] == limit
    assert f"open-files limit {limit}" in res.stdout


def test_refuses_to_start_ray_when_the_limit_cannot_be_raised(fake_ray):
    bin_dir, record = fake_ray
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probe = subprocess.run(["/bin/bash", "-c", f"ulimit -n {hard + 1}"], capture_output=True, check=False)
    if hard == resource.RLIM_INFINITY or probe.returncode == 0:
        pytest.skip("this process may raise its hard open-files limit (CAP_SYS_RESOURCE)")
    res = _bash(worker_args(hard + 1), bin_dir)
    assert res.returncode == 1
    assert (
        "cannot raise the open-files limit" in res.stderr
        and "rayCluster.workers.openFilesLimit" in res.stderr
    )
    assert not record.exists(), "ray must not start with the default limit"
