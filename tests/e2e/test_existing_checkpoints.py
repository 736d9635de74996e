"""A release over checkpoints that are already there (Helm 4, mode rayCluster, the real hooks and Ray head):
a reinstall over a finished run is refused before anything downloads, naming the values to set; raising
recipe.numRollout continues the run from its last checkpoint; another release pointed at the directory is
refused, naming who wrote it; a miles image whose Ray is not the chart's is refused before any download,
and the versions read from the image are recorded. The stand-in train.py resumes from `--load` exactly as
miles does (its tracker) and saves after the last rollout."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
from test_lifecycle import COLOCATED, leftovers, spec_fullname

pytestmark = pytest.mark.cluster

SHORT = ["--set", "recipe.numRollout=3", "--set", "recipe.saveInterval=1"]


def job_log(ns: str, sid: str) -> str:
    with urllib.request.urlopen(tb.ray_request(ns, f"/api/jobs/{sid}/logs"), timeout=10) as r:
        return str(json.loads(r.read())["logs"])


def job_state(release: str, ns: str, sid: str) -> str | None:
    return {j["submission_id"]: j["status"] for j in tb.release_jobs(release, ns)}.get(sid)


def refused(ns: str, release: str, *extra: str) -> str:
    """helm install of the release fails in prepare-data: its log (exit 2, before any download)."""
    res = tb.run(tb.deploy_argv("helm4", "install", release, ns, COLOCATED, *extra), check=False)
    assert res.rc != 0, res.out[-2000:]
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=hook-prepare-data"
    log = tb.kubectl("logs", "-n", ns, "-l", selector, "--tail=-1", check=False).out
    assert tb.kget("rayclusters.ray.io", ns)["items"] == [], "a RayCluster was created"
    return log


def test_a_finished_run_is_never_run_again_silently(namespace: str, inputs_ready: Callable[..., Any]) -> None:
    rel, ns = "miles", namespace
    inputs_ready(COLOCATED, rel, ns, SHORT)
    tb.deploy("helm4", "install", rel, ns, COLOCATED, *SHORT)
    spec = tb.run_spec(ns, spec_fullname(ns, rel))
    sid = spec["submit"]["submissionId"]
    tb.wait_until("the 3-rollout job to finish", lambda: job_state(rel, ns, sid) == "SUCCEEDED", timeout=180)
    output = spec["output"]["dir"]
    tb.uninstall_cleanly("helm4", rel, ns, leftovers)

    # the same release again over its finished run: refused before any download, naming what to set
    log = refused(ns, rel, *SHORT)
    assert f"output.dir {output} holds a finished run" in log, log[-3000:]
    assert "Set recipe.numRollout above 3" in log, log[-3000:]

    # another release pointed at that directory: refused, naming the release that wrote it
    log = refused(ns, "other", *SHORT, "--set", f"output.dir={output}")
    assert f"holds checkpoints up to iteration 2 of release {ns}/{rel}" in log, log[-3000:]
    assert "output.adoptCheckpoints=true" in log, log[-3000:]
    tb.helm("helm4", "uninstall", "other", "-n", ns, "--wait")

    # a miles image whose Ray is not rayCluster.rayVersion: its version report (a pod of the image, no GPU)
    # stops prepare-data before any download or conversion, naming both versions and the values
    log = refused(ns, "other", *SHORT, "--set", "rayCluster.rayVersion=2.59.0")
    image_ray = spec["rayCluster"]["rayVersion"]
    assert f"carries Ray {image_ray}, but rayCluster.rayVersion is 2.59.0" in log, log[-3000:]
    assert f"Set rayCluster.rayVersion={image_ray}" in log, log[-3000:]
    assert not any(step in log for step in ("already prepared", "preparing", "fetching")), log[-3000:]
    assert not tb.kget("pods", ns, selector="app.kubernetes.io/component=hook-image-facts")["items"]
    assert tb.kubectl("get", "job", "other-convert", "-n", ns, check=False).rc != 0
    tb.helm("helm4", "uninstall", "other", "-n", ns, "--wait")

    # more rollouts: `helm upgrade --install` over the failed reinstall continues the run after rollout 3,
    # and says so before anything long runs (prepare-data) and in the provenance record (submit)
    more = ["--set", "recipe.numRollout=5", "--set", "recipe.saveInterval=1"]
    started = time.time()
    tb.deploy("helm4", "upgrade", rel, ns, COLOCATED, *more, "--install")
    (prepared,) = [e for e in tb.journal(ns, since=started) if e["container"] == "prepare-data"]
    said = Path(prepared["log"]).read_text()
    assert "holds checkpoint iteration 2: the run continues at rollout 3 of recipe.numRollout=5" in said, said
    spec = tb.run_spec(ns, spec_fullname(ns, rel))
    sid = spec["submit"]["submissionId"]
    tb.wait_until("the continued job to finish", lambda: job_state(rel, ns, sid) == "SUCCEEDED", timeout=180)
    log = job_log(ns, sid)
    assert "resuming at rollout 3" in log and "saved checkpoint iteration 4" in log, log[-3000:]
    assert "rollout 0:" not in log, log[-3000:]
    record = json.loads(tb.host_path(spec["output"]["provenanceFile"]).read_text())
    assert record["submissionId"] == sid
    # the versions prepare-data read from the image on the real node (the stand-in: CPython 3.12, the
    # chart's Ray, a CPU torch)
    facts = record["images"]["milesFacts"]
    assert facts["image"] == spec["images"]["miles"], facts
    assert facts["versions"]["ray"] == spec["rayCluster"]["rayVersion"], facts
    assert facts["versions"]["python"].startswith("3.12.") and facts["versions"]["torch"], facts
    assert record["resume"] == {
        "action": "continue",
        "checkpointDir": spec["output"]["checkpointDir"],
        "latestIteration": 2,
        "numRollout": 5,
    }, record["resume"]
