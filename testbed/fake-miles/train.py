"""Testbed stand-in for miles' train.py: upstream's own argument parser checks the argv, then rollouts
are simulated; nothing is trained.

The arguments go through the real ``miles.utils.arguments.parse_args`` (PyPI miles-rl in the contract
venv that `make tools` builds, driven by ci/miles-contract/parse_argv.py), with this job's environment,
the run's real paths on the shared storage and the HF config.json prepare-data fetched. The environment of
the Ray worker nodes (where the job's driver runs) names the interpreter and the driver
(``MILES_CONTRACT_PYTHON``, ``MILES_CONTRACT_DRIVER``; testbed/up.sh sets them).
"""

import json
import os
import subprocess
import sys
import time

# The GPUs of the product's nodes (H100/H200) as Megatron's device probes see them.
HOPPER = {"major": 9, "minor": 0}


def parse_with_upstream(argv: list[str]) -> dict:
    python = os.environ.get("MILES_CONTRACT_PYTHON", "")
    driver = os.environ.get("MILES_CONTRACT_DRIVER", "")
    if not (os.path.exists(python) and os.path.exists(driver)):
        raise SystemExit(
            f"testbed train.py: MILES_CONTRACT_PYTHON={python!r} / MILES_CONTRACT_DRIVER={driver!r} do not "
            "name the contract venv's python and parse_argv.py (testbed/up.sh sets them; run `make tools`)"
        )
    # The job's PYTHONPATH starts with /root/miles, which here is this stand-in: keep it away from the
    # interpreter that imports the real miles package.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    doc = {"argv": argv, "env": env, "device": HOPPER}
    done = subprocess.run(
        [python, driver], input=json.dumps(doc), env=env, capture_output=True, text=True, check=False
    )
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise SystemExit(
            f"testbed train.py: parse_argv.py exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        ) from None


def main() -> int:
    result = parse_with_upstream(sys.argv[1:])
    if not result["ok"]:
        print("\n".join(result.get("log") or []), file=sys.stderr)
        print(
            f"testbed train.py: miles' own parser refused the arguments at {result['stage']} "
            f"({result.get('where')}): {result.get('error')}",
            file=sys.stderr,
        )
        return 2
    a = result["args"]
    print(
        "testbed train.py (stand-in, trains nothing): miles' parser accepted the arguments: "
        f"{a['actor_num_nodes']} actor node(s) x {a['actor_num_gpus_per_node']} GPUs, "
        f"colocate={a['colocate']}, "
        f"TP{a['tensor_model_parallel_size']} PP{a['pipeline_model_parallel_size']} "
        f"EP{a['expert_model_parallel_size']}, {a['rollout_num_gpus']} rollout GPUs",
        flush=True,
    )
    budget = float(os.environ.get("TESTBED_TRAIN_SECONDS", "600"))
    step = float(os.environ.get("TESTBED_ROLLOUT_SECONDS", "2"))
    start = time.monotonic()
    for i in range(a["num_rollout"]):
        if time.monotonic() - start >= budget:
            break
        print(f"rollout {i}: raw_reward=0.0 (simulated)", flush=True)
        time.sleep(step)  # the simulated rollout itself
    print("testbed train.py: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
