"""A Ray head lost mid-run in mode rayCluster (Helm 4, the real hooks, KubeRay and Ray head): KubeRay
starts a new head, whose job table is empty, and the run's driver died with the old cluster. `helm test`
fails naming the job, when submit created it, the checkpoint the run resumes from and the one command that
resumes it; that command (a rollback to the current revision) submits the job again under its id on the new
head, and it resumes from the checkpoint. Both starts' driver logs stay on the shared volume.

(Mode rayJob recovers the same loss alone, on a new cluster: test_rayjob.py.)"""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness as tb
import pytest
from test_existing_checkpoints import job_log, job_state
from test_lifecycle import COLOCATED, cluster_pods, head_pod, leftovers, spec_fullname

pytestmark = pytest.mark.cluster

# long enough to be running when its head is deleted, a checkpoint after every rollout, only the latest kept
# (preflight refuses a thousand on the testbed's claim)
LONG = [
    "--set", "recipe.numRollout=1000",
    "--set", "recipe.saveInterval=1",
    "--set", "recipe.checkpoint.retainInterval=1000",
]  # fmt: skip


def latest_checkpoint(spec: dict[str, Any]) -> int | None:
    tracker = tb.host_path(spec["output"]["checkpointDir"]) / "latest_checkpointed_iteration.txt"
    text = tracker.read_text().strip() if tracker.exists() else ""
    return int(text) if text.isdigit() else None


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def status_from_a_laptop(ns: str, spec: dict[str, Any], scratch: Path) -> tb.Result:
    """`miles-hooks status` as on a laptop: the run spec from its ConfigMap, the head's Service through a
    real `kubectl port-forward` (to the head container on the real node), the Ray token from its Secret."""
    (auth,) = [s for s in spec["secrets"] if s["purpose"] == "rayAuth"]
    secret = tb.kget("secret", ns, auth["name"])
    token = base64.b64decode(secret["data"][auth["key"]]).decode()
    (scratch / "run.json").write_text(json.dumps(spec))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service = f"svc/{spec['rayCluster']['headService']}"
    forward = subprocess.Popen(
        [str(tb.TOOLS_BIN / "kubectl"), "port-forward", "-n", ns, service, f"{port}:8265"],
        env=tb.tool_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        tb.wait_until(
            f"kubectl port-forward on {port}", lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0
        )
        argv = [sys.executable, "-m", "miles_hooks", "status", "--spec", str(scratch / "run.json")]
        argv += ["--address", f"http://127.0.0.1:{port}", "--log-format", "text"]
        return tb.run(argv, check=False, env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
    finally:
        forward.terminate()
        forward.wait(timeout=30)


def test_a_lost_head_is_announced_with_the_command_that_resumes_the_run(
    namespace: str, inputs_ready: Callable[..., Any], tmp_path: Path
) -> None:
    rel, ns = "miles", namespace
    inputs_ready(COLOCATED, rel, ns, LONG)
    tb.deploy("helm4", "install", rel, ns, COLOCATED, *LONG)
    spec = tb.run_spec(ns, spec_fullname(ns, rel))
    sid, cluster = spec["submit"]["submissionId"], spec["rayCluster"]["name"]
    tb.wait_until("a checkpoint of the run", lambda: (latest_checkpoint(spec) or 0) >= 1, timeout=180)

    old = head_pod(ns, cluster)["metadata"]["uid"]
    tb.kubectl("delete", "pod", "-n", ns, head_pod(ns, cluster)["metadata"]["name"], "--wait=true")

    def new_head_ready() -> bool:
        heads = [
            p
            for p in cluster_pods(ns, cluster)
            if p["metadata"]["labels"].get("ray.io/node-type") == "head" and p["metadata"]["uid"] != old
        ]
        conditions = heads[0].get("status", {}).get("conditions", []) if heads else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    tb.wait_until("KubeRay's new head to be Ready", new_head_ready, timeout=180, interval=2)
    assert job_state(rel, ns, sid) is None, "the new head knows the run's job"

    # helm test names the loss, the checkpoint and the command
    res = tb.helm("helm4", "test", rel, "-n", ns, "--timeout", "5m", check=False)
    said = res.out + res.err + tb.kubectl("logs", "-n", ns, f"pod/{rel}-test-status", check=False).out
    assert res.rc != 0, said[-3000:]
    assert f"Ray job {sid} is not on the Ray head, though submit created it at" in said, said[-3000:]
    revision = spec["release"]["revision"]
    command = f"helm rollback {rel} {revision} -n {ns}"
    assert f": {command}." in said, said[-3000:]
    named = re.search(r"from checkpoint ([0-9]+)", said)
    assert named and int(named.group(1)) >= 1, said[-3000:]
    assert f"{spec['submit']['logDir']}/{sid}-*.log" in said, said[-3000:]

    # the command: the post-rollback submit finds the job absent from the new head and submits it again,
    # under the same id; it resumes after the checkpoint saved last (the old driver may have saved later
    # than `helm test` looked, before the workers lost their head)
    resubmitted = time.time()
    tb.rollback("helm4", rel, ns, revision)  # the command, as a user runs it (--wait)
    tb.wait_until("the resubmitted job to run", lambda: job_state(rel, ns, sid) == "RUNNING", timeout=180)
    tb.wait_until("the job to resume", lambda: "resuming at rollout" in job_log(ns, sid), timeout=120)
    resumed = re.search(r"resuming at rollout ([0-9]+)", job_log(ns, sid))
    assert resumed and int(resumed.group(1)) > int(named.group(1)), job_log(ns, sid)[-3000:]
    assert "rollout 0:" not in job_log(ns, sid), job_log(ns, sid)[-3000:]
    (submit,) = [e for e in tb.journal(ns, since=resubmitted) if e["container"] == "submit"]
    assert submit["exitCode"] == 0

    # both starts' driver logs on the shared volume: the lost one's, and the resumed one's
    starts = sorted(tb.host_path(spec["submit"]["logDir"]).glob(f"{sid}-*.log"))
    assert len(starts) == 2, starts
    assert "rollout 0:" in starts[0].read_text() and "resuming at rollout" in starts[1].read_text()

    # and helm test is green again, as is status from a laptop through a port-forward
    tb.helm("helm4", "test", rel, "-n", ns, "--timeout", "5m")
    laptop = status_from_a_laptop(ns, spec, tmp_path)
    assert laptop.rc == 0 and "job state     : RUNNING" in laptop.out, laptop.out[-3000:] + laptop.err[-3000:]
    tb.uninstall_cleanly("helm4", rel, ns, leftovers)
