"""Pod runner of the local testbed: the Ray worker nodes behind the simulated GPU worker pods, and the journal
of the real node's hook containers.

Every pod of the chart runs on the testbed's real node (testbed/node.sh) as a container, except the KubeRay
worker pods: they ask for GPUs and land on kwok nodes, where no process runs. So that the release's real Ray
head sees the cluster its RayCluster describes, this runner starts one real Ray worker node per such pod and
marks the pod Ready once it joined: the one imitation of a kubelet left in the testbed. Its pod watch also
feeds the journal of the real node's hook containers (it only observes them).

Usage: python -m miles_testbed.pod_runner --kubeconfig K --work-dir D --ray-temp-dir T --ray-worker-venv-bin B
       --node-netns N --node-ip IP [...]
Exit: 0 on SIGTERM/SIGINT, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
from pathlib import Path
from typing import Any

from miles_testbed.ray_workers import WorkerSettings
from miles_testbed.runner import Runner, RunnerSettings


class ArgumentError(Exception):
    """An argument the runner cannot run with; the message names it, what it expects and what it got."""


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m miles_testbed.pod_runner",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the testbed")
    ap.add_argument("--work-dir", required=True, type=Path, help="logs, the journal and the ready marker")
    ap.add_argument(
        "--hooks-image-regex",
        default="miles-hooks",
        help="journal the pods on the real node with a (init) container image matching this",
    )
    ap.add_argument("--ray-temp-dir", required=True, help="the local Ray workers' temp dirs go under it")
    ap.add_argument(
        "--ray-worker-venv-bin",
        required=True,
        type=Path,
        help="bin dir of the Python the local Ray workers run (same Ray and Python as the head's image)",
    )
    ap.add_argument(
        "--node-netns", required=True, help="network namespace of the real node (under /var/run/netns)"
    )
    ap.add_argument("--node-ip", required=True, help="the real node's address in it (the workers' node IP)")
    ap.add_argument("--max-ray-workers", type=int, default=8, help="local Ray worker nodes at most")
    ap.add_argument(
        "--ray-worker-cpus", type=int, default=2, help="CPUs a local Ray worker advertises at most"
    )
    ap.add_argument(
        "--ray-worker-port-base", type=int, default=12000, help="first port of the workers' ranges"
    )
    ap.add_argument(
        "--fake-miles", default="", help="dir bind-mounted at /root/miles for the Ray workers (none: empty)"
    )
    ap.add_argument(
        "--storage-map",
        action="append",
        default=[],
        metavar="MOUNT_PATH=LOCAL_DIR",
        help="the shared storage's mount path and its local dir, bound there for the Ray worker nodes (the "
        "worker pods mount the claim); repeatable",
    )
    ap.add_argument(
        "--host-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a dir the Ray worker nodes reach by its host path (the checkout: the Ray and contract venvs), "
        "kept visible when it lies in the host's /tmp, which a worker's own /tmp hides; repeatable",
    )
    ap.add_argument("--log-level", default="INFO")
    return ap


def settings(args: argparse.Namespace) -> tuple[RunnerSettings, WorkerSettings]:
    """The runner's and the workers' settings from parsed arguments (ArgumentError names a wrong one)."""
    try:
        hooks_image = re.compile(args.hooks_image_regex)
    except re.error as e:
        raise ArgumentError(
            f"--hooks-image-regex: expected a regular expression, got {args.hooks_image_regex!r} ({e})"
        ) from e
    if not Path(args.kubeconfig).is_file():
        raise ArgumentError(f"--kubeconfig: expected a file, {args.kubeconfig} is none (is the testbed up?)")
    if args.max_ray_workers < 0:
        raise ArgumentError(f"--max-ray-workers: expected >= 0, got {args.max_ray_workers}")
    if args.ray_worker_cpus < 1:
        raise ArgumentError(f"--ray-worker-cpus: expected >= 1, got {args.ray_worker_cpus}")
    if not (args.ray_worker_venv_bin / "ray").is_file():
        raise ArgumentError(
            f"--ray-worker-venv-bin: expected a bin dir with ray, {args.ray_worker_venv_bin} has none "
            "(run `ci/install-tools.sh rayworker`)"
        )
    binds = []
    for mapping in args.storage_map:
        mount, sep, local = mapping.partition("=")
        if not sep or not mount.startswith("/") or not local.startswith("/"):
            raise ArgumentError(f"--storage-map: expected /mount/path=/local/dir, got {mapping!r}")
        binds.append((local, mount.rstrip("/") or "/"))
    # the worker pod's volumes as its container would see them: the shared storage and the miles checkout the
    # image carries (FAKE_MILES=0: none, and the submitted jobs fail)
    if args.fake_miles:
        binds.append((str(Path(args.fake_miles).resolve()), "/root/miles"))
    for path in args.host_path:
        if not Path(path).is_absolute() or not Path(path).is_dir():
            raise ArgumentError(f"--host-path: expected an absolute path of a dir, got {path!r}")
    work_dir = args.work_dir.resolve()
    workers = WorkerSettings(
        node_netns=args.node_netns,
        node_ip=args.node_ip,
        temp_dir=args.ray_temp_dir,
        binds=binds,
        work_dir=work_dir,
        venv_bin=args.ray_worker_venv_bin,
        cpus=args.ray_worker_cpus,
        limit=args.max_ray_workers,
        port_base=args.ray_worker_port_base,
        host_paths=[str(Path(p).resolve()) for p in args.host_path],
    )
    return RunnerSettings(args.kubeconfig, work_dir, hooks_image), workers


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        runner_settings, worker_settings = settings(args)
    except ArgumentError as e:
        print(f"pod_runner: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout
    )
    runner_settings.work_dir.mkdir(parents=True, exist_ok=True)
    (runner_settings.work_dir / "ready").unlink(missing_ok=True)
    runner = Runner(runner_settings, worker_settings)

    def stop(_sig: int, _frame: Any) -> None:
        runner.shutdown()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
