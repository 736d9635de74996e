"""The hooks and reward-service images as built from the product's own Dockerfiles (testbed/images/build.sh),
run by a real containerd + runc: the user, entrypoint and read-only root the chart relies on, every
module the image ships importable inside it, and nothing of the build's trust material or any credential
left in a layer. Also the testbed's stand-in for the miles image: the Ray the chart expects, where KubeRay
looks for it."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from image_runtime import NAMESPACE, BuiltImage, Containerd

# One worker runs them all under `make test`: the containerd they share imports the images (minutes).
pytestmark = pytest.mark.xdist_group("built-images")


REPO = Path(__file__).resolve().parents[2]
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
# a writable /tmp as the chart gives every container (an emptyDir)
TMP = "type=tmpfs,src=tmpfs,dst=/tmp,options=rw:nosuid:nodev:mode=1777"
CREDENTIAL_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|CREDENTIAL", re.I)
CREDENTIAL_FILES = re.compile(
    r"(^|/)(pip\.conf|\.netrc|\.git-credentials|\.pypirc|\.docker/config\.json|id_rsa|id_ed25519)$"
)


def run(
    containerd: Containerd, image: BuiltImage, name: str, *command: str, env: tuple[str, ...] = ()
) -> str:
    """Runs ``command`` (or the image's entrypoint with these arguments) read-only, as the image's user."""
    args = ["run", "--rm", "--read-only", "--mount", TMP]
    for item in env:
        args += ["--env", item]
    result = containerd.ctr(*args, image.ref, name, *command, check=False)
    assert result.returncode == 0, (
        f"{command} in {image.ref}: exit {result.returncode}\n{result.stdout}{result.stderr}"
    )
    return result.stdout


@pytest.mark.parametrize(
    ("name", "entrypoint"), [("miles-hooks", ["miles-hooks"]), ("miles-reward", ["miles-reward"])]
)
def test_config_runs_as_the_unprivileged_user_the_chart_sets(
    built_images: dict[str, BuiltImage], name: str, entrypoint: list[str]
) -> None:
    config = built_images[name].oci_config()["config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == entrypoint
    for item in config.get("Env", []):
        assert not CREDENTIAL_ENV.search(item.split("=", 1)[0]), f"{name} image sets {item.split('=', 1)[0]}"


def test_pause_image_is_built_like_upstreams(
    containerd: Containerd, built_images: dict[str, BuiltImage]
) -> None:
    """The real node's pod sandbox: a static binary FROM scratch, as build/pause of the pinned Kubernetes."""
    pause = built_images["pause"]
    assert pause.ref.startswith("registry.k8s.io/pause:")
    config = pause.oci_config()["config"]
    assert (config["User"], config["Entrypoint"]) == ("65535:65535", ["/pause"])
    assert [path for path, _ in pause.layer_files()] == ["pause"]
    version = run(containerd, pause, "pause-version", "/pause", "-v")
    assert version.strip() == f"pause.c v{pause.ref.rsplit(':', 1)[1]}-miles-testbed"


def test_hooks_image_runs_read_only_as_10001(
    containerd: Containerd, built_images: dict[str, BuiltImage]
) -> None:
    hooks = built_images["miles-hooks"]
    assert run(containerd, hooks, "hooks-version", "miles-hooks", "--version").startswith("miles-hooks ")
    probe = run(
        containerd,
        hooks,
        "hooks-fs",
        "sh",
        "-c",
        "id -u; touch /opt/miles-hooks/x 2>/dev/null && echo root-writable;"
        " touch /tmp/x && echo tmp-writable",
    )
    assert probe.split() == ["10001", "tmp-writable"]


def test_every_hooks_module_imports_inside_the_image(
    containerd: Containerd, built_images: dict[str, BuiltImage]
) -> None:
    """A dependency missing from the image's lock, or a module the Dockerfile leaves out, fails here."""
    script = (
        "import importlib, pkgutil, miles_hooks\n"
        "names = [m.name for m in pkgutil.walk_packages(miles_hooks.__path__, 'miles_hooks.')]\n"
        "[importlib.import_module(n) for n in names]\n"
        "import ray.job_submission, kubernetes\n"
        "print(len(names))\n"
    )
    imported = run(containerd, built_images["miles-hooks"], "hooks-imports", "python", "-c", script)
    assert int(imported) >= 20
    # the convert Job's init container copies this pure-Python copy into the miles image
    listing = run(
        containerd, built_images["miles-hooks"], "hooks-pkg", "ls", "/opt/miles-hooks/pkg/miles_hooks"
    )
    assert "cli.py" in listing.split() or "__init__.py" in listing.split()


def test_miles_standin_has_the_charts_ray_where_kuberay_runs_it(
    containerd: Containerd, built_images: dict[str, BuiltImage]
) -> None:
    """KubeRay starts the head and workers with `ray start` from PATH (its probes are HTTP GETs from Ray
    2.53 on, no wget needed): the stand-in has the chart's rayCluster.rayVersion in the system Python, as
    the miles image has, and /root/miles as the submitted job expects it."""
    values = yaml.safe_load((REPO / "charts" / "miles" / "values.yaml").read_text())
    probe = run(
        containerd,
        built_images["miles-standin"],
        "standin-ray",
        "sh",
        "-c",
        "id -u; command -v ray; ray --version; ls /root/miles",
    )
    uid, ray_path, version_line, *listing = probe.split("\n")
    assert uid == "0"  # as miles runs
    assert ray_path == "/usr/local/bin/ray"
    assert version_line.endswith(f"version {values['rayCluster']['rayVersion']}"), version_line
    assert {"train.py", "train_async.py", "miles", "tools"} <= set(listing)


def test_miles_standin_converts_as_the_convert_pod_runs_it(
    containerd: Containerd, built_images: dict[str, BuiltImage]
) -> None:
    """The convert pod runs the stand-in converter at /root/miles/tools (a real torch.distributed.checkpoint
    from a tiny HF config) and the hook reads its .metadata back with torch: both work in the read-only image,
    torch from the image's own lock (CUDA build, no GPU needed), writing only to the output dir."""
    script = (
        "set -e; mkdir -p /tmp/hf /tmp/out; "
        'echo \'{"vocab_size": 256, "hidden_size": 16, "num_hidden_layers": 2}\' > /tmp/hf/config.json; '
        "python3 /root/miles/tools/convert_hf_to_torch_dist.py --num-layers 2 --hidden-size 16 "
        "--vocab-size 256 --hf-checkpoint /tmp/hf --save /tmp/out; "
        "python3 -c 'import torch.distributed.checkpoint as d; "
        'print(sorted(d.FileSystemReader("/tmp/out/release").read_metadata().state_dict_metadata))\'; '
        "cat /tmp/out/latest_checkpointed_iteration.txt"
    )
    out = run(containerd, built_images["miles-standin"], "standin-convert", "sh", "-c", script)
    assert "embedding.word_embeddings.weight" in out and "output_layer.weight" in out, out
    assert out.rstrip().endswith("release"), out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _post(port: int, path: str, body: object) -> tuple[int, object]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _ready(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/ready")
        ready = connection.getresponse().status == 200
        connection.close()
        return ready
    except OSError:
        return False


def test_reward_image_serves_read_only_and_drains_on_sigterm(
    containerd: Containerd, built_images: dict[str, BuiltImage]
) -> None:
    reward = built_images["miles-reward"]
    port = _free_port()
    task = "reward-serve"
    args = ["run", "--rm", "--read-only", "--net-host", "--mount", TMP, "--env", f"REWARD_PORT={port}"]
    server = subprocess.Popen(
        ["ctr", "--address", str(containerd.socket), "--namespace", NAMESPACE, *args, reward.ref, task],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _ready(port):
            assert server.poll() is None, (
                f"the reward service exited {server.returncode}: "
                f"{server.stdout.read() if server.stdout else ''}"
            )
            assert time.monotonic() < deadline, "the reward service was not ready within 120 s"
            time.sleep(0.2)
        status, reply = _post(port, "/score", {"response": "$\\boxed{12}$", "label": "12"})
        assert (status, reply) == (200, 1.0)
        containerd.ctr("task", "kill", "--signal", "SIGTERM", task)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            containerd.ctr("task", "kill", "--signal", "SIGKILL", task, check=False)
            server.wait(timeout=30)


def _host_local_cas() -> list[bytes]:
    """PEM bodies of the CAs this machine added to its trust store (build.sh bind-mounts them into RUN
    steps)."""
    bodies = []
    for path in sorted(HOST_CA_DIR.glob("*.crt")):
        match = re.search(rb"-----BEGIN CERTIFICATE-----(.+?)-----END", path.read_bytes(), re.S)
        if match:
            bodies.append(b"".join(match.group(1).split()))
    return bodies


@pytest.mark.parametrize("name", ["miles-hooks", "miles-reward", "miles-standin"])
def test_no_build_trust_material_or_credential_in_any_layer(
    built_images: dict[str, BuiltImage], name: str
) -> None:
    local_cas = [body[:200] for body in _host_local_cas()]
    found = []

    def suspect(path: str) -> bool:
        return bool(CREDENTIAL_FILES.search(path)) or path.endswith((".crt", ".pem"))

    for path, content in built_images[name].layer_files(read=suspect):
        # an empty file is a mount point the build left (build.sh bind-mounts pip.conf into RUN steps)
        if CREDENTIAL_FILES.search(path) and content.strip():
            found.append(f"{path} ({len(content)} bytes)")
        if path.endswith((".crt", ".pem")) and local_cas:
            flat = b"".join(content.split())
            found += [f"{path} (this machine's own CA)" for body in local_cas if body in flat]
    assert not found, f"{name} image layers hold: {found}"
