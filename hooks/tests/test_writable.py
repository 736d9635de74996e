"""core/writable.py: the shared volume proven writable by the hooks' user before anything long starts.

Root writes anywhere, so each probe runs in a forked child as the hooks' UID (10001) when the tests run as
root, as CI does; a non-root run probes as its own UID. The fixes the message gives are then run as given.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hooks_testlib import spec_in
from miles_hooks.core import writable
from miles_hooks.core.errors import HookError
from miles_hooks.core.runspec import RunSpec
from miles_hooks.core.runspec_types import RawSpec
from miles_hooks.steps import prepare_data

HOOKS_UID = 10001 if os.geteuid() == 0 else os.geteuid()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory tree the probing user can reach (pytest's own tmp_path is private to root)."""
    root = Path(tempfile.mkdtemp(prefix="miles-writable-", dir="/tmp"))
    root.chmod(0o777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def as_hooks_user(step: Callable[[], Any]) -> tuple[int, str]:
    """``step`` run in a forked child that has dropped to the hooks' UID: its exit code (a HookError's, or 0)
    and its message or JSON result. Forked, not executed: this interpreter lives under root's home, which
    UID 10001 cannot read; everything ``step`` needs is imported before the fork."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read_end)
        code, text = 0, ""
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(HOOKS_UID)
                os.setuid(HOOKS_UID)
            text = json.dumps(step(), default=str)
        except HookError as exc:
            code, text = exc.exit_code, str(exc)
        except BaseException as exc:
            code, text = 99, repr(exc)
        os.write(write_end, text.encode())
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        text = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text


def probe_as_hooks_user(raw: dict[str, Any]) -> tuple[int, str]:
    return as_hooks_user(lambda: writable.require(writable.directories_written(cast(RawSpec, raw))))


def root_owned(path: Path) -> None:
    """``path`` as an admin's ``mkdir`` leaves it (its parents open to everyone)."""
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir()
            parent.chmod(0o777)
    path.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, 0, 0)
    path.chmod(0o555 if os.geteuid() != 0 else 0o755)


def test_every_directory_the_run_writes_is_probed_and_nothing_is_left(shared: Path) -> None:
    raw = spec_in(shared)
    code, text = probe_as_hooks_user(raw)
    assert code == 0, text
    proven = json.loads(text)
    expected = [
        raw["model"]["hfPath"],
        *(ds["path"] for ds in raw["data"]["datasets"]),
        str(Path(raw["model"]["torchDistPath"]).parent),
        raw["output"]["dir"],
    ]
    assert proven == expected
    # none existed: each was judged by the directory that will hold it, and none was made
    assert sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*")) == []
    Path(raw["output"]["dir"]).mkdir(mode=0o777)
    Path(raw["output"]["dir"]).chmod(0o777)
    code, text = probe_as_hooks_user(raw)
    assert code == 0, text
    assert not list(Path(raw["output"]["dir"]).iterdir()), "a probe file was left behind"


def test_only_what_the_hooks_write_is_probed() -> None:
    raw = spec_in(Path("/nowhere"))
    raw["prepare"]["download"] = False
    raw["convert"]["enabled"] = False
    assert writable.directories_written(raw) == [("output.dir", Path("/nowhere/run"))]


@pytest.mark.parametrize("fix", ["setfacl", "chown"])
def test_a_directory_made_by_root_is_named_with_the_uid_and_the_fix_that_works(
    shared: Path, fix: str
) -> None:
    raw = spec_in(shared)
    models = Path(raw["model"]["hfPath"]).parent
    root_owned(models)
    code, message = probe_as_hooks_user(raw)
    assert code == 1, message
    assert f"the shared volume refuses writes by UID {HOOKS_UID} (the hooks' user, " in message, message
    assert "hooks.podSecurityContext.runAsUser" in message, message
    assert f"model.hfPath {raw['model']['hfPath']}: Permission denied at {models} (to create " in message, (
        message
    )
    assert f"model.torchDistPath (its parent) {models}: Permission denied at {models};" in message, message
    found = "owner UID 0, mode drwxr-xr-x" if os.geteuid() == 0 else f"owner UID {HOOKS_UID}, mode dr-xr-xr-x"
    assert f"found {found}" in message, message
    assert "Nothing was downloaded or submitted" in message
    # the data and output directories were writable: only the refused ones are named
    assert "output.dir" not in message and "data.datasets" not in message, message
    commands = dict((c.split()[0], c) for c in re.findall(r"`((?:setfacl|chown) [^`]+)`", message))
    assert set(commands) == {"setfacl", "chown"}, message
    assert commands[fix].endswith(f" {models}"), commands
    if os.geteuid() != 0:
        pytest.skip("running the fix needs root, as it does on the cluster (an admin's shell)")
    subprocess.run(shlex.split(commands[fix]), check=True)
    code, text = probe_as_hooks_user(raw)
    assert code == 0, text


def test_prepare_data_stops_at_the_probe_before_any_download(shared: Path) -> None:
    raw = spec_in(shared)
    raw["prepare"]["sourceDir"] = str(shared / "no-mirror")
    root_owned(Path(raw["output"]["dir"]))
    code, message = as_hooks_user(lambda: prepare_data.run(RunSpec(cast(RawSpec, raw), "run.json")))
    assert code == 1, message
    assert f"output.dir {raw['output']['dir']}: Permission denied" in message, message
    # the mirror does not exist: prepare-data would have said so had it got that far
    assert "no-mirror" not in message, message
    assert not Path(raw["model"]["hfPath"], prepare_data.MODEL_MARKER).exists()
