"""Testbed stand-in for miles' train.py: upstream's own argument parser checks the argv, then rollouts
are simulated; nothing is trained.

The arguments go through the real ``miles.utils.arguments.parse_args`` (PyPI miles-rl in the contract
venv that `make tools` builds, driven by ci/miles-contract/parse_argv.py), with this job's environment,
the run's real paths on the shared storage and the HF config.json prepare-data fetched. The environment of
the Ray worker nodes (where the job's driver runs) names the interpreter and the driver
(``MILES_CONTRACT_PYTHON``, ``MILES_CONTRACT_DRIVER``; testbed/up.sh sets them).

Checkpoints follow Megatron's layout: ``<save>/iter_<7 digits>/`` holds ``stand-in.json`` and, when
``--ref-load`` holds a real torch.distributed.checkpoint (``release/.metadata``), a copy of its files (the
model's tensors, untrained: what the exporter converts), and the tracker
``<save>/latest_checkpointed_iteration.txt`` is replaced atomically once the iteration's directory is
complete. As upstream numbers them, a save after rollout ``i`` is iteration
``i``; it happens when ``(i + 1) % --save-interval == 0`` and after the last rollout. A run whose ``--load``
holds a tracker resumes at rollout N + 1 (N = the tracker's iteration); otherwise it starts at rollout 0
(from ``--ref-load``).

With ``--use-tensorboard`` it logs what miles logs per rollout into ``$TENSORBOARD_DIR`` (the chart sets
it): ``rollout/raw_reward`` (rising from 0.2) and ``rollout/repetition_frac`` (0.02), written by TensorBoard's
own event writer in the contract venv, so ``miles-hooks report`` reads a real event file.

Testbed-only fault injection: when ``<output dir>/testbed-flat-reward`` exists, every reward is 0.0 (a
degenerate run, which ``report`` must fail). When ``<save>/../testbed-fail-once`` (the run's output dir)
exists after a save, the stand-in removes that marker and exits 1, so the job's first attempt fails after a
checkpoint and the next one runs through; the e2e tests use it to show that a retried job resumes. When
``<output dir>/testbed-hold-after-save`` names the iteration just saved, the stand-in removes it and never
returns (a driver busy in a long rollout, or one that saved the run's last checkpoint and has yet to end):
the e2e tests delete its Ray head then. Upstream has no such hooks.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The GPUs of the product's nodes (H100/H200) as Megatron's device probes see them.
HOPPER = {"major": 9, "minor": 0}

TRACKER = "latest_checkpointed_iteration.txt"
FAIL_ONCE = "testbed-fail-once"
HOLD_AFTER_SAVE = "testbed-hold-after-save"
FLAT_REWARD = "testbed-flat-reward"
REWARD = "rollout/raw_reward"
REPETITION = "rollout/repetition_frac"
# Fed one JSON [tag, step, value] per line; TensorBoard's writer, as miles' SummaryWriter uses it.
EVENT_WRITER = """
import json, sys, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
writer = EventFileWriter(sys.argv[1])
for line in sys.stdin:
    tag, step, value = json.loads(line)
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.flush()
writer.close()
"""


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


def given_flag(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` on the command line; the last one wins, as in argparse (Megatron's parser
    allows no abbreviations)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(f"{flag}="):
            value = arg.removeprefix(f"{flag}=")
    return value


def latest_iteration(load: str | None) -> int | None:
    """The iteration ``<load>``'s tracker names, or None when there is no tracker (nothing saved yet)."""
    if not load:
        return None
    tracker = Path(load) / TRACKER
    try:
        found = tracker.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return int(found)
    except ValueError:
        # Megatron would load "release" as a converted checkpoint; a run's --load holding one is a
        # misconfiguration (--load pointing at the --ref-load dir), so it fails loudly like any other.
        print(
            f"testbed train.py: {tracker}: expected an iteration number, found {found!r}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


def saves_after(rollout_id: int, save_interval: int | None, num_rollout: int) -> bool:
    """Whether miles saves after ``rollout_id`` (upstream's should_run_periodic_action)."""
    if not save_interval or save_interval <= 0:
        return False
    return (rollout_id + 1) % save_interval == 0 or rollout_id == num_rollout - 1


def save_checkpoint(save: str, iteration: int, ref_load: str | None = None) -> Path:
    """Write ``iter_<iteration>/`` under ``save``, then point the tracker at it; returns the iter dir."""
    root = Path(save)
    iter_dir = root / f"iter_{iteration:07d}"
    iter_dir.mkdir(parents=True, exist_ok=True)
    model = Path(ref_load or "/nonexistent") / "release"
    if (model / ".metadata").is_file():
        for src in model.iterdir():
            if src.is_file():
                shutil.copyfile(src, iter_dir / src.name)
    doc = {"iteration": iteration, "note": "testbed stand-in checkpoint"}
    (iter_dir / "stand-in.json").write_text(json.dumps(doc) + "\n")
    # A reader (the next attempt, the report hook) must never see a tracker that is half written or
    # names an iteration whose directory is not there yet: write it beside, then rename over.
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{TRACKER}.", suffix=".tmp")
    try:
        # the mode Megatron's plain open() leaves under umask 022 (mkstemp's is 0600): the hooks, another
        # user, read the tracker
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(str(iteration))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / TRACKER)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return iter_dir


def fail_once_marker(save: str) -> Path:
    """Where the fault-injection marker lives: the run's output dir, the parent of the checkpoint dir."""
    return Path(save).parent / FAIL_ONCE


def take_fail_once(save: str) -> Path | None:
    """Remove the marker and return its path when it was there; None otherwise. Removing it before
    failing is what lets the next attempt run through."""
    marker = fail_once_marker(save)
    try:
        marker.unlink()
    except FileNotFoundError:
        return None
    return marker


def take_hold(save: str, iteration: int) -> Path | None:
    """Remove the hold marker and return its path when it names ``iteration``; None otherwise."""
    marker = Path(save).parent / HOLD_AFTER_SAVE
    try:
        named = marker.read_text().strip()
    except FileNotFoundError:
        return None
    if named != str(iteration):
        return None
    marker.unlink(missing_ok=True)
    return marker


class Scalars:
    """miles' per-rollout TensorBoard scalars, through a writer process of the contract venv's python."""

    def __init__(self, logdir: str) -> None:
        python = os.environ.get("MILES_CONTRACT_PYTHON", "")
        Path(logdir).mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([python, "-c", EVENT_WRITER, logdir], stdin=subprocess.PIPE, text=True)

    def add(self, tag: str, step: int, value: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([tag, step, value]) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        if self.proc.wait(timeout=60) != 0:
            raise SystemExit(f"testbed train.py: the TensorBoard writer exited {self.proc.returncode}")


def simulated_reward(rollout_id: int, num_rollout: int, flat: bool) -> float:
    return 0.0 if flat else round(0.2 + 0.5 * rollout_id / max(1, num_rollout - 1), 4)


def main() -> int:
    argv = sys.argv[1:]
    result = parse_with_upstream(argv)
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
    # Not the parsed load: when --load holds no tracker, miles' parser replaces it with --ref-load, whose
    # converted checkpoint's tracker says "release".
    load = given_flag(argv, "--load")
    save, save_interval, num_rollout = a["save"], a["save_interval"], a["num_rollout"]
    latest = latest_iteration(load)
    first = 0 if latest is None else latest + 1
    if latest is not None:
        said = f"loaded checkpoint iteration {latest} from {load} (resuming at rollout {first})"
    else:
        said = f"no checkpoint in {load}; starting at rollout 0 from {a['ref_load']}"
    print(f"testbed train.py: {said}", flush=True)

    budget = float(os.environ.get("TESTBED_TRAIN_SECONDS", "600"))
    step = float(os.environ.get("TESTBED_ROLLOUT_SECONDS", "2"))
    flat = bool(save) and (Path(save).parent / FLAT_REWARD).exists()
    tensorboard = os.environ.get("TENSORBOARD_DIR") if "--use-tensorboard" in argv else None
    scalars = Scalars(tensorboard) if tensorboard else None
    try:
        return rollouts(
            first=first,
            num_rollout=num_rollout,
            save=save,
            save_interval=save_interval,
            budget=budget,
            step=step,
            flat=flat,
            scalars=scalars,
            ref_load=a["ref_load"],
        )
    finally:
        if scalars is not None:
            scalars.close()


def rollouts(
    *,
    first: int,
    num_rollout: int,
    save: str | None,
    save_interval: int | None,
    budget: float,
    step: float,
    flat: bool,
    scalars: Scalars | None,
    ref_load: str | None,
) -> int:
    start = time.monotonic()
    for i in range(first, num_rollout):
        if time.monotonic() - start >= budget:
            break
        reward = simulated_reward(i, num_rollout, flat)
        print(f"rollout {i}: raw_reward={reward} (simulated)", flush=True)
        time.sleep(step)  # the simulated rollout itself
        if scalars is not None:
            scalars.add(REWARD, i, reward)
            scalars.add(REPETITION, i, 0.02)
        if not (save and saves_after(i, save_interval, num_rollout)):
            continue
        save_checkpoint(save, i, ref_load)
        print(f"testbed train.py: saved checkpoint iteration {i} to {save}", flush=True)
        if marker := take_fail_once(save):
            print(
                f"testbed train.py: failing on purpose after saving iteration {i} ({marker}, removed)",
                file=sys.stderr,
                flush=True,
            )
            return 1
        if marker := take_hold(save, i):
            print(f"testbed train.py: holding after saving iteration {i} ({marker}, removed)", flush=True)
            while True:
                time.sleep(3600)
    print("testbed train.py: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
