"""A real torch_dist conversion inside the testbed (Helm 4): nothing is seeded but the local Hugging Face
mirror, so `helm install --wait` runs the real prepare-data (mirror -> model dir) and the real convert
hook, which finds no checkpoint, takes the lock and runs `convert.command` (`python3
/root/miles/tools/convert_hf_to_torch_dist.py` plus the profile's model args) in the convert pod's
miles-image container, on the real node. The miles stand-in image carries testbed/fake-miles at
/root/miles; its converter is a stand-in running dcp_converter.py beside it, which writes a real (tiny)
torch.distributed.checkpoint that the hook validates with torch and publishes atomically with its marker.
`helm upgrade` unchanged then takes the already-converted path (convert-check, hooks image) without running
the converter again; one Ray job throughout.

The install is reached as GitOps tools reach it: a first `helm install` fails at preflight (a missing Secret),
and `helm upgrade --install` after the fix must converge exactly as an install would: Helm runs the
pre-upgrade hooks then, and the conversion must still run on a GPU. And an install whose conversion outlives
Helm's `--timeout` leaves nothing running after `helm uninstall`."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

import harness as tb
import pytest
import yaml
from test_lifecycle import check_single_job, leftovers, spec_fullname

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

COLOCATED = [tb.OVERLAY, tb.VALUES / "values-colocated.yaml"]


def hook_entry(entries: list[dict[str, Any]], container: str) -> dict[str, Any]:
    found = [e for e in entries if e["container"] == container]
    assert len(found) == 1, f"expected one {container!r} container run, found {len(found)}"
    return found[0]


def in_order(text: str, *needles: str) -> None:
    """Every needle occurs in text, in this order."""
    pos = 0
    for n in needles:
        i = text.find(n, pos)
        assert i >= 0, f"{n!r} not found (after offset {pos}) in the log:\n{text[-4000:]}"
        pos = i + len(n)


def test_install_runs_a_real_conversion_once(namespace: str, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the test converter and the hook's validation need torch")
    rel, ns = "miles-conv", namespace
    # A model dir of this test only: no converted checkpoint of another test can be found there.
    models = tb.FSX_DIR / "models" / f"e2e-convert-{ns}"
    hf, target = models / "Qwen3-4B", models / "Qwen3-4B_torch_dist"
    runs = models / "converter-runs.txt"  # dcp_converter.py appends one line per conversion it starts
    models.mkdir(parents=True)
    overlay_env = yaml.safe_load(tb.OVERLAY.read_text())["hooks"]["extraEnv"]
    extra = tmp_path / "convert-values.yaml"
    extra.write_text(
        yaml.safe_dump(
            {
                "model": {"hfPath": f"models/e2e-convert-{ns}/Qwen3-4B"},
                "hooks": {
                    "extraEnv": [
                        *overlay_env,
                        {"name": "DCP_CONVERTER_COUNT", "value": f"/fsx/models/e2e-convert-{ns}/{runs.name}"},
                    ]
                },
            }
        )
    )
    values = [*COLOCATED, extra]
    try:
        _install_convert_upgrade(rel, ns, values, hf=hf, target=target, runs=runs, scratch=tmp_path)
    finally:
        shutil.rmtree(models, ignore_errors=True)


def _install_convert_upgrade(
    rel: str, ns: str, values: list[Path], *, hf: Path, target: Path, runs: Path, scratch: Path
) -> None:
    from miles_hooks.steps import convert

    # a first install that fails at preflight (the Hugging Face token's Secret is missing) leaves a failed
    # release and its failed hook Job: nothing converted, no release object created
    tb.kubectl("-n", ns, "delete", "secret", "hf-token")
    failed = tb.run(tb.deploy_argv("helm4", "install", rel, ns, values), check=False)
    assert failed.rc != 0 and "preflight" in failed.out + failed.err, failed.err[-3000:]
    assert not target.exists()
    token = "--from-literal=token=hf_testbed_not_a_token"
    tb.kubectl("-n", ns, "create", "secret", "generic", "hf-token", token)

    # the directory the converted checkpoint goes into, made by root as an admin would on FSx (no fsGroup, no
    # ACL): the next attempt stops at prepare-data's write probe, before any download or conversion, naming
    # the UID and the fix; the fix is then run exactly as the message gives it, where the volume is mounted
    models = target.parent
    tb.run(["setfacl", "-b", str(models)])
    models.chmod(0o755)
    started = time.time()
    refused = tb.run(tb.deploy_argv("helm4", "upgrade", rel, ns, values, "--install"), check=False)
    assert refused.rc != 0, refused.out[-2000:]
    # each attempt of the Job (hooks.backoffLimit) refuses alike
    attempts = [e for e in tb.journal(ns, since=started) if e["container"] == "prepare-data"]
    assert attempts and all(e["exitCode"] == 1 for e in attempts), attempts
    refusal = Path(attempts[-1]["log"]).read_text()
    assert "the shared volume refuses writes by UID 10001" in refusal, refusal[-3000:]
    assert f"model.torchDistPath (its parent) {tb.pod_path(models)}: Permission denied" in refusal, refusal
    assert "owner UID 0, mode drwxr-xr-x" in refusal, refusal[-3000:]
    assert not target.exists() and not runs.exists(), "converted before the volume was proven writable"
    assert tb.kget("rayclusters.ray.io", ns)["items"] == []
    fix = re.search(r"`(setfacl [^`]+)`", refusal)
    assert fix, refusal[-3000:]
    tb.run(tb.on_shared_storage(shlex.split(fix.group(1))))

    # helm upgrade --install (Flux, helmfile, CI): Helm runs the pre-upgrade hooks over the failed release,
    # and they do what the install's would: the whole hook sequence, the GPU convert running the converter
    started = time.time()
    t0 = time.monotonic()
    tb.deploy("helm4", "upgrade", rel, ns, values, "--install")
    install_s = time.monotonic() - t0
    entries = tb.journal(ns, since=started)
    assert tb.hook_steps(entries) == tb.HOOK_ORDER
    assert all(e["exitCode"] == 0 for e in entries), [(e["pod"], e["exitCode"]) for e in entries]
    conv = hook_entry(entries, "convert")
    # the miles image (the stand-in, fake-miles at /root/miles), with the hooks copied in, on the real node
    assert conv["image"].startswith("localhost/miles-standin:"), conv["image"]
    assert conv["node"] == tb.REAL_NODE, conv
    log = Path(conv["log"]).read_text()
    in_order(
        log,
        "conversion needed",
        "no converted checkpoint yet",
        "running the converter",
        "/root/miles/tools/convert_hf_to_torch_dist.py",
        "testbed convert_hf_to_torch_dist.py (stand-in",
        # the paths as the convert pod sees them: the claim at its mount path
        f"converting {tb.pod_path(hf)} -> {tb.pod_path(target.parent)}/.{target.name}.tmp-",
        "(6 tensors)",
        "done",
        "converter finished",
        "published the torch_dist checkpoint",
    )
    lines = runs.read_text().splitlines()
    assert len(lines) == 1, lines
    assert "--num-layers 2 --hidden-size 64" in lines[0], lines  # the profile's model args, expanded

    # the published checkpoint: the layout of the upstream tool, a real DCP, the hook's completion marker
    spec = tb.run_spec(ns, spec_fullname(ns, rel))
    assert (
        tb.host_path(spec["model"]["hfPath"]) == hf and tb.host_path(spec["model"]["torchDistPath"]) == target
    )
    assert (target / convert.ITERATION_FILE).read_text().strip() == convert.RELEASE
    marker = json.loads((target / convert.MARKER).read_text())
    assert marker["kind"] == convert.MARKER_KIND and marker["version"] == 1
    # the source the hook saw in its pod: the spec's own paths, the HF config as prepare-data left it
    assert marker["source"]["hfPath"] == spec["model"]["hfPath"], marker["source"]
    assert marker["source"]["configSha256"] == hashlib.sha256((hf / "config.json").read_bytes()).hexdigest()
    assert marker["source"]["resolvedRevision"], marker["source"]  # prepare-data's marker, read by convert
    assert marker["tensors"] == 6
    names = {f["name"] for f in marker["files"]}
    assert {"latest_checkpointed_iteration.txt", "release/.metadata", "release/__0_0.distcp"} <= names
    # what convert-check will say of it, asked where the pods see the storage: valid and current
    spec_file = scratch / "run.json"
    spec_file.write_text(json.dumps(spec))
    hooks_cli = str(tb.REPO / ".venv" / "bin" / "miles-hooks")
    cli = [hooks_cli, "convert", "--check-only", "--spec", str(spec_file)]
    assert "valid torch_dist checkpoint already published" in tb.run(tb.on_shared_storage(cli)).err
    config = json.loads((hf / "config.json").read_text())
    assert convert.validate(target, config)["tensors"] == 6  # torch reads it back
    assert not list(target.parent.glob(f".{target.name}.*")), list(target.parent.glob(f".{target.name}.*"))
    job = check_single_job(rel, ns, spec)
    assert f"--ref-load {tb.pod_path(target)}" in job["entrypoint"]
    assert len(tb.release_jobs(rel, ns)) == 1

    # upgrade, nothing changed: convert-check finds the published result valid; no second conversion
    marker_bytes = (target / convert.MARKER).read_bytes()
    inode = target.stat().st_ino
    started = time.time()
    tb.deploy("helm4", "upgrade", rel, ns, values)
    entries = tb.journal(ns, since=started)
    assert tb.hook_steps(entries) == tb.HOOK_ORDER
    assert all(e["exitCode"] == 0 for e in entries)
    check = hook_entry(entries, "convert-check")
    # the hooks image, a real container on the real (CPU) node
    assert check["node"] == tb.REAL_NODE and check["image"] == "localhost/miles-hooks:testbed", check
    check_log = Path(check["log"]).read_text()
    assert "valid torch_dist checkpoint already published; skipping" in check_log, check_log[-3000:]
    assert "running the converter" not in check_log
    assert len(runs.read_text().splitlines()) == 1
    assert (target / convert.MARKER).read_bytes() == marker_bytes and target.stat().st_ino == inode
    assert [j["submission_id"] for j in tb.release_jobs(rel, ns)] == [job["submission_id"]]

    tb.uninstall_cleanly("helm4", rel, ns, leftovers)
    print(
        f"real convert: upgrade --install {install_s:.1f}s, "
        f"convert container {conv['end'] - conv['start']:.1f}s, "
        f"convert-check on upgrade {check['end'] - check['start']:.1f}s"
    )


def test_uninstall_stops_a_conversion_that_outlived_the_install(namespace: str, tmp_path: Path) -> None:
    """`helm install --timeout` gives up while the convert Job still runs (a converter that takes longer than
    Helm waits): the release is failed, the Job keeps its GPU. `helm uninstall` must leave no hook Job or pod
    of the release, the running convert least of all, nor any hook object a failed phase left."""
    rel, ns = "miles-slow", namespace
    models = tb.FSX_DIR / "models" / f"e2e-slow-{ns}"
    models.mkdir(parents=True)
    extra = tmp_path / "slow-convert-values.yaml"
    extra.write_text(
        yaml.safe_dump(
            {
                "model": {"hfPath": f"models/e2e-slow-{ns}/Qwen3-4B"},
                # a converter that would run for 10 minutes (the hook appends the model arguments)
                "hooks": {"convert": {"command": ["python3", "-c", "import time; time.sleep(600)"]}},
            }
        )
    )
    try:
        argv = tb.deploy_argv("helm4", "install", rel, ns, [*COLOCATED, extra])
        argv[argv.index("8m")] = "90s"
        res = tb.run(argv, check=False)
        assert res.rc != 0, res.out[-2000:]
        convert = tb.kget("jobs", ns, name=f"{rel}-convert")
        assert convert["status"].get("active") == 1, convert["status"]
        assert tb.kget("pods", ns, selector="app.kubernetes.io/component=hook-convert")["items"]

        tb.uninstall_cleanly("helm4", rel, ns, leftovers)
        # the cleanup hook itself succeeded and went, as every hook object of the release did
        assert tb.kubectl("get", "jobs", "-n", ns, "-o", "name").out.split() == []
    finally:
        shutil.rmtree(models, ignore_errors=True)
