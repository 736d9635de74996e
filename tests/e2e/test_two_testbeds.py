"""Two testbeds on one machine share no host state.

`make demo` leaves its testbed up and `make test` then brings up the e2e testbed beside it. A kubelet removes,
once a minute, every directory under its pod-log directory that belongs to no pod of its own: when both real
nodes used the host's default (/var/log/pods), each deleted the other's container logs, and `kubectl logs` of
a
hook pod failed with "failed to try resolving symlinks in path /var/log/pods/...". Here a second testbed (its
own
state directory, ports, network namespace and pod range) runs beside the e2e one; a pod on each real node
writes a line, both kubelets run their log and container garbage collection, and each pod's log is still read
through its own API server, before and after the second testbed goes down.

The second testbed also starts over what a killed one leaves (a stopped CI job, a closed session): its network
namespace and veth pair, which `ip netns add` refused ("File exists"), and a pid file of a process long gone,
which `up` read as a component that had just exited.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import harness as tb
import pytest

pytestmark = pytest.mark.cluster

HOOKS_IMAGE = "localhost/miles-hooks:testbed"
SIDE_DIR = tb.REPO / ".tools" / "cluster-side"
SIDE_ENV = {
    "CLUSTER_DIR": str(SIDE_DIR),
    "TESTBED_PORT_OFFSET": "3000",
    "FSX_DIR": "/tmp/miles-testbed-fsx-side",
    "NODES": "0",
    "CPU_NODES": "1",
    # its pod runs the hooks image: the other images would only lengthen the import
    "NODE_IMAGES": "pause miles-hooks",
}
# the kubelet's container garbage collection, evictPodLogsDirectories included, runs once a minute
# (ContainerGCPeriod in pkg/kubelet); waiting longer than that lets each kubelet run it with the other's pods
# up
KUBELET_GC_PERIOD_S = 60


def kubectl_on(kubeconfig: Path, *args: str, check: bool = True) -> tb.Result:
    return tb.run([str(tb.TOOLS_BIN / "kubectl"), "--kubeconfig", str(kubeconfig), *args], check=check)


def logging_pod(name: str, line: str) -> dict[str, Any]:
    """A pod on the real node that prints ``line`` and stays up."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": tb.REAL_NODE,
            "tolerations": [{"key": "miles-testbed/real-node", "operator": "Exists"}],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "say",
                    "image": HOOKS_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": [
                        "python3",
                        "-c",
                        f"import time; print({line!r}, flush=True); time.sleep(900)",
                    ],
                }
            ],
        },
    }


def pod_log(kubeconfig: Path, namespace: str, name: str) -> tb.Result:
    return kubectl_on(kubeconfig, "logs", "-n", namespace, name, check=False)


def wait_logged(kubeconfig: Path, namespace: str, name: str, line: str) -> None:
    tb.wait_until(
        f"{namespace}/{name} logs {line!r}",
        lambda: line in pod_log(kubeconfig, namespace, name).out,
        timeout=120,
    )


def links_into(pod_logs: Path) -> list[str]:
    """The kubelet's links in the host's /var/log/containers that point into ``pod_logs``."""
    root = Path("/var/log/containers")
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if p.is_symlink() and str(os.readlink(p)).startswith(f"{pod_logs}/")
    )


def test_two_testbeds_side_by_side_keep_their_pod_logs(testbed: Path, namespace: str) -> None:
    side_kc = SIDE_DIR / "kubeconfig"
    tag = uuid.uuid4().hex[:8]
    e2e_line, side_line = f"e2e-testbed-{tag}", f"side-testbed-{tag}"
    pod = "two-testbeds"
    side_slot = int(SIDE_ENV["TESTBED_PORT_OFFSET"]) // 100
    leftover_netns, leftover_veth = f"miles-tb-{side_slot}", f"mtb{side_slot}-h"
    tb.run(["ip", "netns", "add", leftover_netns])
    tb.run(["ip", "link", "add", leftover_veth, "type", "veth", "peer", "name", f"mtb{side_slot}-n"])
    tb.run(["ip", "link", "set", f"mtb{side_slot}-n", "netns", leftover_netns])
    (SIDE_DIR / "run").mkdir(parents=True, exist_ok=True)
    (SIDE_DIR / "run" / "apiserver-forward.pid").write_text("999999999 0\n")
    up = tb.run([str(tb.REPO / "testbed" / "up.sh")], env=SIDE_ENV, timeout=300)
    try:
        assert f"removing network namespace {leftover_netns}" in up.out, up.out
        kubectl_on(side_kc, "create", "namespace", namespace)
        for kc, line in ((tb.KUBECONFIG, e2e_line), (side_kc, side_line)):
            tb.run(
                [str(tb.TOOLS_BIN / "kubectl"), "--kubeconfig", str(kc), "apply", "-n", namespace, "-f", "-"],
                stdin=json.dumps(logging_pod(pod, line)),
            )
        wait_logged(tb.KUBECONFIG, namespace, pod, e2e_line)
        wait_logged(side_kc, namespace, pod, side_line)
        started = time.monotonic()

        time.sleep(max(0.0, KUBELET_GC_PERIOD_S + 10 - (time.monotonic() - started)))
        for kc, line in ((tb.KUBECONFIG, e2e_line), (side_kc, side_line)):
            res = pod_log(kc, namespace, pod)
            assert res.rc == 0 and line in res.out, (
                f"{kc}: the log of {namespace}/{pod} after both kubelets' garbage collection: rc {res.rc}\n"
                f"{res.out}{res.err}"
            )

        # each kubelet keeps its container logs in its own state directory, never in the host's /var/log/pods
        for cluster_dir in (tb.CLUSTER_DIR, SIDE_DIR):
            own = cluster_dir / "node" / "pod-logs"
            assert [d.name for d in own.glob(f"{namespace}_{pod}_*")], f"no log directory of {pod} in {own}"
            assert links_into(own), f"no link into {own} in /var/log/containers"
        host_default = Path("/var/log/pods")
        stray = sorted(d.name for d in host_default.glob(f"{namespace}_*")) if host_default.is_dir() else []
        assert not stray, f"pod logs in the host's {host_default}: {stray}"
    finally:
        tb.run([str(tb.REPO / "testbed" / "down.sh")], env=SIDE_ENV, timeout=180)

    # the second testbed took its own links and logs with it, and left the e2e testbed's alone
    assert not links_into(SIDE_DIR / "node" / "pod-logs")
    assert not (SIDE_DIR / "node" / "pod-logs").exists()
    assert not list(Path("/var/lib/cni/results").glob(f"miles-testbed-{side_slot}-*"))
    assert links_into(tb.CLUSTER_DIR / "node" / "pod-logs")
    res = pod_log(tb.KUBECONFIG, namespace, pod)
    assert res.rc == 0 and e2e_line in res.out, res.err
