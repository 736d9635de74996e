"""The pod runner's command line (bad arguments exit 2 before anything starts) and the status it writes for a
worker pod whose Ray worker joined."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from miles_testbed.pod_runner import ArgumentError, parser, settings
from miles_testbed.runner import ready_status


@pytest.fixture
def good(tmp_path: Path) -> list[str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    venv_bin = tmp_path / "bin"
    venv_bin.mkdir()
    (venv_bin / "ray").write_text("")
    return [
        f"--kubeconfig={kubeconfig}",
        f"--work-dir={tmp_path / 'runner'}",
        f"--ray-temp-dir={tmp_path / 'ray'}",
        f"--ray-worker-venv-bin={venv_bin}",
        "--node-netns=node",
        "--node-ip=10.250.10.2",
    ]


def test_good_arguments_become_the_settings(good: list[str], tmp_path: Path) -> None:
    fake_miles = tmp_path / "fake-miles"
    runner, workers = settings(
        parser().parse_args([*good, "--storage-map=/fsx/=/tmp/fsx", f"--fake-miles={fake_miles}"])
    )
    assert runner.work_dir == tmp_path / "runner"
    assert runner.hooks_image.pattern == "miles-hooks"
    assert workers.binds == [("/tmp/fsx", "/fsx"), (str(fake_miles), "/root/miles")]
    assert (workers.cpus, workers.limit, workers.port_base) == (2, 8, 12000)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--hooks-image-regex=miles-(hooks"],
            "--hooks-image-regex: expected a regular expression, got 'miles-(hooks'",
        ),
        (["--max-ray-workers=-1"], "--max-ray-workers: expected >= 0, got -1"),
        (["--ray-worker-cpus=0"], "--ray-worker-cpus: expected >= 1, got 0"),
        (
            ["--storage-map=fsx=/tmp/fsx"],
            "--storage-map: expected /mount/path=/local/dir, got 'fsx=/tmp/fsx'",
        ),
        (["--ray-worker-venv-bin=/nonexistent"], "--ray-worker-venv-bin: expected a bin dir with ray"),
        (["--kubeconfig=/nonexistent"], "--kubeconfig: expected a file, /nonexistent is none"),
    ],
)
def test_a_bad_argument_is_named_with_what_was_expected(
    good: list[str], extra: list[str], message: str
) -> None:
    with pytest.raises(ArgumentError) as raised:
        settings(parser().parse_args([*good, *extra]))
    assert str(raised.value).startswith(message)


def test_the_command_exits_2_before_it_creates_anything(good: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "miles_testbed.pod_runner", *good, "--ray-worker-cpus=0"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stderr.strip() == "pod_runner: --ray-worker-cpus: expected >= 1, got 0"
    assert not (tmp_path / "runner").exists()


def test_a_joined_worker_pod_is_reported_running_and_ready() -> None:
    pod = client.V1Pod(
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="ray-worker", image="localhost/miles-standin:testbed")]
        )
    )
    status = ready_status(pod, "2026-12-04T17:00:00Z")["status"]
    assert status["phase"] == "Running"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert [(c["name"], c["ready"], c["state"]) for c in status["containerStatuses"]] == [
        ("ray-worker", True, {"running": {"startedAt": "2026-12-04T17:00:00Z"}})
    ]
