"""The shell lines that expand the profile's model args before a command in the miles image.

Shared by submit's job entrypoint and convert's converter call (standard library only: convert runs
inside the miles image). The model args command runs in the same shell, its output is split into
words with globbing off (``--moe-layer-freq [1,1,...]`` is a glob pattern), and a failure or an empty
output stops the shell with a message that says what to change.
"""

from __future__ import annotations

import shlex

from miles_hooks.core.runspec_types import RawSpec


def expand_model_args(raw: RawSpec) -> list[str]:
    """Shell statements leaving the model args in ``$MODEL_ARGS`` (to be used unquoted)."""
    command = str(raw["train"]["modelArgsCommand"])
    profile = str(raw["model"]["profile"])
    failed = shlex.quote(
        f"miles-hooks: the model args command for profile {profile} failed (its error is above): "
        f"{command}. Either model.profile names no profile of this miles image, or the image is "
        "older than miles v0.1.0 and lacks miles/utils/external_utils/model_args_utils.py (added "
        "upstream on 2026-08-09): set image.tag to v0.1.0 or newer"
    )
    empty = shlex.quote(
        f"miles-hooks: the model args command for profile {profile} printed nothing "
        "(run spec field train.modelArgsCommand)"
    )
    return [
        f"MODEL_ARGS=$({command}) || {{ echo {failed} >&2; exit 2; }}",
        f'if [ -z "${{MODEL_ARGS//[[:space:]]/}}" ]; then echo {empty} >&2; exit 2; fi',
        "set -f",
    ]
