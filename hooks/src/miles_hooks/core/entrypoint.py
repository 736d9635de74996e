"""The Ray job's entrypoint command and entrypoint resources, built from the run spec.

Shared by ``plan`` (which shows them) and ``submit`` (which submits them); standard library only.
"""

from __future__ import annotations

import posixpath
import shlex

from miles_hooks.core.model_args import expand_model_args
from miles_hooks.core.runspec_types import RawSpec


def build_entrypoint(raw: RawSpec) -> str:
    """The job entrypoint: one ``bash -c`` that expands the profile's model args and runs training.

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
            f"cd {shlex.quote(workdir)}",
            *expand_model_args(raw),
            f"exec python3 {shlex.quote(script)} $MODEL_ARGS" + (f" {args}" if args else ""),
        ]
    )
    return "bash -c " + shlex.quote(body)


def entrypoint_resources(raw: RawSpec) -> dict[str, float]:
    return {str(k): float(v) for k, v in raw["submit"]["entrypointResources"].items()}
