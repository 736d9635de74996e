"""What the miles image carries, read from the image itself on the cluster before any download.

Upstream pins no Ray version in its image (its Dockerfile installs an unpinned ``ray[default]``), and Ray
refuses to join a node of another Ray or Python version, so neither the docs nor the chart can know the
image's Ray in advance. prepare-data therefore runs the release's miles image once, as a short pod without a
GPU on the pool that runs the Ray head (the GPU workers' pool when the chart runs no head), which prints the
versions that matter from the installed distributions' metadata (nothing is imported: a few MiB and well
under a second, where importing torch would need GiBs). A Ray version other than ``rayCluster.rayVersion``
stops the release there, before any download or conversion, naming both; the versions go to the run's
provenance. The pod waits for its image to be pulled, so this also proves the image runs on that pool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from miles_hooks.core import fsutil, image_pull, kube, log, probe_pods
from miles_hooks.core.errors import CheckFailed
from miles_hooks.core.runspec_types import RawSpec

LOG = log.get("prepare-data")

COMPONENT = "hook-image-facts"
FINAL = ("read", "failed", "unscheduled")
KEYS = ("python", "ray", "torch", "cuda", "sglang", "megatron", "miles")

# Runs in the miles image as `python3 -c`, as nobody on a read-only root: the versions as one JSON object
# in the container's termination message (the kubelet keeps it in the pod's status, 4 KiB at most).
REPORT_SCRIPT = r"""
import importlib.metadata as md, importlib.util as iu, json, os, platform, re, sys

def dist(*names):
    for name in names:
        try:
            return md.version(name)
        except Exception:
            pass
    return None

def source(module, filename, pattern):
    try:
        spec = iu.find_spec(module)
    except Exception:
        return None
    for where in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(where, filename)) as f:
                found = re.search(pattern, f.read(), re.M)
        except OSError:
            continue
        if found:
            return ".".join(g for g in found.groups() if g)
    return None

facts = {
    "python": platform.python_version(),
    "ray": dist("ray"),
    "torch": dist("torch"),
    "cuda": source("torch", "version.py", r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]"),
    # setuptools-scm writes sglang/_version.py at build time; a source tree without it has no version
    "sglang": dist("sglang")
    or source("sglang", "_version.py", r"^__version__\b[^=\n]*=[^'\"\n]*['\"]([^'\"]+)['\"]"),
    "megatron": dist("megatron-core", "megatron_core") or source(
        "megatron.core", "package_info.py", r"^MAJOR\s*=\s*(\d+)\s*\nMINOR\s*=\s*(\d+)\s*\nPATCH\s*=\s*(\d+)"
    ),
    "miles": dist("miles", "miles-rl"),
}
out = sys.argv[1] if len(sys.argv) > 1 else "/dev/termination-log"
with open(out, "w") as f:
    json.dump(facts, f)
print(json.dumps(facts))
"""


@dataclass(frozen=True)
class Facts:
    image: str
    pool: str
    pod: str
    versions: dict[str, str | None]

    def describe(self) -> str:
        shown = ", ".join(f"{k} {self.versions.get(k) or 'unknown'}" for k in KEYS)
        return f"{self.image} on the {self.pool} pool carries {shown}"

    def as_dict(self) -> dict[str, Any]:
        return {"image": self.image, "pool": self.pool, "pod": self.pod, "versions": self.versions}


def parse(message: str) -> dict[str, str | None]:
    """The report's JSON, each known key a version string or None; anything else is refused."""
    try:
        doc = json.loads(message)
    except ValueError:
        raise ValueError(f"not JSON: {message[:200]!r}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, found {type(doc).__name__}")
    return {k: (str(doc[k]) if doc.get(k) is not None else None) for k in KEYS}


def judge(pod: dict[str, Any]) -> tuple[str, str]:
    """(state, detail): read once the report's container ended with its message; failed on a pull error or
    a report that did not run; else what the image check would say (pulling, unscheduled)."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated")
        if ended is None:
            continue
        if ended.get("exitCode") == 0 and ended.get("message"):
            return "read", str(ended["message"])
        said = (ended.get("message") or "").strip()[:300] or "no output"
        return "failed", (
            f"the version report exited {ended.get('exitCode')} ({ended.get('reason') or 'no reason'}): "
            f"{said}; the image needs a python3 on its PATH"
        )
    state, detail = image_pull.judge(pod)
    return ("pulling", detail) if state == "pulled" else (state, detail)


def report_pod(raw: RawSpec) -> tuple[str, dict[str, Any]]:
    """(pool name, pod) of the one report pod: on the Ray head's pool, else the GPU workers'."""
    pool_name, pool = next(iter(image_pull.pools(raw).items()))
    body = image_pull.probe_pod(raw, pool_name, pool, purpose="image-facts", component=COMPONENT)
    container = body["spec"]["containers"][0]
    container["command"] = ["python3", "-c", REPORT_SCRIPT]
    # the image's WORKDIR (/root/miles upstream) is closed to nobody; the report needs none
    container["workingDir"] = "/"
    container["env"] = [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]
    return pool_name, body


def read(api: kube.Api, raw: RawSpec) -> Facts:
    """Runs the report pod and waits for its answer (pulling the image first, up to the spec's timeout)."""
    pool_name, body = report_pod(raw)
    timeout = raw["prepare"]["imageFacts"]["timeoutSeconds"]
    LOG.info(
        "reading the miles image's versions on the cluster (its pull may take minutes on a cold node)",
        extra={"fields": {"image": raw["images"]["miles"], "pool": pool_name, "timeoutSeconds": timeout}},
    )
    answers = probe_pods.run(
        api, raw, COMPONENT, {pool_name: body}, judge, FINAL, float(timeout), "image facts"
    )
    pod, state, detail = answers[pool_name]
    image = raw["images"]["miles"]
    if state == "read":
        try:
            versions = parse(detail)
        except ValueError as exc:
            raise CheckFailed(f"the version report of {image} (pod {pod}) is unreadable: {exc}") from None
        return Facts(image, pool_name, pod, versions)
    what = {
        "failed": "failed",
        "unscheduled": "found no node",
        probe_pods.DELETED: "ended early",
    }.get(state, f"had no answer after {timeout}s (hooks.prepareData.imageFactsTimeoutSeconds)")
    raise CheckFailed(
        f"the version report of {image} on the {pool_name} pool {what}: {detail}; expected the image to "
        "start there as nobody without a GPU (check image.repository, image.tag or image.digest, "
        "imagePullSecrets), or set hooks.prepareData.imageFacts=false to skip this check"
    )


def ray_mismatch(facts: Facts, raw: RawSpec) -> str | None:
    """Why the image cannot join the Ray cluster the chart declares, or None."""
    declared = raw["rayCluster"]["rayVersion"]
    found = facts.versions.get("ray")
    image = raw["images"]["miles"]
    if found is None:
        return (
            f"{image} has no Ray installed (no `ray` distribution in its python3); expected Ray {declared} "
            "(rayCluster.rayVersion): choose an image with Ray (image.repository, image.tag)"
        )
    if found != declared:
        return (
            f"{image} carries Ray {found}, but rayCluster.rayVersion is {declared}: Ray refuses a node of "
            f"another version, so the cluster could never form. Set rayCluster.rayVersion={found}, or choose "
            f"an image with Ray {declared} (image.tag or image.digest)"
        )
    return None


def check(api: kube.Api, raw: RawSpec) -> Facts:
    """Reads the image's versions and refuses one whose Ray the cluster cannot run."""
    facts = read(api, raw)
    LOG.info(facts.describe(), extra={"fields": {"versions": facts.versions}})
    # in mode singleNode Ray runs inside one pod of this image: no other node to disagree with
    problem = ray_mismatch(facts, raw) if raw["rayCluster"]["enabled"] else None
    if problem:
        raise CheckFailed(problem)
    return facts


def recorded(raw: RawSpec) -> dict[str, Any] | None:
    """What prepare-data recorded for this spec's miles image, or None (off, not yet read, another image)."""
    wanted = raw["prepare"]["imageFacts"]
    found = fsutil.read_json(wanted["file"]) if wanted["enabled"] else None
    if isinstance(found, dict) and found.get("image") == raw["images"]["miles"]:
        return found
    return None
