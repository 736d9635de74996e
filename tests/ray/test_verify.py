"""verify against the real local Ray cluster (head with 0 CPUs, one gpu_node worker with 1 GPU)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from miles_hooks.core import rayjobs
from miles_hooks.steps import verify
from ray.job_submission import JobSubmissionClient
from ray_testlib import LocalRay, make_spec, write_spec


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "miles_hooks", *args], capture_output=True, text=True, timeout=300, check=False
    )


def verify_jobs(client: JobSubmissionClient) -> list[Any]:
    return [j for j in client.list_jobs() if "miles.verifyFor" in (j.metadata or {})]


def test_verify_passes_on_a_matching_cluster(local_ray: LocalRay, tmp_path: Path) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rv-ok")
    proc = cli("verify", "--spec", str(write_spec(tmp_path / "run.json", raw)), "--json", "--timeout", "120")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["workers"] == 1 and out["gpusProbed"] is True and out["problems"] == []
    (probe,) = out["probe"].values()
    assert len(probe["gpu_ids"]) == 1 and probe["ray_version"] == raw["rayCluster"]["rayVersion"]
    assert verify_jobs(JobSubmissionClient(local_ray.dashboard_url)) == []  # the probe job is cleaned up


def test_verify_names_every_mismatch(local_ray: LocalRay, tmp_path: Path) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rv-bad")
    raw["rayCluster"]["rayVersion"] = "2.0.0"
    raw["topology"]["workerReplicas"] = 2
    raw["topology"]["gpusPerWorker"] = 8
    spec = str(write_spec(tmp_path / "run.json", raw))
    proc = cli("verify", "--spec", spec, "--timeout", "60", "--join-timeout", "5")
    assert proc.returncode == 1
    assert "rayCluster.rayVersion" in proc.stderr
    # the missing worker is waited for (a head's workers rejoin it a minute after it was replaced), then named
    assert "waiting for the GPU workers to join the Ray head" in proc.stderr
    assert "expected 2 alive worker(s)" in proc.stderr
    assert "expected 8 (topology.gpusPerWorker)" in proc.stderr


def test_verify_head_with_gpu_expected(local_ray: LocalRay, tmp_path: Path) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rv-head")
    raw["rayCluster"]["headGpus"] = 1
    proc = cli("verify", "--spec", str(write_spec(tmp_path / "run.json", raw)), "--timeout", "60")
    assert proc.returncode == 1 and "rayCluster.head.gpus" in proc.stderr


def test_verify_runs_gpu_checks_on_each_worker(local_ray: LocalRay, tmp_path: Path) -> None:
    """The worker has no real GPU here: the GPU checks must run there and fail, naming the worker."""
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rv-gpu")
    raw["checks"]["gpu"]["enabled"] = True
    proc = cli("verify", "--spec", str(write_spec(tmp_path / "run.json", raw)), "--timeout", "120")
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"worker \S+ \(\w+\): GPU checks failed: .+", proc.stderr), proc.stderr


def test_node_problems_pure() -> None:
    raw = json.loads((Path(__file__).parents[1] / "fixtures" / "run-spec.json").read_text())
    head = {
        "node_id": "h",
        "node_ip": "10.0.0.1",
        "state": "ALIVE",
        "is_head_node": True,
        "resources_total": {"CPU": 0, "memory": 1},
    }
    worker = {
        "node_id": "w",
        "node_ip": "10.0.0.2",
        "state": "ALIVE",
        "is_head_node": False,
        "resources_total": {"CPU": 96, "GPU": 8, "gpu_node": 1},
    }
    dead = {**worker, "node_id": "d", "state": "DEAD"}
    problems, workers = verify.node_problems([head, worker, dead], raw)
    assert problems == [] and [w["node_id"] for w in workers] == ["w"]
    cpu_head = {**head, "resources_total": {"CPU": 4}}
    plain = {**worker, "node_id": "p", "resources_total": {"CPU": 8, "GPU": 8}}
    problems, _ = verify.node_problems([cpu_head, worker, plain], raw)
    assert any("CPU=4" in p for p in problems)
    assert any("no 'gpu_node' resource" in p for p in problems)
    assert verify.version_problems("2.60.0", {"rayCluster": {"rayVersion": "2.60.0"}}) == []


def test_a_finished_job_deleted_by_delete_settled_stays_gone(local_ray: LocalRay) -> None:
    """Ray's job manager writes a FAILED record back ("Job supervisor actor died") for a job deleted while
    its supervisor actor still lived: deleting right after the job ends brought the record back every
    time here (6 of 6), and verify's probe jobs piled up under Argo CD, which reruns verify on every
    sync. verify deletes its probe job with rayjobs.delete_settled."""
    from ray.dashboard.modules.job.job_manager import JobManager

    client = JobSubmissionClient(local_ray.dashboard_url)
    sid = client.submit_job(entrypoint="true", metadata={"miles.verifyFor": "rv-settle"})
    assert rayjobs.wait_terminal(client, sid, 120) == "SUCCEEDED"
    rayjobs.delete_settled(client, local_ray.dashboard_url, sid)
    assert not rayjobs.supervisor_alive(local_ray.dashboard_url, sid)
    for _ in range(3):  # across the job manager's checks, by Ray's own period
        assert rayjobs.get_job(client, sid) is None
        time.sleep(JobManager.JOB_MONITOR_LOOP_PERIOD_S)
