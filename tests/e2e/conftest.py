"""End-to-end tests on the local testbed (testbed/): real API server, scheduler, controller-manager and
KubeRay operator, a real node where each release's Ray head runs as a container, kwok-simulated GPU nodes and
Ray worker pods (each joined to its head by a real Ray worker node), hook pods really executed by the pod
runner.

The tests run on a private testbed of their own (CLUSTER_DIR=.tools/cluster-e2e, every port shifted by
TESTBED_PORT_OFFSET=1000, FSX_DIR=/tmp/miles-testbed-fsx-e2e; under pytest-xdist one per worker, below), so
a `make cluster-up` testbed that people are using stays untouched and cannot disturb the tests. The session
brings it up when it is not already up and takes it down at the end (TESTBED_KEEP=1 keeps it). Each test gets
its own namespace with the shared-storage claim and the `hf-token` Secret, and removes everything at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
_REPO = Path(__file__).resolve().parents[2]
# Under pytest-xdist (`make test`) each worker drives a testbed of its own: worker gwN gets the port offset
# 1000 + 100 x N (the real node's slot 10 + N), its own cluster dir and its own shared-storage dir, so tests
# on two workers never see each other's nodes, GPUs or runs. Values set in the environment by the person
# running the tests win; those this file set in a parent process (the xdist controller loads it too, given
# an e2e path, and its workers inherit its environment) are set again for the worker.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_SUFFIX = f"-{_WORKER}" if _WORKER else ""
_SET_HERE = "MILES_E2E_TESTBED_SET"  # the names below that this file set, not the person running the tests
_TESTBED = {
    "TESTBED_PORT_OFFSET": str(1000 + 100 * _WORKER),
    "CLUSTER_DIR": str(_REPO / ".tools" / f"cluster-e2e{_SUFFIX}"),
    "FSX_DIR": f"/tmp/miles-testbed-fsx-e2e{_SUFFIX}",
}
for _name in filter(None, os.environ.get(_SET_HERE, "").split(",")):
    os.environ.pop(_name, None)
if _WORKER and "CLUSTER_DIR" in os.environ:
    raise RuntimeError(
        f"CLUSTER_DIR={os.environ['CLUSTER_DIR']} pins one testbed, which pytest-xdist worker "
        f"{os.environ['PYTEST_XDIST_WORKER']} would share with the others: unset it, or run without -n"
    )
_set = [name for name in _TESTBED if name not in os.environ]
os.environ.update({name: _TESTBED[name] for name in _set})
os.environ[_SET_HERE] = ",".join(_set)

import harness as tb  # noqa: E402
import seed  # noqa: E402

# harness reads its configuration when first imported: a module imported before this conftest (another
# tier importing it at collection) would have fixed it to the `make cluster-up` testbed's, silently.
if Path(os.environ["CLUSTER_DIR"]) != tb.CLUSTER_DIR or Path(os.environ["FSX_DIR"]) != tb.FSX_DIR:
    raise RuntimeError(
        "tests/e2e/harness.py was imported before tests/e2e/conftest.py set the e2e testbed's environment "
        f"(it holds CLUSTER_DIR={tb.CLUSTER_DIR}, expected {os.environ['CLUSTER_DIR']}): import it from "
        "the e2e tier only, or set CLUSTER_DIR, TESTBED_PORT_OFFSET and FSX_DIR first"
    )


@pytest.fixture(scope="session")
def testbed() -> Iterator[Path]:
    started = False
    if not tb.is_up():
        tb.up()
        started = True
    mirror = seed.seed(tb.FSX_DIR)
    try:
        yield mirror
    finally:
        if started and not os.environ.get("TESTBED_KEEP"):
            tb.down()


@contextlib.contextmanager
def release_namespace() -> Iterator[str]:
    """A namespace of its own with the shared-storage claim and the `hf-token` Secret; on exit every release
    in it is uninstalled (its Ray head, and with it its jobs, go with it) and everything removed."""
    # a testbed process that died (the real node's kubelet, say) fails every test after it in ways far from
    # the cause: name it here instead
    dead = tb.dead_processes()
    assert not dead, "testbed process(es) no longer running:\n" + "\n".join(dead)
    ns = f"e2e-{uuid.uuid4().hex[:8]}"
    # what the jobs' drivers leave in /tmp (the stand-in train.py's parser scratch dirs) must go with the
    # local Ray worker they ran on, as a container's /tmp does, even when a stopped job was killed mid-parse
    host_scratch = set(Path(tempfile.gettempdir()).glob("miles-contract-*"))
    tb.run([str(tb.REPO / "testbed" / "storage.sh"), ns, "fsx-claim"])
    tb.kubectl(
        "-n", ns, "create", "secret", "generic", "hf-token", "--from-literal=token=hf_testbed_not_a_token"
    )
    try:
        yield ns
    finally:
        for rel in json.loads(
            tb.run([str(tb.TOOLS_BIN / "helm"), "list", "-n", ns, "-o", "json"]).out or "[]"
        ):
            tb.run([str(tb.TOOLS_BIN / "helm"), "uninstall", rel["name"], "-n", ns, "--wait"], check=False)
        # The pods still there go at once (none is under test any more), and their local Ray workers with
        # them, which is checked: a leaked one would hold its memory for the rest of the run. The namespace
        # itself goes in the background: the namespace controller takes 5-30 s per namespace (its re-checks
        # wait out grace periods and finalizers), some 6 minutes of the e2e tier when waited for, and every
        # test has a namespace of its own.
        tb.kubectl("delete", "pods", "--all", "-n", ns, "--force", "--grace-period=0", check=False)
        tb.kubectl("delete", "namespace", ns, "--wait=false", check=False, timeout=90)
        tb.run([str(tb.REPO / "testbed" / "storage.sh"), "--delete", ns, "fsx-claim"], check=False)
        tb.wait_for_no_ray_workers(ns, 120)
        left = sorted(
            str(d) for d in set(Path(tempfile.gettempdir()).glob("miles-contract-*")) - host_scratch
        )
        assert not left, f"the jobs of {ns} left scratch dirs in the host's /tmp: {left}"


@pytest.fixture
def namespace(testbed: Path) -> Iterator[str]:
    with release_namespace() as ns:
        yield ns


@pytest.fixture
def second_namespace(namespace: str) -> Iterator[str]:
    """Another namespace like `namespace`, for tests of two releases side by side."""
    with release_namespace() as ns:
        yield ns


@pytest.fixture
def third_namespace(second_namespace: str) -> Iterator[str]:
    with release_namespace() as ns:
        yield ns


@pytest.fixture
def inputs_ready(testbed: Path) -> Any:
    """prepare(values, release, namespace): seeds the prepared model/data and the converted checkpoint."""

    def prepare(
        values: list[Path], release: str, namespace: str, extra: list[str] | None = None
    ) -> dict[str, Any]:
        raw = tb.rendered_spec(values, release, namespace, extra)
        tb.publish_converted(raw)
        return raw

    return prepare
