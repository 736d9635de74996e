from __future__ import annotations

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
            daemon.ctr("images", "import", str(image.archive))
        yield daemon
    finally:
        daemon.stop()
