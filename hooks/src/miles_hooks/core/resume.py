"""What a new job of this release does with the checkpoints already in its output directory.

Every train command passes ``--load <output.checkpointDir>``: a job resumes from the newest complete
checkpoint there (the tracker ``latest_checkpointed_iteration.txt``, written last after a save). So before
anything long runs (prepare-data, the first step with the shared volume) the directory is judged:

- no checkpoint: the run starts at rollout 0 from the converted model;
- a checkpoint of this release and model, below ``recipe.numRollout``: the run continues after it;
- a finished run (its newest checkpoint is rollout ``numRollout - 1`` or later): refused, since the job
  would load it, train nothing and report success;
- checkpoints the provenance record attributes to another release or another model (repo or revision),
  or that no record explains: refused unless ``output.adoptCheckpoints``, since the job would train on
  from someone else's weights.

``submit`` records the same judgement in the provenance record.

One case is not a new job at all: the run's own job saved its last checkpoint and then vanished before Ray
could call it finished (its Ray head was lost while the driver, on a worker, saved the last rollout). The
provenance record names this very run (``runId``) and the checkpoints are complete: ``finished_here`` says
so, and submit and run-job report the run finished instead of refusing it or training it again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miles_hooks.core import fsutil
from miles_hooks.core.errors import BadInput, CheckFailed
from miles_hooks.core.runspec_types import RawSpec

TRACKER = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True)
class Resume:
    action: str  # "start" | "continue" | "adopt"
    checkpoint_dir: str
    latest_iteration: int | None
    num_rollout: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "checkpointDir": self.checkpoint_dir,
            "latestIteration": self.latest_iteration,
            "numRollout": self.num_rollout,
        }

    def describe(self) -> str:
        if self.latest_iteration is None:
            start = "the run starts at rollout 0 from the converted model"
            return f"no checkpoint in {self.checkpoint_dir}: {start}"
        taken = " (adopted: output.adoptCheckpoints)" if self.action == "adopt" else ""
        return (
            f"{self.checkpoint_dir} holds checkpoint iteration {self.latest_iteration}{taken}: the run "
            f"continues at rollout {self.latest_iteration + 1} of recipe.numRollout={self.num_rollout}"
        )


def latest_iteration(checkpoint_dir: Path) -> int | None:
    """The tracker's iteration; None when the directory holds no complete checkpoint."""
    tracker = checkpoint_dir / TRACKER
    try:
        text = tracker.read_text("utf-8", errors="replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise CheckFailed(
            f"output.dir: {tracker} cannot be read: {exc.strerror}; expected it readable by the hooks user "
            f"(uid {os.getuid()}): the checkpoint directory decides what the run does, so it is not guessed"
        ) from exc
    if text.isdigit():
        return int(text)
    found = text if len(text) <= 40 else text[:37] + "..."
    raise BadInput(
        f"output.dir: {tracker} says {found!r}: expected a rollout number (a run's --save directory); "
        + (
            "this is a converted torch_dist checkpoint. "
            if text == "release"
            else "the tracker is not one miles writes. "
        )
        + "Set output.dir to a run directory of its own"
    )


def foreign_writer(raw: RawSpec, record: Any) -> str | None:
    """Who else wrote the checkpoints, by the provenance record: None when this release and model did."""
    if not isinstance(record, dict):
        return f"a run no provenance record explains ({raw['output']['provenanceFile']} is absent)"
    release = record.get("release") or {}
    here = raw["release"]
    if (release.get("namespace"), release.get("name")) != (here["namespace"], here["name"]):
        return f"release {release.get('namespace')}/{release.get('name')}"
    model = record.get("model") or {}
    ours = raw["model"]
    if (model.get("repoId"), model.get("revision")) != (ours["repoId"], ours["revision"]):
        theirs = f"{model.get('repoId')}@{model.get('revision')}"
        return f"model {theirs} (this release trains {ours['repoId']}@{ours['revision']})"
    return None


def finished_here(raw: RawSpec) -> int | None:
    """The last checkpoint's iteration when this very run (the provenance record's ``runId``) saved it and
    it ends the run (rollout ``numRollout`` or later); None otherwise."""
    latest = latest_iteration(Path(raw["output"]["checkpointDir"]))
    if latest is None or latest + 1 < int(raw["resume"]["numRollout"]):
        return None
    record = fsutil.read_json(raw["output"]["provenanceFile"])
    if not isinstance(record, dict) or record.get("runId") != raw["run"]["id"]:
        return None
    return latest


def describe_finished(raw: RawSpec, latest: int) -> str:
    return (
        f"the run finished: {raw['output']['checkpointDir']} holds its checkpoint iteration {latest}, "
        f"rollout {latest + 1} of recipe.numRollout={raw['resume']['numRollout']}, saved by this run's own "
        "job (the provenance record's runId); nothing is left to train"
    )


def decide(raw: RawSpec) -> Resume:
    """The judgement above; BadInput (exit 2) naming the values to set when the directory is refused."""
    checkpoint_dir = Path(raw["output"]["checkpointDir"])
    num_rollout = int(raw["resume"]["numRollout"])
    latest = latest_iteration(checkpoint_dir)
    if latest is None:
        return Resume("start", str(checkpoint_dir), None, num_rollout)
    action = "continue"
    writer = foreign_writer(raw, fsutil.read_json(raw["output"]["provenanceFile"]))
    if writer is not None:
        if not raw["resume"]["adoptCheckpoints"]:
            raise BadInput(
                f"output.dir {raw['output']['dir']} holds checkpoints up to iteration {latest} "
                f"of {writer}; a job of this release would train on from them. Set output.dir to a directory "
                "of its own to start a new run, or output.adoptCheckpoints=true to train on from them"
            )
        action = "adopt"
    if latest + 1 >= num_rollout:
        raise BadInput(
            f"output.dir {raw['output']['dir']} holds a finished run: its checkpoint "
            f"iteration {latest} is rollout {latest + 1} of recipe.numRollout={num_rollout}, so a new job "
            "would load it, train nothing and report success. Set recipe.numRollout above "
            f"{latest + 1} to train further, or output.dir to a new directory to start a new run"
        )
    return Resume(action, str(checkpoint_dir), latest, num_rollout)
