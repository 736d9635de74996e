"""``miles-hooks``: one table of commands over the step functions.

Each entry of :data:`COMMANDS` names a step, says what it does, lists its options right there and
points at a small handler that loads the run spec, calls the step and says what to print. The shared
options (``--spec``, ``--log-format``, ``--json``, ``-v``, ``--timeout``) come from helpers below, so a
flag is spelled and documented once. Every :class:`~miles_hooks.core.errors.HookError` becomes a logged
message and its exit code: 0 ok, 1 check failed, 2 bad input/spec, 3 timeout; SIGTERM raises
:class:`~miles_hooks.core.errors.Terminated` through the step, whose cleanups run, and exits 143.

The steps import ``kubernetes``, ``ray``, ``torch`` and the like only inside the functions that use
them, so importing this module needs the standard library only: ``convert``, ``export`` and ``gpu-check``
run in the miles image, which has none of the hooks' pins.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from miles_hooks import __version__
from miles_hooks.core import log
from miles_hooks.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EXIT_TERMINATED,
    BadInput,
    CheckFailed,
    HookError,
    Terminated,
)
from miles_hooks.core.gpu import options as gpu_options
from miles_hooks.core.runspec import DEFAULT_SPEC_PATH, RunSpec, load, load_raw
from miles_hooks.steps import (
    cleanup,
    convert,
    export,
    gpu_check,
    plan,
    preflight,
    prepare_data,
    report,
    run_job,
    status,
    submit,
    verify,
    wait_ready,
)

# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Option:
    """One argparse argument: its flags and ``add_argument`` keywords. ``fallback`` computes the value
    when the flag is not given, at parse time (for defaults read from the environment or the disk)."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    fallback: Callable[[], Any] | None = None

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.kwargs)

    @property
    def dest(self) -> str:
        return str(self.kwargs.get("dest") or self.flags[-1].lstrip("-").replace("-", "_"))


def option(*flags: str, fallback: Callable[[], Any] | None = None, **kwargs: Any) -> Option:
    return Option(flags, kwargs, fallback)


def _spec_default() -> str:
    return os.environ.get("MILES_HOOKS_SPEC") or DEFAULT_SPEC_PATH


def _spec_default_if_present() -> str | None:
    env = os.environ.get("MILES_HOOKS_SPEC")
    return env or (DEFAULT_SPEC_PATH if os.path.isfile(DEFAULT_SPEC_PATH) else None)


def spec_option(optional: bool = False) -> Option:
    """``--spec``: the run spec; ``$MILES_HOOKS_SPEC`` or the mounted ConfigMap by default.

    ``optional``: a missing default file means "no spec" instead of an error, and ``--spec ''`` says
    so explicitly (gpu-check runs on a bare node too).
    """
    if not optional:
        return option("--spec", fallback=_spec_default, help=f"run spec JSON (default {DEFAULT_SPEC_PATH})")
    return option(
        "--spec",
        fallback=_spec_default_if_present,
        help="run spec JSON: checks.gpu thresholds, topology.gpusPerWorker (default $MILES_HOOKS_SPEC, "
        f"else {DEFAULT_SPEC_PATH} when it exists; '' for none)",
    )


def timeout_option(default: float | None, what: str) -> Option:
    shown = "checks.waitReadyTimeoutSeconds from the spec" if default is None else f"{default:g}"
    return option("--timeout", type=float, default=default, help=f"seconds {what} (default {shown})")


LOG_FORMAT = option(
    "--log-format",
    choices=log.FORMATS,
    default=None,
    help="text (default, or $MILES_HOOKS_LOG_FORMAT) or json lines",
)
JSON = option("--json", action="store_true", help="print the step's result as JSON on stdout")
VERBOSE = option("-v", "--verbose", action="store_true", help="debug logging")
COMMON = (spec_option(), LOG_FORMAT, JSON, VERBOSE)


def number(flag: str, what: str, kind: type = float) -> Option:
    """A gpu-check figure or count whose value, when not given, comes from the spec or the defaults."""
    return option(flag, type=kind, default=None, help=what)


# --------------------------------------------------------------------------- handlers


@dataclass
class Output:
    """What a handler hands back: the JSON-able result, the text for humans (printed when ``--json``
    is not given; None prints nothing), and a failure to raise after printing."""

    result: Any
    text: str | None = None
    failure: HookError | None = None


def _spec(args: argparse.Namespace) -> RunSpec:
    return load(args.spec)


def do_plan(args: argparse.Namespace) -> Output:
    s = _spec(args)
    return Output(plan.plan_json(s), plan.render(s))


def do_preflight(args: argparse.Namespace) -> Output:
    return Output([f.as_dict() for f in preflight.run(_spec(args))])


def do_prepare_data(args: argparse.Namespace) -> Output:
    return Output(prepare_data.run(_spec(args), source_dir=args.source_dir))


def do_convert(args: argparse.Namespace) -> Output:
    return Output(
        convert.run(_spec(args), timeout=args.timeout, force=args.force, check_only=args.check_only)
    )


def do_export(args: argparse.Namespace) -> Output:
    iteration = args.iteration if args.iteration is not None else _export_iteration_env()
    return Output(export.run(_spec(args), iteration=iteration, timeout=args.timeout, force=args.force))


def _export_iteration_env() -> int | None:
    """``$MILES_HOOKS_EXPORT_ITERATION``, set on a Job made from the export template; empty: the newest."""
    text = os.environ.get("MILES_HOOKS_EXPORT_ITERATION", "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise BadInput(
            f"MILES_HOOKS_EXPORT_ITERATION: expected a saved iteration number or empty, found {text!r}"
        )
    return int(text)


def do_wait_ready(args: argparse.Namespace) -> Output:
    return Output(wait_ready.run(_spec(args), timeout=args.timeout))


def do_verify(args: argparse.Namespace) -> Output:
    return Output(verify.run(_spec(args), timeout=args.timeout, join_wait=args.join_timeout))


def do_submit(args: argparse.Namespace) -> Output:
    return Output(submit.run(_spec(args), stop_timeout=args.stop_timeout, dry_run=args.dry_run))


def do_run_job(args: argparse.Namespace) -> Output:
    spec = _spec(args)
    run_job.keep_log(spec, dict(os.environ))
    attempt = run_job.attempt(spec, dict(os.environ))
    if not attempt.submitted and attempt.finished is None:
        verify.run(attempt.spec, timeout=args.verify_timeout)
    submitted = submit.run(attempt.spec)
    if submitted["state"] == "FINISHED":
        run_job.close_finished(attempt, submitted["latestIteration"], submit.metadata(attempt.spec.raw))
    ended = run_job.follow_to_end(attempt)
    return Output(
        {**ended, **run_job.export_on_end(attempt, ended["state"]), "created": submitted["created"]}
    )


def do_cleanup(args: argparse.Namespace) -> Output:
    return Output(cleanup.run(_spec(args), timeout=args.timeout))


def do_status(args: argparse.Namespace) -> Output:
    kube = {"auto": None, "on": True, "off": False}[args.kube]
    spec = _spec(args)
    if args.address:
        spec = spec.reached_at(args.address)
    result = status.collect(spec, log_lines=args.lines, kube=kube)
    found = status.problems(result)
    result["problems"] = found
    failure = CheckFailed("run status is not healthy:", found) if found else None
    return Output(result, status.render(result), failure)


def do_report(args: argparse.Namespace) -> Output:
    fail_on = report.parse_fail_on(args.fail_on)
    spec = _spec(args)
    if args.output_dir:
        spec = spec.read_from(args.output_dir)
    result = report.collect(spec, timeout=args.timeout, plot_path=args.plot)
    try:
        report.check(result, fail_on)
    except CheckFailed as exc:
        return Output(result, report.render(result), exc)
    return Output(result, report.render(result))


def gpu_check_options(args: argparse.Namespace) -> gpu_options.Options:
    """gpu-check's flags over the run spec's ``checks.gpu`` (read, not schema-validated: the check
    also runs on a bare node with a hand-written file)."""
    return gpu_options.resolve(load_raw(args.spec) if args.spec else None, vars(args))


def do_gpu_check(args: argparse.Namespace) -> Output:
    return Output(gpu_check.run(gpu_check_options(args)))


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Command:
    name: str
    purpose: str
    handler: Callable[[argparse.Namespace], Output]
    options: tuple[Option, ...] = ()
    common: tuple[Option, ...] = COMMON


COMMANDS: tuple[Command, ...] = (
    Command(
        "plan",
        "print the resolved run (topology, placement, paths, entrypoint); --json for machines",
        do_plan,
    ),
    Command(
        "preflight",
        "check the cluster before install: KubeRay CRD, GPU/EFA nodes, storage, Secrets",
        do_preflight,
    ),
    Command(
        "prepare-data",
        "ensure the model and datasets are on shared storage (download at pinned revisions)",
        do_prepare_data,
        (
            option(
                "--source-dir",
                fallback=lambda: os.environ.get("MILES_HOOKS_SOURCE_DIR") or None,
                help="copy from a local HF-layout mirror instead of the hub "
                "(<dir>/models|datasets/<repo>/<revision>/...)",
            ),
        ),
    ),
    Command(
        "convert",
        "convert the HF checkpoint to torch_dist once, validated and published atomically",
        do_convert,
        (
            timeout_option(convert.DEFAULT_TIMEOUT, "to wait for the lock and the converter (exit 3 after)"),
            option("--force", action="store_true", help="reconvert even when a valid result exists"),
            option(
                "--check-only",
                action="store_true",
                help="only check the published result; exit 1 naming what to do when a conversion is needed",
            ),
        ),
    ),
    Command(
        "export",
        "export a saved iteration to Hugging Face safetensors, validated, published atomically, recorded",
        do_export,
        (
            timeout_option(export.DEFAULT_TIMEOUT, "to wait for the lock and the exporter (exit 3 after)"),
            option(
                "--iteration",
                type=int,
                help="the saved iteration to export (default $MILES_HOOKS_EXPORT_ITERATION, else the newest)",
            ),
            option("--force", action="store_true", help="export again even when a valid export exists"),
        ),
    ),
    Command(
        "wait-ready",
        "watch the RayCluster until head and all workers are Ready and the GCS is healthy",
        do_wait_ready,
        (timeout_option(None, "to wait"),),
    ),
    Command(
        "verify",
        "check through Ray: head CPUs, gpu_node and GPUs per worker, Ray version, GPU checks",
        do_verify,
        (
            timeout_option(None, "to wait"),
            option(
                "--join-timeout",
                type=float,
                default=verify.JOIN_WAIT_SECONDS,
                help="seconds to wait for the GPU workers to join the Ray head before counting them",
            ),
        ),
    ),
    Command(
        "submit",
        "submit exactly one Ray job per run spec and record its provenance",
        do_submit,
        (
            option(
                "--stop-timeout",
                type=float,
                default=submit.DEFAULT_STOP_TIMEOUT,
                help="seconds to wait for a previous job to stop on a spec change",
            ),
            option("--dry-run", action="store_true", help="print the submission id, submit nothing"),
        ),
    ),
    Command(
        "run-job",
        "the RayJob's submitter (mode rayJob): verify, submit once under the job id, follow the job's log",
        do_run_job,
        (
            option(
                "--verify-timeout",
                type=float,
                default=900.0,
                help="seconds verify may take before the run is submitted",
            ),
        ),
    ),
    Command(
        "cleanup",
        "uninstall (pre-delete): delete the hook Jobs and pods the release left, wait until they are gone",
        do_cleanup,
        (timeout_option(cleanup.DEFAULT_TIMEOUT, "to wait for the pods to go (exit 3 after)"),),
    ),
    Command(
        "status",
        "show the Ray job state, recent log lines and cluster health (helm test)",
        do_status,
        (
            option("--lines", type=int, default=status.DEFAULT_LOG_LINES, help="job log lines to show"),
            option(
                "--address",
                default=None,
                help="the Ray dashboard to ask instead of the spec's in-cluster one, e.g. "
                "http://127.0.0.1:8265 through `kubectl port-forward` (the Ray token: $RAY_AUTH_TOKEN or "
                "$RAY_AUTH_TOKEN_PATH)",
            ),
            option(
                "--kube",
                choices=("auto", "on", "off"),
                default="auto",
                help="read the RayCluster from Kubernetes too (auto: when running in a pod)",
            ),
        ),
    ),
    Command(
        "report",
        "run health from the shared volume (metrics, checkpoints, provenance, free space): verdict",
        do_report,
        (
            option(
                "--fail-on",
                default=report.DEFAULT_FAIL_ON,
                help="exit 1 on these findings: comma-separated degenerate, stalled, not-started, space; "
                f"'none' only reports (default {report.DEFAULT_FAIL_ON})",
            ),
            option("--plot", default=None, help="also write a PNG of reward and repetition to this path"),
            option(
                "--output-dir",
                default=None,
                help="read the run from this directory instead of the spec's output.dir: a copy of the run "
                "directory (`kubectl cp`), or the volume mounted elsewhere",
            ),
            timeout_option(
                report.DEFAULT_TIMEOUT, "to read the event files and checkpoint tree (exit 3 after)"
            ),
        ),
    ),
    Command(
        "gpu-check",
        "run the GPU node checks (NVML, matmul, HBM, NCCL) on this node; exit 1 names the bad GPU or pair",
        do_gpu_check,
        (
            number(
                "--expected-gpus", "GPUs each node must show (default: from the spec, else not checked)", int
            ),
            number(
                "--tolerance", "fraction of each reference a figure must reach (default checks.gpu.tolerance)"
            ),
            number("--matmul-tflops", "bf16 matmul reference per GPU (default checks.gpu.matmulTflops)"),
            number("--copy-gbps", "device copy reference, read+write (default checks.gpu.copyGBps)"),
            number(
                "--allreduce-gbps",
                "intra-node all-reduce busbw reference (default checks.gpu.allReduceBusbwGBps)",
            ),
            number(
                "--sendrecv-gbps",
                "intra-node send/recv busbw reference per GPU pair (default checks.gpu.sendRecvBusbwGBps)",
            ),
            number("--xnode-allreduce-gbps", "cross-node all-reduce busbw reference (default: report only)"),
            number(
                "--xnode-sendrecv-gbps",
                "cross-node send/recv busbw reference per GPU pair (default: report only)",
            ),
            option(
                "--sizes",
                default=gpu_options.DEFAULT_SIZES,
                help="message sizes, list or MIN:MAX:FACTOR (default %(default)s)",
            ),
            option(
                "--check-size",
                default=None,
                help="bandwidth thresholds apply to the best busbw at sizes >= this (default 1G)",
            ),
            number(
                "--iters", f"timed iterations per message size (default {gpu_options.Options.iters})", int
            ),
            number(
                "--warmup", f"warm-up iterations per message size (default {gpu_options.Options.warmup})", int
            ),
            number("--matmul-n", f"square bf16 matmul size (default {gpu_options.Options.matmul_n})", int),
            number(
                "--matmul-iters",
                f"matmuls per timed window, 3 windows per GPU (default {gpu_options.Options.matmul_iters})",
                int,
            ),
            option("--copy-size", default=None, help="device copy size per GPU (default 2G)"),
            option(
                "--allow-throttle",
                default=gpu_options.DEFAULT_ALLOW_THROTTLE,
                help="NVML clock-event reasons that pass (default %(default)s)",
            ),
            option(
                "--out-dir",
                default=gpu_options.Options.out_dir,
                help="where gpu-check.json and gpu-check.png go (default %(default)s)",
            ),
            option("--no-plot", action="store_true", help="skip the PNG"),
            timeout_option(gpu_options.Options.timeout_s, "before the whole check is abandoned (exit 3)"),
        ),
        common=(spec_option(optional=True), LOG_FORMAT, JSON, VERBOSE),
    ),
)

STEPS: dict[str, str] = {c.name: c.purpose for c in COMMANDS}
BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miles-hooks",
        description="Helm-hook steps for miles GRPO post-training on Kubernetes. "
        "Exit codes: 0 ok, 1 check failed, 2 bad input/spec, 3 timeout.",
    )
    parser.add_argument("--version", action="version", version=f"miles-hooks {__version__}")
    sub = parser.add_subparsers(dest="step", metavar="STEP", title="steps")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.purpose, description=command.purpose)
        for opt in (*command.common, *command.options):
            opt.add_to(p)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` and fill in the fallbacks of the options that were not given."""
    args = build_parser().parse_args(list(argv))
    command = BY_NAME.get(args.step) if args.step else None
    for opt in (*command.common, *command.options) if command else ():
        if opt.fallback is not None and getattr(args, opt.dest) is None:
            setattr(args, opt.dest, opt.fallback())
    return args


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.step:
        build_parser().print_help()
        return EXIT_BAD_INPUT
    log.setup(log.resolve_format(args.log_format), verbose=args.verbose)
    started = time.monotonic()
    step_log = log.get(args.step)
    with _sigterm_raises():
        return _run_step(args, step_log, started)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated in the main thread for the duration (a signal handler can only be set there;
    elsewhere, and afterwards, the signal keeps its previous handling)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_step(args: argparse.Namespace, step_log: logging.Logger, started: float) -> int:
    try:
        out = BY_NAME[args.step].handler(args)
        if args.json:
            _print_json(out.result)
        elif out.text is not None:
            sys.stdout.write(out.text + "\n")
        if out.failure is not None:
            raise out.failure
    except HookError as exc:
        step_log.error(str(exc), extra={"fields": {"exit_code": exc.exit_code}})
        return exc.exit_code
    except KeyboardInterrupt:
        step_log.error("interrupted")
        return EXIT_CHECK_FAILED
    except Terminated:
        step_log.error(
            "stopped by SIGTERM (the pod is being deleted, evicted or drained); locks released and partial "
            "output removed: the Job's next pod resumes",
            extra={"fields": {"exit_code": EXIT_TERMINATED}},
        )
        return EXIT_TERMINATED
    except Exception:  # a bug or an unexpected API answer: keep the traceback
        step_log.exception("unexpected error")
        return EXIT_CHECK_FAILED
    step_log.info(
        "done", extra={"fields": {"seconds": round(time.monotonic() - started, 3), "exit_code": EXIT_OK}}
    )
    return EXIT_OK


__all__ = ["COMMANDS", "STEPS", "Command", "Option", "build_parser", "main", "parse_args"]
