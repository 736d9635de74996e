"""`make test` relies on pytest-xdist's `--dist loadgroup` keeping an `xdist_group` on one worker: the
built-image tests share one private containerd, whose import of the images takes minutes and gigabytes
(tests/images). When pytest and xdist disagree on where a node keeps its id, the group is silently split and
every worker imports the images at once (seen with pytest 9.2 and xdist 3.8). This runs the installed pair on
two groups of four and checks each lands on one worker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n"
        "@pytest.mark.xdist_group('one')\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_member(i):\n"
        "    pass\n"
        "@pytest.mark.xdist_group('two')\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_free(i):\n"
        "    pass\n"
    )
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"]
    done = subprocess.run(
        [*argv, "--no-loadscope-reorder", "-v"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, test in re.findall(r"\[(gw[0-9]+)\] .*PASSED test_grouped\.py::(test_[a-z]+)", done.stdout):
        workers.setdefault(test, set()).add(worker)
    assert set(workers) == {"test_member", "test_free"}, done.stdout[-3000:]
    assert all(len(found) == 1 for found in workers.values()), workers
