"""Testbed stand-in for miles' train.py: checks the derived arguments, simulates rollouts, trains nothing."""

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--num-layers", type=int, required=True)  # from model_args_utils.py: proves the expansion
    p.add_argument("--actor-num-nodes", type=int, required=True)
    p.add_argument("--actor-num-gpus-per-node", type=int, required=True)
    p.add_argument("--num-gpus-per-node", type=int, required=True)
    p.add_argument("--rollout-num-gpus", type=int, required=True)
    p.add_argument("--rollout-num-gpus-per-engine", type=int, required=True)
    p.add_argument("--colocate", action="store_true")
    p.add_argument("--hf-checkpoint", required=True)
    p.add_argument("--save", required=True)
    p.add_argument("--prompt-data", required=True)
    p.add_argument("--num-rollout", type=int, required=True)
    p.add_argument("--rollout-batch-size", type=int, required=True)
    p.add_argument("--n-samples-per-prompt", type=int, required=True)
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--num-steps-per-rollout", type=int, default=1)
    a, rest = p.parse_known_args()
    problems = []
    if a.rollout_batch_size * a.n_samples_per_prompt != a.global_batch_size * a.num_steps_per_rollout:
        problems.append(
            "rollout_batch_size x n_samples_per_prompt != global_batch_size x num_steps_per_rollout"
        )
    if a.colocate and a.rollout_num_gpus != a.actor_num_nodes * a.actor_num_gpus_per_node:
        problems.append("colocated run: rollout GPUs != actor nodes x GPUs per node")
    for path in (a.hf_checkpoint, a.prompt_data):
        if not os.path.exists(path):
            problems.append(f"{path} does not exist")
    if problems:
        print("testbed train.py: invalid arguments: " + "; ".join(problems), file=sys.stderr)
        return 2
    print(
        f"testbed train.py (stand-in, trains nothing): {a.actor_num_nodes} actor node(s), "
        f"colocate={a.colocate}, {len(rest)} other args",
        flush=True,
    )
    budget = float(os.environ.get("TESTBED_TRAIN_SECONDS", "600"))
    step = float(os.environ.get("TESTBED_ROLLOUT_SECONDS", "2"))
    start = time.monotonic()
    for i in range(a.num_rollout):
        if time.monotonic() - start >= budget:
            break
        print(f"rollout {i}: raw_reward=0.0 (simulated)", flush=True)
        time.sleep(step)
    print("testbed train.py: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
