"""Resumes Megatron's optimiser schedule across a change of values; runs inside the contract venv (miles-rl).

Reads one JSON document on stdin:
  runs      {name: parse document}: each goes through the real parser as ci/miles-contract/parse_argv.py runs
            it (miles' parse_args, validation included), in this one process
  resumes   [[saved, resumed, {field: value}]]: a scheduler built by miles' own get_optimizer_param_scheduler
            from run ``saved``'s args steps ``steps`` times and saves its state; one built from run
            ``resumed``'s
            args, with the given fields replaced, loads that state
  steps     optimizer steps before the save

Writes one JSON object to stdout: {"runs": {name: {"ok", "error"}}, "resumes": [{"loaded", "max_lr",
"lr_decay_steps", "lr_decay_style"} or {"loaded": false, "error"}]}.
"""

from __future__ import annotations

import contextlib
import json
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci" / "miles-contract"))

import parse_argv  # noqa: E402


def main() -> int:
    doc = json.loads(sys.stdin.read())
    parsed: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    # parse_argv.run reports chosen fields only: keep the whole Namespace miles' parse_args returns
    from miles.utils import arguments

    real = arguments.parse_args
    returned: list[Any] = []

    def keep(*a: Any, **kw: Any) -> Any:
        returned.append(real(*a, **kw))
        return returned[-1]

    arguments.parse_args = keep
    try:
        for name, run_doc in doc["runs"].items():
            returned.clear()
            ok, result = parse_argv.run(run_doc)
            runs[name] = {"ok": ok, "error": result.get("error")}
            if ok:
                parsed[name] = returned[-1]
    finally:
        arguments.parse_args = real

    import torch
    from miles.backends.megatron_utils.model import get_optimizer_param_scheduler

    def scheduler(args: Namespace) -> Any:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
        return get_optimizer_param_scheduler(args, optimizer)

    resumes = []
    for saved_name, resumed_name, replace in doc["resumes"]:
        saved_args = parsed[saved_name]
        saved = scheduler(Namespace(**vars(saved_args)))
        saved.step(increment=doc["steps"] * saved_args.global_batch_size)
        resumed = scheduler(Namespace(**{**vars(parsed[resumed_name]), **replace}))
        try:
            with contextlib.redirect_stdout(sys.stderr):
                resumed.load_state_dict(saved.state_dict())
        except AssertionError as exc:
            resumes.append({"loaded": False, "error": str(exc)})
            continue
        resumes.append(
            {
                "loaded": True,
                "max_lr": resumed.max_lr,
                "lr_decay_steps": resumed.lr_decay_steps,
                "lr_decay_style": resumed.lr_decay_style,
                "override": parsed[resumed_name].override_opt_param_scheduler,
                "use_checkpoint": parsed[resumed_name].use_checkpoint_opt_param_scheduler,
            }
        )
    sys.stdout.write(json.dumps({"runs": runs, "resumes": resumes}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
