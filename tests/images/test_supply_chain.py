"""What the image builds take from outside is pinned (the images are not built on these machines; this
reads the Dockerfiles and locks as they are): every base by digest, every Python file by its sha256,
no extra package index, no download without its checksum."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(REPO.glob("images/**/*Dockerfile"))
# every hashed lock the image builds install, with the requirements it resolves: the lock beside its
# requirements file, except the hooks image's, which resolves hooks/requirements.txt
LOCKS = {
    lock: REPO / "hooks" / "requirements.txt"
    if lock.name == "hooks-requirements.lock"
    else lock.with_suffix(".txt")
    for lock in sorted([*REPO.glob("images/**/*.lock"), *REPO.glob("testbed/images/**/*.lock")])
}
# locks resolved within the .venv's set: the image runs what the tests run
WITHIN_VENV = ("hooks-requirements.lock", "miles-standin")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$|@\$\{MILES_DIGEST\}$")


def instructions(path: Path) -> list[str]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def pins(text: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;\\]+)", text, re.MULTILINE):
        out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_the_images_are_found() -> None:
    assert {p.name for p in DOCKERFILES} == {"hooks.Dockerfile", "miles-efa.Dockerfile", "Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_base_is_pinned_by_digest(dockerfile: Path) -> None:
    lines = instructions(dockerfile)
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", "\n".join(lines), re.MULTILINE))
    stages = set(re.findall(r"^FROM \S+ AS (\w+)", "\n".join(lines), re.MULTILINE | re.IGNORECASE))
    for line in lines:
        if not line.upper().startswith("FROM "):
            continue
        image = line.split()[1]
        image = re.sub(r"^\$\{(\w+)\}$", lambda m: args.get(m.group(1), m.group(0)), image)
        assert image in stages or DIGEST.search(image), f"{dockerfile.name}: {line!r} is not pinned by digest"
    # a syntax directive makes BuildKit pull that front-end image before anything else
    for directive in re.findall(
        r"^#\s*syntax\s*=\s*(\S+)", dockerfile.read_text(), re.MULTILINE | re.IGNORECASE
    ):
        assert DIGEST.search(directive), f"{dockerfile.name}: front end {directive!r} is not pinned by digest"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_install_is_hash_checked_and_every_download_checksummed(dockerfile: Path) -> None:
    text = "\n".join(instructions(dockerfile))
    assert not re.search(r"extra-index-url|EXTRA_INDEX", text, re.IGNORECASE), "an extra package index"
    for install in re.findall(r"pip install[^&;]*", text):
        assert "--require-hashes" in install or "--no-index" in install, f"{dockerfile.name}: {install!r}"
    for url in re.findall(r"curl [^;&]*?(https?://\S+)", text):
        before_use = text.split(url, 1)[1].split("tar ")[0]
        assert "sha256sum -c" in before_use, f"{dockerfile.name}: {url} unchecked"
        # the checksum is required, not checked only when given: an empty one stops the build
        for var in re.findall(r'echo "\$\{(\w+)\}\s+\S+"\s*\|\s*sha256sum -c', before_use):
            assert f'if [ -n "${{{var}}}" ]' not in before_use, f"{dockerfile.name}: {var} is optional"
            assert re.search(rf'if \[ -z "\$\{{{var}\}}" \]; then.*?exit 1', before_use, re.S), (
                f"{dockerfile.name}: an empty {var} does not stop the build"
            )


@pytest.mark.parametrize("lock", list(LOCKS), ids=lambda p: str(p.relative_to(REPO)))
def test_each_lock_hashes_every_file_and_keeps_the_pinned_versions(lock: Path) -> None:
    text = lock.read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 1)[1])
    assert entries and all("--hash=sha256:" in e for e in entries), "an entry without a hash"
    locked = pins(text)
    wanted = pins(LOCKS[lock].read_text())
    assert {name: locked.get(name) for name in wanted} == wanted
    if any(part in str(lock) for part in WITHIN_VENV):
        venv = pins((REPO / "ci" / "requirements.lock").read_text())
        assert {n: v for n, v in locked.items() if n in venv and venv[n] != v} == {}
