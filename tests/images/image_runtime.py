"""The images `make tools` built (testbed/images/build.sh) and a real container runtime to run them in: a
private containerd (Debian's, with runc) with its own root and socket, so nothing is shared with any other
containerd on the machine. (A uniquely named module: every test tier has its own conftest.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / ".tools" / "images" / "manifest.json"
NAMESPACE = "miles-image-tests"


@dataclass(frozen=True)
class BuiltImage:
    name: str
    ref: str
    archive: Path

    def oci_config(self) -> dict[str, Any]:
        """The image's OCI config (User, Entrypoint, Env, ...) read from its archive."""
        with tarfile.open(self.archive) as tar:
            config: dict[str, Any] = json.load(_member(tar, _blob(_manifest(tar)["config"]["digest"])))
            return config

    def layer_files(self, read: Callable[[str], bool] = lambda _path: True) -> Iterator[tuple[str, bytes]]:
        """(path, content) of every regular file in every layer, the lower layers first; the content is read
        only where ``read(path)`` holds (b"" elsewhere: the miles stand-in's layers hold 5.9 GB)."""
        with tarfile.open(self.archive) as tar:
            for layer in _manifest(tar)["layers"]:
                blob = tar.extractfile(_blob(layer["digest"]))
                assert blob is not None
                with tarfile.open(fileobj=blob, mode="r|*") as layer_tar:
                    for entry in layer_tar:
                        if entry.isfile():
                            data = layer_tar.extractfile(entry) if read(entry.name) else None
                            yield entry.name, data.read() if data is not None else b""


def _blob(digest: str) -> str:
    algorithm, hexdigest = digest.split(":", 1)
    return f"blobs/{algorithm}/{hexdigest}"


def _manifest(tar: tarfile.TarFile) -> Any:
    """The image manifest of a one-image OCI archive."""
    index = json.load(_member(tar, "index.json"))
    return json.load(_member(tar, _blob(index["manifests"][0]["digest"])))


def _member(tar: tarfile.TarFile, name: str) -> Any:
    member = tar.extractfile(name)
    assert member is not None, f"{name} missing from the archive"
    return member


def load_built_images() -> dict[str, BuiltImage]:
    """The images in .tools/images/manifest.json that have an OCI archive (the base image has none)."""
    if not MANIFEST.is_file():
        raise FileNotFoundError(
            f"{MANIFEST} is missing: `make tools` builds the images (testbed/images/build.sh)"
        )
    entries = json.loads(MANIFEST.read_text())
    images = {
        name: BuiltImage(name, entry["image"], Path(entry["archive"]))
        for name, entry in entries.items()
        if "archive" in entry
    }
    for image in images.values():
        if not image.archive.is_file():
            raise FileNotFoundError(f"{image.archive} is missing: run testbed/images/build.sh")
    return images


class Containerd:
    """A containerd daemon of the test session's own, driven through its `ctr` client."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "containerd.sock"
        config = workdir / "config.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{workdir / "root"}"\n'
            f'state = "{workdir / "state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.socket}"\n'
            f'[ttrpc]\n  address = "{workdir / "containerd.sock.ttrpc"}"\n'
        )
        self.log = (workdir / "containerd.log").open("w")
        self.process = subprocess.Popen(
            ["containerd", "--config", str(config)], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while self.ctr("version", check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start: see {workdir / 'containerd.log'}")
            time.sleep(0.2)

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        # containerd leaves its snapshot mounts behind when it stops: unmount them before the folder goes
        mounts = Path("/proc/mounts").read_text().splitlines()
        for mount_point in sorted((line.split()[1] for line in mounts), reverse=True):
            if mount_point.startswith(str(self.workdir)):
                subprocess.run(["umount", "-l", mount_point], check=False)
        # the unpacked images (the miles stand-in alone is 5 GB): pytest keeps the last runs' temp folders
        shutil.rmtree(self.workdir / "root", ignore_errors=True)
