"""submit and status against the real local Ray cluster of conftest.py (no mocks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from miles_hooks.core import rayjobs
from miles_hooks.core import runspec as specmod
from miles_hooks.steps import status, submit
from ray.job_submission import JobStatus, JobSubmissionClient
from ray_testlib import LocalRay, make_spec, stand_in_run_identity, write_spec


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "miles_hooks", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def release_jobs(client: JobSubmissionClient, release: str) -> list[Any]:
    return [j for j in client.list_jobs() if (j.metadata or {}).get(submit.META_RELEASE) == release]


def wait_state(client: JobSubmissionClient, sid: str, states: set[str], timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = str(client.get_job_status(sid).value)
        if state in states:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {sid} stayed {state}, expected one of {states}")


def test_first_submit_creates_one_job_and_repeat_creates_none(local_ray: LocalRay, tmp_path: Path) -> None:
    args = ["--wandb-group", "grp with space", "--note", 'it\'s "quoted" $HOME *', "--sleep", "0"]
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-once", args=args)
    spec_path = write_spec(tmp_path / "run.json", raw)
    client = JobSubmissionClient(local_ray.dashboard_url)
    sid = specmod.submission_id(raw)

    started = time.monotonic()
    first = cli("submit", "--spec", str(spec_path), "--json")
    submit_seconds = time.monotonic() - started
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["created"] is True and result["submissionId"] == sid
    print(f"submit wall time (new job, incl. interpreter): {submit_seconds:.2f}s")

    jobs = release_jobs(client, "rt-once")
    assert [j.submission_id for j in jobs] == [sid]
    info = client.get_job_info(sid)
    assert info.runtime_env["env_vars"]["PROMETHEUS_PORT"] == "9090"
    assert "HF_TOKEN" not in json.dumps(info.runtime_env)

    assert wait_state(client, sid, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED", client.get_job_logs(sid)
    # entrypoint resources {"gpu_node": 0.001}: the driver must run on the gpu_node worker, not the head
    from ray.util.state import list_nodes

    nodes = {n.node_id: n for n in list_nodes(address=local_ray.dashboard_url)}
    driver_node = nodes[client.get_job_info(sid).driver_node_id]
    assert "gpu_node" in driver_node.resources_total and not driver_node.is_head_node
    logs = client.get_job_logs(sid)
    argv_line = next(line for line in logs.splitlines() if line.startswith("ARGV="))
    assert json.loads(argv_line[5:]) == ["--num-layers", "2", "--hidden-size", "64", *args]

    again = cli("submit", "--spec", str(spec_path), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is False
    assert [j.submission_id for j in release_jobs(client, "rt-once")] == [sid]

    record = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert record["submissionId"] == sid
    assert record["images"]["milesDigest"].startswith("sha256:")
    assert record["spec"]["release"]["name"] == "rt-once"
    # the Ray release the cluster runs, not the Jobs API's version ("4" on Ray 2.x)
    import ray

    assert record["ray"]["clusterVersion"] == ray.__version__

    st = cli("status", "--spec", str(spec_path), "--json")
    assert st.returncode == 0, st.stderr
    body = json.loads(st.stdout)
    assert body["job"]["state"] == "SUCCEEDED" and body["gcsHealthy"] is True
    assert any("TRAIN DONE" in line for line in body["logTail"])


def test_release_revision_bump_is_not_a_new_job(local_ray: LocalRay, tmp_path: Path) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-rev")
    bumped = json.loads(json.dumps(raw))
    bumped["release"]["revision"] = 7
    bumped["checks"]["waitReadyTimeoutSeconds"] = 99
    assert specmod.submission_id(raw) == specmod.submission_id(bumped)


def test_changed_spec_restarts_previous_job(local_ray: LocalRay, tmp_path: Path) -> None:
    client = JobSubmissionClient(local_ray.dashboard_url)
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-change", args=["--sleep", "300"])
    path = write_spec(tmp_path / "run.json", raw)
    first = submit.run(specmod.load(path))
    wait_state(client, first["submissionId"], {"RUNNING"})

    changed = json.loads(json.dumps(raw))
    changed["train"]["args"] = ["--sleep", "0", "--lr", "1e-6"]
    changed["release"]["revision"] = 2
    stand_in_run_identity(changed)
    path2 = write_spec(tmp_path / "run2.json", changed)
    second = submit.run(specmod.load(path2))
    assert second["created"] is True and second["submissionId"] != first["submissionId"]
    assert str(client.get_job_status(first["submissionId"]).value) == "STOPPED"
    ids = sorted(j.submission_id for j in release_jobs(client, "rt-change"))
    assert ids == sorted([first["submissionId"], second["submissionId"]])
    record = json.loads(Path(raw["output"]["provenanceFile"]).read_text())
    assert record["submissionId"] == second["submissionId"]
    assert record["previousSubmissions"][-1]["submissionId"] == first["submissionId"]


def test_back_to_a_stopped_spec_runs_it_again_and_stops_the_newer(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    """helm rollback (or an upgrade back): the spec whose job a change stopped is asked for again while the
    newer job runs. Its job runs again under the same id, the newer one is stopped, one job is active."""
    client = JobSubmissionClient(local_ray.dashboard_url)
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-back", args=["--sleep", "300"])
    old_path = write_spec(tmp_path / "old.json", raw)
    old = submit.run(specmod.load(old_path))
    wait_state(client, old["submissionId"], {"RUNNING"})
    changed = json.loads(json.dumps(raw))
    changed["train"]["args"] = ["--sleep", "300", "--lr", "1e-6"]
    stand_in_run_identity(changed)
    new = submit.run(specmod.load(write_spec(tmp_path / "new.json", changed)))
    wait_state(client, new["submissionId"], {"RUNNING"})
    assert str(client.get_job_status(old["submissionId"]).value) == "STOPPED"

    back = cli("submit", "--spec", str(old_path), "--json")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["created"] is True, back.stdout
    assert "submitting it again under the same id" in back.stderr, back.stderr
    assert str(client.get_job_status(new["submissionId"]).value) == "STOPPED"
    assert wait_state(client, old["submissionId"], {"RUNNING", "PENDING"}) in {"RUNNING", "PENDING"}
    active = [
        j.submission_id
        for j in release_jobs(client, "rt-back")
        if str(j.status.value) not in ("STOPPED", "SUCCEEDED", "FAILED")
    ]
    assert active == [old["submissionId"]], active
    record = json.loads(Path(raw["output"]["provenanceFile"]).read_text())
    assert record["submissionId"] == old["submissionId"] and record["createdBySubmit"] is True
    assert record["previousSubmissions"][-1]["submissionId"] == new["submissionId"]
    client.stop_job(old["submissionId"])


def test_a_provenance_write_that_fails_after_submitting_stops_the_job(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    """The output dir took the probe's write, then the record cannot be written (here: a directory stands
    where the file goes). The hook fails, so the release is marked failed: the job it had just started must
    not train on."""
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-prov", args=["--sleep", "60"])
    Path(raw["output"]["provenanceFile"]).mkdir(parents=True)
    spec_path = write_spec(tmp_path / "run.json", raw)
    client = JobSubmissionClient(local_ray.dashboard_url)
    sid = specmod.submission_id(raw)

    res = cli("submit", "--spec", str(spec_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"cannot write the provenance record {raw['output']['provenanceFile']}" in res.stderr, res.stderr
    assert f"job {sid}, submitted moments before, was stopped" in res.stderr, res.stderr
    assert wait_state(client, sid, {"STOPPED", "SUCCEEDED", "FAILED"}) == "STOPPED"


def test_an_output_dir_the_hooks_cannot_write_stops_submit_before_it_submits(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-ro")
    raw["output"]["dir"] = "/proc/miles-no-such-dir"  # refused even to root
    spec_path = write_spec(tmp_path / "run.json", raw)
    client = JobSubmissionClient(local_ray.dashboard_url)

    res = cli("submit", "--spec", str(spec_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "the shared volume refuses writes by UID" in res.stderr, res.stderr
    assert "output.dir /proc/miles-no-such-dir" in res.stderr, res.stderr
    assert release_jobs(client, "rt-ro") == []


def test_changed_spec_with_on_change_fail_is_refused(local_ray: LocalRay, tmp_path: Path) -> None:
    client = JobSubmissionClient(local_ray.dashboard_url)
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-fail", args=["--sleep", "300"])
    raw["submit"]["onChange"] = "fail"
    first = submit.run(specmod.load(write_spec(tmp_path / "a.json", raw)))
    wait_state(client, first["submissionId"], {"RUNNING", "PENDING"})
    changed = json.loads(json.dumps(raw))
    changed["train"]["args"] = ["--sleep", "1"]
    stand_in_run_identity(changed)
    proc = cli("submit", "--spec", str(write_spec(tmp_path / "b.json", changed)))
    assert proc.returncode == 1
    assert "submit.onChange" in proc.stderr and first["submissionId"] in proc.stderr
    assert [j.submission_id for j in release_jobs(client, "rt-fail")] == [first["submissionId"]]
    client.stop_job(first["submissionId"])


def test_submit_killed_right_after_post_then_rerun_leaves_one_job(
    local_ray: LocalRay, tmp_path: Path
) -> None:
    client = JobSubmissionClient(local_ray.dashboard_url)
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-kill", args=["--sleep", "0"])
    path = write_spec(tmp_path / "run.json", raw)
    sid = specmod.submission_id(raw)
    # The provenance record is read right after the POST: as a FIFO with no writer, that read
    # blocks, which holds submit between creating the job and recording it until it is killed.
    provenance = Path(raw["output"]["provenanceFile"])
    provenance.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(provenance)
    proc = subprocess.Popen(
        [sys.executable, "-m", "miles_hooks", "submit", "--spec", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # logged after the POST returned, before the provenance record
        if "job submitted" in line:
            break
    else:
        raise AssertionError(f"submit exited with {proc.wait()} before submitting")
    assert proc.poll() is None, "submit finished although its provenance record cannot be read"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    provenance.unlink()
    assert [j.submission_id for j in release_jobs(client, "rt-kill")] == [sid]

    rerun = cli("submit", "--spec", str(path), "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["created"] is False
    assert [j.submission_id for j in release_jobs(client, "rt-kill")] == [sid]
    assert json.loads(Path(raw["output"]["provenanceFile"]).read_text())["submissionId"] == sid


def test_status_from_a_laptop_asks_the_address_it_is_given(local_ray: LocalRay, tmp_path: Path) -> None:
    """The run spec names the in-cluster Service, which a laptop cannot resolve; `--address` points status at
    a port-forward (here: the local Ray's dashboard) and it finds the job as the test pod would."""
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-laptop", args=["--sleep", "0"])
    sid = submit.run(specmod.load(write_spec(tmp_path / "submit.json", raw)))["submissionId"]
    client = JobSubmissionClient(local_ray.dashboard_url)
    assert wait_state(client, sid, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    raw["rayCluster"]["dashboardUrl"] = "http://rt-laptop-head-svc.ml.svc.cluster.local:8265"
    path = write_spec(tmp_path / "run.json", raw)

    found = cli("status", "--spec", str(path), "--address", local_ray.dashboard_url, "--json")
    assert found.returncode == 0, found.stderr
    body = json.loads(found.stdout)
    assert body["submissionId"] == sid and body["job"]["state"] == "SUCCEEDED" and body["gcsHealthy"] is True

    bad = cli("status", "--spec", str(path), "--address", "127.0.0.1:8265")
    assert bad.returncode == 2, bad.stderr
    assert "--address: expected the Ray dashboard's http(s)://host:port" in bad.stderr
    assert "found '127.0.0.1:8265'" in bad.stderr


def test_status_fails_for_missing_and_failed_jobs(local_ray: LocalRay, tmp_path: Path) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="rt-status", args=["--sleep", "0"])
    path = write_spec(tmp_path / "run.json", raw)
    missing = cli("status", "--spec", str(path))
    assert missing.returncode == 1 and "no Ray job" in missing.stderr

    raw["train"]["modelArgsCommand"] = "true"  # prints nothing: the entrypoint must refuse to train
    path2 = write_spec(tmp_path / "run2.json", raw)
    result = submit.run(specmod.load(path2))
    client = JobSubmissionClient(local_ray.dashboard_url)
    assert wait_state(client, result["submissionId"], {"SUCCEEDED", "FAILED"}) == "FAILED"
    assert "printed nothing" in client.get_job_logs(result["submissionId"])
    failed = cli("status", "--spec", str(path2), "--json")
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["job"]["state"] == JobStatus.FAILED.value

    # docs/day2.md "My job died": a FAILED job is never retried silently; once its record is deleted
    # (`ray job delete`), the same spec is submitted again under the same id
    sid = result["submissionId"]
    again = cli("submit", "--spec", str(path2), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    assert "has FAILED" in again.stderr, again.stderr
    rayjobs.delete_settled(client, local_ray.dashboard_url, sid)
    resubmitted = submit.run(specmod.load(path2))
    assert resubmitted["created"] is True and resubmitted["submissionId"] == sid
    assert wait_state(client, sid, {"SUCCEEDED", "FAILED"}) == "FAILED"


def test_status_reports_unreachable_dashboard(tmp_path: Path) -> None:
    from ray_testlib import free_port

    raw = make_spec(tmp_path, f"http://127.0.0.1:{free_port()}", release="rt-down")
    result = status.collect(specmod.load(write_spec(tmp_path / "run.json", raw)), settle=1.0)
    assert result["gcsHealthy"] is False
    assert status.problems(result) and "GCS not healthy" in status.problems(result)[0]


@pytest.mark.parametrize("bad", ["rt-once"])
def test_submit_dashboard_unreachable_is_check_failed(tmp_path: Path, bad: str) -> None:
    from ray_testlib import free_port

    raw = make_spec(tmp_path, f"http://127.0.0.1:{free_port()}", release=bad)
    proc = cli("submit", "--spec", str(write_spec(tmp_path / "run.json", raw)))
    assert proc.returncode == 1 and "not reachable" in proc.stderr
