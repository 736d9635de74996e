from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from reward_http import STARTUP_SECONDS

from miles_reward import config
from miles_reward.config import ConfigError


def test_defaults() -> None:
    cfg = config.load({})
    assert cfg.port == 8080
    assert cfg.backend == "math_verify"
    assert cfg.workers >= 1
    assert cfg.max_inflight == config.DEFAULT_MAX_INFLIGHT
    assert cfg.timeout_seconds == config.DEFAULT_TIMEOUT_SECONDS
    assert cfg.model_path is None
    assert cfg.log_level == "info"
    assert cfg.math_answer == "anchored"


def test_all_set() -> None:
    cfg = config.load(
        {
            "REWARD_PORT": "9000",
            "REWARD_WORKERS": "3",
            "REWARD_MAX_INFLIGHT": "64",
            "REWARD_TIMEOUT_SECONDS": "2.5",
            "REWARD_LOG_LEVEL": "WARNING",
            "REWARD_MATH_ANSWER": "last_expression",
        }
    )
    assert (cfg.port, cfg.workers, cfg.max_inflight, cfg.timeout_seconds, cfg.log_level) == (
        9000,
        3,
        64,
        2.5,
        "warning",
    )
    assert cfg.math_answer == "last_expression"


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("REWARD_PORT", "http", "an integer from 1 to 65535"),
        ("REWARD_PORT", "70000", "an integer from 1 to 65535"),
        ("REWARD_WORKERS", "0", "an integer from 1 to 256"),
        ("REWARD_WORKERS", "2.5", "an integer from 1 to 256"),
        ("REWARD_MAX_INFLIGHT", "-1", "an integer from 1"),
        ("REWARD_TIMEOUT_SECONDS", "0", "a number of seconds > 0"),
        ("REWARD_TIMEOUT_SECONDS", "nan", "a number of seconds > 0"),
        ("REWARD_TIMEOUT_SECONDS", "ten", "a number of seconds > 0"),
        ("REWARD_BACKEND", "llm_judge", "math_verify or reward_model"),
        ("REWARD_LOG_LEVEL", "verbose", "debug|info|warning|error"),
        ("REWARD_MATH_ANSWER", "last", "anchored or last_expression"),
    ],
)
def test_invalid_value_names_variable_expected_and_found(
    name: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        config.load({name: value})
    message = str(err.value)
    assert message.startswith(f"{name}: expected {expected}")
    assert message.endswith(f"found {value!r}")
    assert err.value.name == name


def test_reward_model_needs_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"REWARD_MODEL_PATH: .* found <unset>"):
        config.load({"REWARD_BACKEND": "reward_model"})
    with pytest.raises(ConfigError, match=r"REWARD_MODEL_PATH: .*config\.json.* found '"):
        config.load({"REWARD_BACKEND": "reward_model", "REWARD_MODEL_PATH": str(tmp_path)})
    (tmp_path / "config.json").write_text("{}")
    cfg = config.load({"REWARD_BACKEND": "reward_model", "REWARD_MODEL_PATH": str(tmp_path)})
    assert cfg.model_path == tmp_path


def test_process_refuses_to_start_on_bad_config() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_")}
    env["REWARD_WORKERS"] = "many"
    done = subprocess.run(
        [sys.executable, "-m", "miles_reward", "--host", "127.0.0.1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,
        check=False,
    )
    assert done.returncode == 2
    assert "REWARD_WORKERS: expected an integer from 1 to 256, found 'many'" in done.stderr


def test_cpu_limit_reads_the_cgroup_quota(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert config.cpu_limit(tmp_path) == affinity
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # a 1.5-CPU limit rounds up to 2
    assert config.cpu_limit(tmp_path) == min(affinity, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert config.cpu_limit(tmp_path) == 1
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert config.cpu_limit(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert config.cpu_limit(tmp_path) == affinity


def test_default_workers_per_backend(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    cpus = config.cpu_limit()
    assert config.load({}).workers == 2 * cpus
    rm = config.load({"REWARD_BACKEND": "reward_model", "REWARD_MODEL_PATH": str(tmp_path)})
    assert rm.workers == cpus
