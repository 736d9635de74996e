"""A hook pod lost to a node drain (Helm 4, the real Job controller, eviction API and kubelet): the convert
pod, a container on the real node, is evicted while its converter holds the lock with the shards half
written. The kubelet's SIGTERM stops the hook, which removes the half-written output and releases the lock;
the Job's podFailurePolicy ignores the DisruptionTarget failure and starts another pod, which converts at
once and publishes a complete checkpoint, and `helm install` succeeds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import harness as tb
import pytest
import yaml

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]


def convert_pods(ns: str, rel: str) -> list[dict]:
    return list(tb.kget("pods", ns, selector=f"batch.kubernetes.io/job-name={rel}-convert")["items"])


def paused(ns: str, pod: str) -> bool:
    """The converter's log line, in the copy the journal follows of the convert container's log."""
    logs = tb.CLUSTER_DIR / "runner" / "node-logs"
    return any(
        "dcp_converter: paused at saved" in f.read_text(errors="replace")
        for f in logs.glob(f"{ns}_{pod}_*/convert.log")
    )


def test_a_convert_pod_lost_to_a_drain_is_replaced_and_the_install_completes(
    namespace: str, tmp_path: Path
) -> None:
    pytest.importorskip("torch", reason="the test converter and the hook's validation need torch")
    from miles_hooks.steps import convert

    rel, ns = "miles-drain", namespace
    models = tb.FSX_DIR / "models" / f"e2e-drain-{ns}"
    target, runs, release = models / "Qwen3-4B_torch_dist", models / "converter-runs.txt", models / "release"
    models.mkdir(parents=True)
    fsx = f"/fsx/models/e2e-drain-{ns}"
    env = yaml.safe_load(tb.OVERLAY.read_text())["hooks"]["extraEnv"] + [
        {"name": "DCP_CONVERTER_COUNT", "value": f"{fsx}/{runs.name}"},
        {"name": "DCP_CONVERTER_PAUSE_AT", "value": "saved"},  # shards written, no iteration file yet
        {"name": "DCP_CONVERTER_RELEASE", "value": f"{fsx}/{release.name}"},
    ]
    extra = tmp_path / "drain-values.yaml"
    extra.write_text(
        yaml.safe_dump({"model": {"hfPath": f"models/e2e-drain-{ns}/Qwen3-4B"}, "hooks": {"extraEnv": env}})
    )
    argv = tb.deploy_argv("helm4", "install", rel, ns, [*COLOCATED, extra])
    install = tb.Background(argv)
    node = ""
    try:
        (first,) = tb.wait_until(
            "the converter to pause with its shards written",
            lambda: [p for p in convert_pods(ns, rel) if paused(ns, p["metadata"]["name"])],
            timeout=300,
        )
        node = first["spec"]["nodeName"]
        # a drain evicts through the API: the pod gets the DisruptionTarget condition, then goes
        selector = f"batch.kubernetes.io/job-name={rel}-convert"
        drain = ("drain", node, "--pod-selector", selector, "--delete-emptydir-data", "--timeout=120s")
        tb.kubectl(*drain, timeout=180)
        tb.kubectl("uncordon", node)
        node = ""
        release.touch()
        rc, out = tb.after_status_race(argv, *install.finish(timeout=600))
        assert rc == 0, out[-4000:]
    finally:
        install.stop()
        if node:
            tb.kubectl("uncordon", node, check=False)
        release.touch()

    try:
        started = runs.read_text().splitlines()
        assert len(started) == 2, started  # the evicted conversion and the one that finished
        assert (target / convert.ITERATION_FILE).read_text().strip() == convert.RELEASE
        assert json.loads((target / convert.MARKER).read_text())["tensors"] == 6
        converts = [e for e in tb.journal(ns) if e["container"] == "convert"]
        assert [e["exitCode"] == 0 for e in converts] == [False, True], converts
        assert not list(models.glob(".*tmp-*")), "the evicted pod's half-written output was left behind"
    finally:
        tb.helm("helm4", "uninstall", rel, "-n", ns, "--wait", "--timeout", "3m", check=False)
        shutil.rmtree(models, ignore_errors=True)
