"""mode rayJob on the testbed, against the real KubeRay RayJob controller: helm install creates a RayJob that
owns its RayCluster; the submitter pod (the hooks image's run-job, on the real node) checks the cluster and
submits under the RayJob's id; an attempt that fails on purpose after a checkpoint save (the stand-in
train.py's fail-once marker) is retried by KubeRay on a new cluster, whose job loads that checkpoint; when the
run ends the cluster and its GPU pods go (shutdownAfterJobFinishes) and the RayJob reports success.

A Ray head deleted mid-run (Helm 3) is a failed attempt: the submitter finds the job gone from the new head,
and KubeRay's next attempt, on a new cluster, resumes from the checkpoint. A head deleted after the driver
saved the run's last checkpoint (the stand-in's hold marker keeps that driver from ending) leaves a finished
run: the next attempt trains nothing and the RayJob ends Complete.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
import yaml
from test_lifecycle import leftovers

pytestmark = pytest.mark.cluster

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]
NUM_ROLLOUT = 6
SAVE_INTERVAL = 2  # saves after rollouts 1, 3, 5 (iterations 1, 3, 5, as upstream numbers them)


def rayjob(ns: str) -> dict[str, Any]:
    items = tb.kget("rayjobs.ray.io", ns)["items"]
    assert len(items) == 1, [r["metadata"]["name"] for r in items]
    return dict(items[0])


def ray_pods(ns: str) -> list[str]:
    return [p["metadata"]["name"] for p in tb.kget("pods", ns, selector="ray.io/is-ray-node=yes")["items"]]


def diagnosis(ns: str) -> str:
    """What an operator looks at when the run does not move: the RayJob's status, the pods, the events."""
    status = json.dumps([r.get("status") for r in tb.kget("rayjobs.ray.io", ns)["items"]], indent=1)
    pods = tb.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).out
    events = tb.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False).out
    jobs = tb.kubectl(
        "logs", "-n", ns, "-l", "app.kubernetes.io/component=hook-submitter", "--tail=60", check=False
    )
    return (
        f"RayJob status: {status}\n{pods}\n{events[-3000:]}\nsubmitter: {jobs.out[-3000:]}{jobs.err[-500:]}"
    )


def wait_for(what: str, ns: str, fn: Callable[[], Any], timeout: float) -> Any:
    try:
        return tb.wait_until(what, fn, timeout=timeout, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(ns)}") from exc


def submitter_log(ns: str, name: str) -> str:
    res = tb.kubectl("logs", "-n", ns, f"job/{name}", check=False)
    return res.out if res.rc == 0 else ""


def test_a_failed_attempt_is_retried_on_a_new_cluster_that_resumes_then_the_gpus_are_freed(
    namespace: str, inputs_ready: Callable[..., Any]
) -> None:
    helm, release = "helm4", "miles"
    # the export pod pauses once its weights are written (the stand-in exporter's knob) until this file exists
    resume_export = f"/fsx/runs/e2e-export-resume-{namespace}"
    hooks_env = yaml.safe_load(tb.OVERLAY.read_text())["hooks"]["extraEnv"] + [
        {"name": "HF_EXPORTER_PAUSE_AT", "value": "written"},
        {"name": "HF_EXPORTER_RELEASE", "value": resume_export},
    ]
    extra = [
        "--set", "mode=rayJob",
        "--set", "rayJob.backoffLimit=1",
        "--set", f"recipe.numRollout={NUM_ROLLOUT}",
        "--set", f"recipe.saveInterval={SAVE_INTERVAL}",
        "--set-json", f"hooks.extraEnv={json.dumps(hooks_env)}",
    ]  # fmt: skip
    raw = inputs_ready(COLOCATED, release, namespace, extra)
    tb.host_path(resume_export).unlink(missing_ok=True)
    out_dir = tb.host_path(raw["output"]["dir"])
    checkpoints = tb.host_path(raw["output"]["checkpointDir"])
    marker = out_dir / "testbed-fail-once"
    out_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text("fail the first attempt after its first checkpoint save\n")
    job_id = raw["submit"]["submissionId"]
    assert re.fullmatch(r"miles-[0-9a-f]{12}", job_id), job_id

    started = time.monotonic()
    tb.deploy(helm, "install", release, namespace, COLOCATED, *extra)
    installed = time.monotonic() - started
    assert not tb.kget("rayclusters.ray.io", namespace)["items"] or all(
        rc["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
        for rc in tb.kget("rayclusters.ray.io", namespace)["items"]
    )

    def job_running() -> bool:
        status = rayjob(namespace).get("status") or {}
        return status.get("jobStatus") in ("RUNNING", "SUCCEEDED", "FAILED")

    wait_for("the RayJob's job to start", namespace, job_running, timeout=300)
    to_running = time.monotonic() - started
    first_cluster = (rayjob(namespace).get("status") or {}).get("rayClusterName")

    def ended() -> dict[str, Any] | None:
        status = rayjob(namespace).get("status") or {}
        return status if status.get("jobDeploymentStatus") in ("Complete", "Failed") else None

    status = wait_for("the RayJob to end", namespace, ended, timeout=600)
    ended_at = time.monotonic()
    assert status["jobDeploymentStatus"] == "Complete", json.dumps(status)[:3000]
    assert status["jobStatus"] == "SUCCEEDED", json.dumps(status)[:3000]
    assert status.get("jobId") == job_id

    log = submitter_log(namespace, rayjob(namespace)["metadata"]["name"])
    assert int(status.get("failed") or 0) == 1, json.dumps(status)[:3000]
    assert status.get("rayClusterName") != first_cluster, "the retry ran on the first attempt's cluster"
    assert not marker.exists(), "the first attempt did not fail on purpose"
    assert "loaded checkpoint iteration 1 from" in log and "resuming at rollout 2" in log, log[-4000:]
    assert "checking the cluster before the run" in log, log[-4000:]  # verify ran before training
    # each attempt's driver log stays on the shared volume: the failed attempt's submitter pod, which showed
    # it, went with that attempt's cluster
    driver_logs = sorted(tb.host_path(raw["submit"]["logDir"]).glob(f"{job_id}-*.log"))
    attempts = [p.read_text() for p in driver_logs]
    assert len(attempts) == 2, driver_logs
    assert "failing on purpose after saving iteration 1" in attempts[0], attempts[0][-3000:]
    assert "resuming at rollout 2" in attempts[1], attempts[1][-3000:]
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == str(NUM_ROLLOUT - 1)

    wait_for("the run's Ray pods to go", namespace, lambda: not ray_pods(namespace), timeout=180)
    freed = time.monotonic() - ended_at
    assert not tb.kget("rayclusters.ray.io", namespace)["items"]
    tb.wait_for_no_ray_workers(namespace, 120)

    exported = export_path(raw, namespace, out_dir, resume_export)
    # mode rayJob's hooks: preflight and prepare-data (the image's version report) alone call the API (no
    # wait-ready, no status pod), and they were refused nothing; the submitter's own account read the export
    # template and made one Job from it, nothing else, and was refused nothing
    callers = {"miles-preflight", "miles-prepare-data"}
    assert tb.check_hooks_api_use(namespace, callers) == callers
    submitter = {
        (e["verb"], (e.get("objectRef") or {}).get("resource"), (e.get("responseStatus") or {}).get("code"))
        for e in tb.audit_events(namespace, "miles-submitter")
    }
    assert submitter == {("get", "cronjobs", 200), ("create", "jobs", 201)}, submitter
    # uninstall: the pre-delete cleanup answers for the hooks' own pods, not for the submitter's, which
    # KubeRay's Job owns and the RayJob's deletion takes (waiting for them timed the uninstall out)
    t0 = time.monotonic()
    tb.uninstall_cleanly(helm, release, namespace, leftovers)
    uninstalled = time.monotonic() - t0
    assert uninstalled < 90, f"helm uninstall took {uninstalled:.0f}s"
    print(
        f"\nrayJob ({helm}): install {installed:.1f}s, install start -> job running {to_running:.1f}s, "
        f"job end -> GPU pods gone {freed:.1f}s, attempts failed {status.get('failed') or 0}, "
        f"uninstall {uninstalled:.1f}s; {exported}"
    )


def export_jobs(ns: str) -> dict[str, dict[str, Any]]:
    jobs = tb.kget("jobs.batch", ns, selector="app.kubernetes.io/component=hook-export")["items"]
    return {j["metadata"]["name"]: j for j in jobs}


def job_done(ns: str, name: str) -> dict[str, Any] | None:
    job = export_jobs(ns).get(name) or {}
    conditions = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
    if conditions.get("Failed") == "True":
        logs = tb.kubectl("logs", "-n", ns, f"job/{name}", "--all-containers", check=False).out
        raise AssertionError(f"export Job {name} failed: {json.dumps(job.get('status'))}\n{logs[-3000:]}")
    return job if conditions.get("Complete") == "True" else None


def export_path(raw: dict[str, Any], ns: str, out_dir: Path, resume_export: str) -> str:
    """The run ended: the submitter's export Job exports the last checkpoint; its pod, deleted once its
    weights are written, leaves nothing published, and the Job's next pod publishes it whole; then helm test
    shows it, an older iteration is exported on demand from the template, and a second export of the same
    one is a no-op."""
    hf = out_dir / "hf"
    last = f"iter_{NUM_ROLLOUT - 1:07d}"

    def paused_pod() -> str | None:
        for pod in tb.kget("pods", ns, selector="app.kubernetes.io/component=hook-export")["items"]:
            name = pod["metadata"]["name"]
            if "hf_exporter: paused at written" in tb.kubectl("logs", "-n", ns, name, check=False).out:
                return str(name)
        return None

    started = time.monotonic()
    pod = wait_for("the export pod to write the weights", ns, paused_pod, timeout=300)
    (job_name,) = export_jobs(ns)
    assert any(p.name.startswith(f".{last}.tmp-") for p in hf.iterdir()), list(hf.iterdir())
    assert not (hf / last).exists(), "published before validation"
    tb.kubectl("delete", "pod", "-n", ns, pod, "--wait=true", timeout=120)
    assert not (hf / last).exists(), "a killed exporter published"
    tb.host_path(resume_export).write_text("go on\n")
    wait_for("the export Job's next pod to publish", ns, lambda: job_done(ns, job_name), timeout=300)
    on_end = time.monotonic() - started
    marker = json.loads((hf / last / ".miles-hooks-exported.json").read_text())
    assert marker["source"]["iteration"] == NUM_ROLLOUT - 1, marker
    assert {f["name"] for f in marker["files"]} >= {"config.json", "model.safetensors.index.json"}
    assert sorted(p.name for p in hf.iterdir()) == [last], list(hf.iterdir())  # no staging, no lock left
    provenance = json.loads(tb.host_path(raw["output"]["provenanceFile"]).read_text())
    assert [e["iteration"] for e in provenance["exports"]] == [NUM_ROLLOUT - 1]

    test = tb.helm("helm4", "test", "miles", "-n", ns, "--timeout", "5m", "--logs", check=False)
    said = test.out + test.err
    assert f"export         : {last} as Hugging Face safetensors at {raw['export']['dir']}/{last}" in said, (
        said[-3000:]
    )

    # on demand, as docs/export.md shows: a Job from the template, with the iteration set
    template = raw["export"]["jobTemplate"]
    from_template = ["create", "job", "-n", ns, "export-iter-1", f"--from=cronjob/{template}"]
    job = tb.kubectl(*from_template, "--dry-run=client", "-o", "yaml").out
    set_env = ["set", "env", "--local", "-f", "-", "MILES_HOOKS_EXPORT_ITERATION=1", "-o", "yaml"]
    job = tb.run([str(tb.TOOLS_BIN / "kubectl"), *set_env], stdin=job).out
    tb.kubectl_apply(job)
    t0 = time.monotonic()
    wait_for("the on-demand export of iteration 1", ns, lambda: job_done(ns, "export-iter-1"), timeout=300)
    older = time.monotonic() - t0
    assert (hf / "iter_0000001" / ".miles-hooks-exported.json").is_file()
    tb.kubectl("create", "job", "-n", ns, "export-again", f"--from=cronjob/{template}")
    t0 = time.monotonic()
    wait_for("the second export of the last iteration", ns, lambda: job_done(ns, "export-again"), timeout=300)
    again = time.monotonic() - t0
    log = tb.kubectl("logs", "-n", ns, "job/export-again", check=False).out
    assert "this iteration is exported already; nothing to do" in log, log[-3000:]
    return (
        f"export at the run's end (a pod killed mid-way) {on_end:.0f}s, on demand {older:.0f}s, "
        f"again {again:.0f}s"
    )


NUM_ROLLOUT_LOST_HEAD = 4


def test_a_lost_head_is_a_failed_attempt_the_next_resumes_and_a_finished_run_ends_complete(
    namespace: str, inputs_ready: Callable[..., Any]
) -> None:
    helm, release = "helm3", "miles"
    last = NUM_ROLLOUT_LOST_HEAD - 1
    extra = [
        "--set", "mode=rayJob",
        "--set", "rayJob.backoffLimit=2",
        "--set", f"recipe.numRollout={NUM_ROLLOUT_LOST_HEAD}",
        "--set", "recipe.saveInterval=1",
    ]  # fmt: skip
    raw = inputs_ready(COLOCATED, release, namespace, extra)
    out_dir = tb.host_path(raw["output"]["dir"])
    tracker = tb.host_path(raw["output"]["checkpointDir"]) / "latest_checkpointed_iteration.txt"
    hold = out_dir / "testbed-hold-after-save"
    job_id = raw["submit"]["submissionId"]
    out_dir.mkdir(parents=True, exist_ok=True)
    hold.write_text("1\n")  # the first attempt's driver: busy after its first save, as in a long rollout

    def driver_logs() -> list[str]:
        return [p.read_text() for p in sorted(tb.host_path(raw["submit"]["logDir"]).glob(f"{job_id}-*.log"))]

    def holding_after(iteration: int) -> bool:
        said = f"holding after saving iteration {iteration}"
        saved = tracker.exists() and tracker.read_text().strip() == str(iteration)
        return saved and said in driver_logs()[-1]

    def delete_head() -> str:
        cluster = str((rayjob(namespace).get("status") or {}).get("rayClusterName"))
        selector = f"ray.io/node-type=head,ray.io/cluster={cluster}"
        heads = tb.kget("pods", namespace, selector=selector)["items"]
        tb.kubectl("delete", "pod", "-n", namespace, heads[0]["metadata"]["name"], "--wait=true")
        return cluster

    def next_attempt_after(cluster: str) -> bool:
        status = rayjob(namespace).get("status") or {}
        moved = status.get("rayClusterName") not in (None, "", cluster)
        return moved and status.get("jobStatus") == "RUNNING"

    tb.deploy(helm, "install", release, namespace, COLOCATED, *extra)
    wait_for("the first attempt's driver to hold after iteration 1", namespace, lambda: holding_after(1), 300)
    first = delete_head()
    hold.write_text(f"{last}\n")  # the next attempt's driver: holds after saving the run's last checkpoint
    wait_for("KubeRay's next attempt, on a new cluster", namespace, lambda: next_attempt_after(first), 300)
    wait_for(f"the next attempt to hold after iteration {last}", namespace, lambda: holding_after(last), 300)
    second = delete_head()

    def ended() -> dict[str, Any] | None:
        status = rayjob(namespace).get("status") or {}
        return status if status.get("jobDeploymentStatus") in ("Complete", "Failed") else None

    status = wait_for("the RayJob to end", namespace, ended, timeout=420)
    assert status["jobDeploymentStatus"] == "Complete", json.dumps(status)[:3000]
    assert status["jobStatus"] == "SUCCEEDED" and status.get("jobId") == job_id, json.dumps(status)[:3000]
    assert int(status.get("failed") or 0) == 2, json.dumps(status)[:3000]
    assert status.get("rayClusterName") not in (first, second)
    # the third attempt's submitter: the run finished by the second attempt's job, nothing trained again
    log = submitter_log(namespace, rayjob(namespace)["metadata"]["name"])
    assert f"holds its checkpoint iteration {last}, rollout {NUM_ROLLOUT_LOST_HEAD} of" in log, log[-4000:]
    assert "an earlier attempt's job saved it" in log and "records the run's end" in log, log[-4000:]
    assert "checking the cluster before the run" not in log, log[-4000:]
    # two starts of the training job, each log on the shared volume: the second resumed after the first save
    attempts = driver_logs()
    assert len(attempts) == 2, [a[:200] for a in attempts]
    assert "no checkpoint in" in attempts[0] and "holding after saving iteration 1" in attempts[0]
    assert "resuming at rollout 2" in attempts[1] and "rollout 1:" not in attempts[1], attempts[1][-3000:]
    assert tracker.read_text().strip() == str(last) and not hold.exists()
    # each attempt's submitter lines outlive its pod: the lost job was named by the attempt that lost it
    kept = [
        p.read_text() for p in sorted(tb.host_path(raw["submit"]["logDir"]).glob(f"submitter-{job_id}-*.log"))
    ]
    assert len(kept) >= 3, [k[:200] for k in kept]
    lost = [k for k in kept if f"Ray job {job_id} is no longer on the Ray head" in k]
    assert len(lost) >= 2 and "resumes from checkpoint 1" in lost[0], [k[-2000:] for k in kept]
    assert "an earlier attempt's job saved it" in kept[-1], kept[-1][-3000:]

    wait_for("the run's Ray pods to go", namespace, lambda: not ray_pods(namespace), timeout=180)
    tb.uninstall_cleanly(helm, release, namespace, leftovers)
