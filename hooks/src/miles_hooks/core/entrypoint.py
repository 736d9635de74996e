"""The Ray job's entrypoint command and entrypoint resources, built from the run spec.

Shared by ``plan`` (which shows them) and ``submit`` (which submits them); standard library only.
"""

from __future__ import annotations

import posixpath
import shlex

from miles_hooks.core.model_args import expand_model_args
from miles_hooks.core.runspec_types import RawSpec


def build_entrypoint(raw: RawSpec) -> str:
    """The job entrypoint: one ``bash -c`` that keeps the driver's log on the shared volume, expands the
    profile's model args and runs training.

    The model args command runs in the same shell as the train command, its output is split into
    words (globbing off), and every train argument is quoted, so a value with spaces or quotes reaches
    ``train.py`` as one argument.
    """
    train = raw["train"]
    workdir = str(train["workdir"])
    script = posixpath.join(workdir, str(train["entrypoint"]))
    args = " ".join(shlex.quote(str(a)) for a in train["args"])
    body = "; ".join(
        [
            "set -eo pipefail",
            *keep_driver_log(raw),
            f"cd {shlex.quote(workdir)}",
            *expand_model_args(raw),
            f"exec python3 {shlex.quote(script)} $MODEL_ARGS" + (f" {args}" if args else ""),
        ]
    )
    return "bash -c " + shlex.quote(body)


def driver_log_glob(raw: RawSpec) -> str:
    """Where every attempt's driver log of this run lies (one file per start, named by its UTC time)."""
    return posixpath.join(str(raw["submit"]["logDir"]), f"{raw['submit']['submissionId']}-*.log")


def keep_driver_log(raw: RawSpec) -> list[str]:
    """Shell lines that copy the driver's output (stdout and stderr) into a file of this start under
    ``submit.logDir`` on the shared volume, while Ray still gets it: Ray's own job log goes with its head,
    and in mode rayJob a failed attempt's submitter pod, which showed it, goes with the attempt."""
    log_dir = str(raw["submit"]["logDir"])
    name = shlex.quote(f"{raw['submit']['submissionId']}-") + '"$(date -u +%Y%m%dT%H%M%SZ)".log'
    return [
        f"mkdir -p {shlex.quote(log_dir)}",
        f"exec > >(tee -a {shlex.quote(log_dir)}/{name}) 2>&1",
    ]


def entrypoint_resources(raw: RawSpec) -> dict[str, float]:
    return {str(k): float(v) for k, v in raw["submit"]["entrypointResources"].items()}
