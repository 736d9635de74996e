"""Testbed stand-in for miles' tools/convert_hf_to_torch_dist.py: checks how the convert hook calls it, then
runs our small CPU test converter (dcp_converter.py beside it), which writes a REAL
torch.distributed.checkpoint directory (``<save>/release/`` + ``latest_checkpointed_iteration.txt``) with the
shapes of the HF config. It loads no weights and converts nothing real.

The miles stand-in image carries this directory at ``/root/miles``: the convert pod runs it there, on the
testbed's real node.
"""

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(allow_abbrev=False)
    # from model_args_utils.py (the profile's args, expanded by the hook): proves the expansion
    p.add_argument("--num-layers", type=int, required=True)
    p.add_argument("--hidden-size", type=int, required=True)
    p.add_argument("--vocab-size", type=int)
    # appended by the convert hook
    p.add_argument("--hf-checkpoint", required=True)
    p.add_argument("--save", required=True)
    a, rest = p.parse_known_args()
    converter = Path(__file__).with_name("dcp_converter.py")
    problems = []
    try:
        config = json.loads((Path(a.hf_checkpoint) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        config = {}
        problems.append(f"{a.hf_checkpoint}/config.json is not readable JSON: {exc}")
    # upstream builds the Megatron model from the model args and loads the HF weights into it: they must agree
    for arg, key in (
        ("num_layers", "num_hidden_layers"),
        ("hidden_size", "hidden_size"),
        ("vocab_size", "vocab_size"),
    ):
        want = getattr(a, arg)
        if config and want is not None and config.get(key) != want:
            problems.append(f"--{arg.replace('_', '-')} {want} but config.json {key}={config.get(key)}")
    if not Path(a.save).is_dir():
        problems.append(f"--save {a.save}: not a directory (the hook creates it next to the target)")
    if problems:
        print("testbed convert_hf_to_torch_dist.py: invalid call: " + "; ".join(problems), file=sys.stderr)
        return 2
    print(
        f"testbed convert_hf_to_torch_dist.py (stand-in, no real weights): {a.num_layers} layers, hidden "
        f"{a.hidden_size}, {len(rest)} other model args; running the test DCP converter {converter}",
        flush=True,
    )
    os.execv(sys.executable, [sys.executable, str(converter), *sys.argv[1:]])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
