"""Token authentication on the real local Ray head (secrets.rayAuth): requests without the token are
refused, and a hook that lacks it (or holds another) fails naming the values to check, creating nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from miles_hooks.core import runspec as specmod
from ray.job_submission import JobSubmissionClient
from ray_testlib import AUTH_ENV, LocalRay, make_spec, write_spec


def run_hook(step: str, spec: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "miles_hooks", step, "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def http_status(url: str, method: str = "GET", token: str | None = None) -> int:
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_jobs_api_answers_only_requests_with_the_token(local_ray: LocalRay) -> None:
    jobs = local_ray.dashboard_url + "/api/jobs/"
    assert http_status(jobs) == 401
    assert http_status(jobs, "POST") == 401  # an unauthenticated job submission
    assert http_status(jobs, token="not-the-token") == 403
    assert http_status(jobs, token=AUTH_ENV["RAY_AUTH_TOKEN"]) == 200
    # KubeRay's probes and wait-ready read these without a token
    assert http_status(local_ray.dashboard_url + "/api/gcs_healthz") == 200


@pytest.mark.parametrize(
    ("token", "sent"), [(None, "sent no token"), ("not-the-token", "sent a token")], ids=["none", "wrong"]
)
@pytest.mark.parametrize("step", ["submit", "verify", "status"])
def test_a_hook_without_the_right_token_names_the_secret_and_submits_nothing(
    local_ray: LocalRay, tmp_path: Path, step: str, token: str | None, sent: str
) -> None:
    raw = make_spec(tmp_path, local_ray.dashboard_url, release=f"ra-{step}")
    spec = write_spec(tmp_path / "run.json", raw)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    proc = run_hook(step, spec, env)
    assert proc.returncode == 1, proc.stderr
    assert "refused this hook" in proc.stderr and sent in proc.stderr, proc.stderr
    assert "secrets.rayAuth" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert AUTH_ENV["RAY_AUTH_TOKEN"] not in proc.stderr + proc.stdout
    sid = specmod.submission_id(raw)
    assert sid not in [j.submission_id for j in JobSubmissionClient(local_ray.dashboard_url).list_jobs()]


def test_a_hook_reads_the_token_from_the_file_the_chart_mounts(local_ray: LocalRay, tmp_path: Path) -> None:
    """The hook pods get RAY_AUTH_TOKEN_PATH (a Secret volume), not the token in their environment."""
    token_file = tmp_path / "token"
    token_file.write_text(AUTH_ENV["RAY_AUTH_TOKEN"])
    raw = make_spec(tmp_path, local_ray.dashboard_url, release="ra-file")
    spec = write_spec(tmp_path / "run.json", raw)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    env["RAY_AUTH_TOKEN_PATH"] = str(token_file)
    proc = run_hook("verify", spec, env)
    assert proc.returncode == 0, proc.stderr
