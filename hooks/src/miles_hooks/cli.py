"""``miles-hooks``: a thin argparse layer over the step modules.

Each step validates the spec first; every :class:`HookError` becomes a logged message and its exit code
(0 ok, 1 check failed, 2 bad input/spec, 3 timeout). Step modules are imported only when their
subcommand runs, so ``convert`` and ``gpu-check`` work in the miles image without kubernetes or ray.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from miles_hooks import __version__, log
from miles_hooks.errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, BadInput, CheckFailed, HookError
from miles_hooks.spec import DEFAULT_SPEC_PATH, RunSpec

LOG = log.get("cli")

STEPS: dict[str, str] = {
    "plan": "print the resolved run (topology, placement, paths, entrypoint); --json for machines",
    "preflight": "check the cluster before install: KubeRay CRD, GPU/EFA nodes, storage, Secrets",
    "prepare-data": "ensure the model and datasets are on shared storage (download at pinned revisions)",
    "convert": "convert the HF checkpoint to torch_dist once, validated and published atomically",
    "wait-ready": "watch the RayCluster until head and all workers are Ready and the GCS is healthy",
    "verify": "check through Ray: head CPUs, gpu_node and GPUs per worker, Ray version, GPU checks",
    "submit": "submit exactly one Ray job per run spec and record its provenance",
    "status": "show the Ray job state, recent log lines and cluster health (helm test)",
    "report": "run health from the shared volume (metrics, checkpoints, provenance, free space): verdict",
    "gpu-check": "run the GPU node checks (NVML, matmul, HBM, NCCL); arguments go to miles_hooks.gpu_check",
}


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def _load(args: argparse.Namespace) -> RunSpec:
    from miles_hooks import spec  # noqa: PLC0415

    return spec.load(args.spec)


def cmd_plan(args: argparse.Namespace) -> int:
    from miles_hooks import plan  # noqa: PLC0415

    s = _load(args)
    if args.json:
        _print_json(plan.plan_json(s))
    else:
        sys.stdout.write(plan.render(s) + "\n")
    return EXIT_OK


def cmd_preflight(args: argparse.Namespace) -> int:
    from miles_hooks import preflight  # noqa: PLC0415

    findings = preflight.run(_load(args))
    if args.json:
        _print_json([f.as_dict() for f in findings])
    return EXIT_OK


def cmd_prepare_data(args: argparse.Namespace) -> int:
    from miles_hooks import prepare_data  # noqa: PLC0415

    result = prepare_data.run(_load(args), source_dir=args.source_dir)
    if args.json:
        _print_json(result)
    return EXIT_OK


def cmd_convert(args: argparse.Namespace) -> int:
    from miles_hooks import convert  # noqa: PLC0415

    result = convert.run(_load(args), timeout=args.timeout, force=args.force)
    if args.json:
        _print_json(result)
    return EXIT_OK


def cmd_wait_ready(args: argparse.Namespace) -> int:
    from miles_hooks import wait_ready  # noqa: PLC0415

    result = wait_ready.run(_load(args), timeout=args.timeout)
    if args.json:
        _print_json(result)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from miles_hooks import verify  # noqa: PLC0415

    result = verify.run(_load(args), timeout=args.timeout)
    if args.json:
        _print_json(result)
    return EXIT_OK


def cmd_submit(args: argparse.Namespace) -> int:
    from miles_hooks import submit  # noqa: PLC0415

    result = submit.run(_load(args), stop_timeout=args.stop_timeout, dry_run=args.dry_run)
    if args.json:
        _print_json(result)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from miles_hooks import status  # noqa: PLC0415

    s = _load(args)
    kube = {"auto": None, "on": True, "off": False}[args.kube]
    result = status.collect(s, log_lines=args.lines, kube=kube)
    found = status.problems(result)
    result["problems"] = found
    if args.json:
        _print_json(result)
    else:
        sys.stdout.write(status.render(result) + "\n")
    if found:
        raise CheckFailed("run status is not healthy:", found)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from miles_hooks import report  # noqa: PLC0415

    fail_on = report.parse_fail_on(args.fail_on)
    result = report.collect(_load(args), timeout=args.timeout, plot_path=args.plot)
    if args.json:
        _print_json(result)
    else:
        sys.stdout.write(report.render(result) + "\n")
    report.check(result, fail_on)
    return EXIT_OK


def cmd_gpu_check(argv: Sequence[str]) -> int:
    try:
        from miles_hooks import gpu_check  # noqa: PLC0415
    except ImportError as exc:
        LOG.error("gpu-check is not installed in this build of miles-hooks (miles_hooks.gpu_check: %s)", exc)
        return EXIT_CHECK_FAILED
    main = getattr(gpu_check, "main", None)
    if not callable(main):
        LOG.error("miles_hooks.gpu_check has no main(argv); this build of miles-hooks is incomplete")
        return EXIT_CHECK_FAILED
    return int(main(list(argv)))


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "plan": cmd_plan,
    "preflight": cmd_preflight,
    "prepare-data": cmd_prepare_data,
    "convert": cmd_convert,
    "wait-ready": cmd_wait_ready,
    "verify": cmd_verify,
    "submit": cmd_submit,
    "status": cmd_status,
    "report": cmd_report,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miles-hooks",
        description="Helm-hook steps for miles GRPO post-training on Kubernetes. "
        "Exit codes: 0 ok, 1 check failed, 2 bad input/spec, 3 timeout.",
    )
    parser.add_argument("--version", action="version", version=f"miles-hooks {__version__}")
    sub = parser.add_subparsers(dest="step", metavar="STEP", title="steps")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--spec",
        default=os.environ.get("MILES_HOOKS_SPEC", DEFAULT_SPEC_PATH),
        help=f"run spec JSON (default {DEFAULT_SPEC_PATH})",
    )
    common.add_argument(
        "--log-format",
        choices=log.FORMATS,
        default=None,
        help="text (default, or $MILES_HOOKS_LOG_FORMAT) or json lines",
    )
    common.add_argument("--json", action="store_true", help="print the step's result as JSON on stdout")
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    for name, purpose in STEPS.items():
        if name == "gpu-check":
            sub.add_parser(name, help=purpose, description=purpose, add_help=False)
            continue
        p = sub.add_parser(name, parents=[common], help=purpose, description=purpose)
        if name == "prepare-data":
            p.add_argument(
                "--source-dir",
                default=os.environ.get("MILES_HOOKS_SOURCE_DIR") or None,
                help="copy from a local HF-layout mirror instead of the hub "
                "(<dir>/models|datasets/<repo>/<revision>/...)",
            )
        if name == "convert":
            p.add_argument(
                "--timeout",
                type=float,
                default=4 * 3600.0,
                help="seconds to wait for the lock and the converter (exit 3 after)",
            )
            p.add_argument("--force", action="store_true", help="reconvert even when a valid result exists")
        if name in ("wait-ready", "verify"):
            p.add_argument(
                "--timeout",
                type=float,
                default=None,
                help="seconds (default checks.waitReadyTimeoutSeconds from the spec)",
            )
        if name == "submit":
            p.add_argument(
                "--stop-timeout",
                type=float,
                default=300.0,
                help="seconds to wait for a previous job to stop on a spec change",
            )
            p.add_argument("--dry-run", action="store_true", help="print the submission id, submit nothing")
        if name == "status":
            p.add_argument("--lines", type=int, default=20, help="job log lines to show")
            p.add_argument(
                "--kube",
                choices=("auto", "on", "off"),
                default="auto",
                help="read the RayCluster from Kubernetes too (auto: when running in a pod)",
            )
        if name == "report":
            p.add_argument(
                "--fail-on",
                default="degenerate,stalled",
                help="exit 1 on these findings: comma-separated degenerate, stalled, not-started, space; "
                "'none' only reports (default degenerate,stalled)",
            )
            p.add_argument(
                "--plot", default=None, help="also write a PNG of reward and repetition to this path"
            )
            p.add_argument(
                "--timeout",
                type=float,
                default=300.0,
                help="seconds to read the event files and checkpoint tree (exit 3 after)",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "gpu-check":
        log.setup(log.resolve_format(None))
        return cmd_gpu_check(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if not args.step:
        parser.print_help()
        return EXIT_BAD_INPUT
    log.setup(log.resolve_format(args.log_format), verbose=args.verbose)
    started = time.monotonic()
    step_log = log.get(args.step)
    try:
        code = HANDLERS[args.step](args)
    except HookError as exc:
        step_log.error(str(exc), extra={"fields": {"exit_code": exc.exit_code}})
        return exc.exit_code
    except KeyboardInterrupt:
        step_log.error("interrupted")
        return EXIT_CHECK_FAILED
    except Exception:  # a bug or an unexpected API answer: keep the traceback
        step_log.exception("unexpected error")
        return EXIT_CHECK_FAILED
    step_log.info(
        "done", extra={"fields": {"seconds": round(time.monotonic() - started, 3), "exit_code": code}}
    )
    return code


__all__ = ["STEPS", "BadInput", "build_parser", "main"]
