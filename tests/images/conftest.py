from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from image_runtime import BuiltImage, Containerd, load_built_images


@pytest.fixture(scope="session")
def built_images() -> dict[str, BuiltImage]:
    try:
        return load_built_images()
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


# package scope: its unpacked images (gigabytes) go when tests/images is done, not at the end of the session
@pytest.fixture(scope="package")
def containerd(
    tmp_path_factory: pytest.TempPathFactory, built_images: dict[str, BuiltImage]
) -> Iterator[Containerd]:
    daemon = Containerd(tmp_path_factory.mktemp("containerd"))
    try:
        for image in built_images.values():
            imported = daemon.ctr("images", "import", str(image.archive), check=False)
            if imported.returncode != 0:
                free = shutil.disk_usage(daemon.workdir).free / 2**30
                pytest.fail(
                    f"ctr images import {image.archive} exited {imported.returncode}: "
                    f"{(imported.stderr or imported.stdout).strip()[-1500:]}\n"
                    f"{free:.1f} GiB free under {daemon.workdir}; the images unpack to several GiB each "
                    "(a testbed left up holds its own copy: make cluster-down)"
                )
        yield daemon
    finally:
        daemon.stop()
