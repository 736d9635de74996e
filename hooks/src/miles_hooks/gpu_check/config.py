"""Options, thresholds and message sizes of the GPU node checks (standard library only)."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20

# Figures measured on the lent nvidia-h200-x2 machine (two H200 over NV18, NCCL 2.28.9,
# torch 2.11): see shared/reference/facts.md, "GPU figures measured here".  The default
# minimum of each check is the reference figure times the tolerance.
REFERENCE_MATMUL_TFLOPS = 779.0
REFERENCE_COPY_GBPS = 4285.0
REFERENCE_ALLREDUCE_BUSBW_GBPS = 333.0
REFERENCE_SENDRECV_BUSBW_GBPS = 363.0
DEFAULT_TOLERANCE = 0.85
LINK_LIMIT_NV18_GBPS = 450.0  # 18 NVLink4 links x 25 GB/s per direction

DEFAULT_SIZES = "1M:2G:4"
DEFAULT_CHECK_BYTES = GIB

# NVML clock-event ("throttle") reason bits.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
THROTTLE_BITS: dict[str, int] = {name.lower(): bit for bit, name in THROTTLE_REASONS.items()}


class ConfigError(ValueError):
    """Bad flag or run spec: the CLI exits 2."""


@dataclass(frozen=True)
class Thresholds:
    """Reference figures; a measurement passes when it reaches ``reference * tolerance``.

    The cross-node references have no measured default: when unset, cross-node figures are
    reported and a node pair fails only on an error or a wrong result.
    """

    tolerance: float = DEFAULT_TOLERANCE
    matmul_tflops: float = REFERENCE_MATMUL_TFLOPS
    copy_gbps: float = REFERENCE_COPY_GBPS
    allreduce_busbw_gbps: float = REFERENCE_ALLREDUCE_BUSBW_GBPS
    sendrecv_busbw_gbps: float = REFERENCE_SENDRECV_BUSBW_GBPS
    xnode_allreduce_busbw_gbps: float | None = None
    xnode_sendrecv_busbw_gbps: float | None = None

    def minimum(self, name: str) -> float | None:
        """The pass mark of one figure (``None`` when the figure has no reference)."""
        ref = getattr(self, name)
        if ref is None:
            return None
        return float(ref) * self.tolerance

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        out["minimum"] = {
            name: self.minimum(name)
            for name in (
                "matmul_tflops",
                "copy_gbps",
                "allreduce_busbw_gbps",
                "sendrecv_busbw_gbps",
                "xnode_allreduce_busbw_gbps",
                "xnode_sendrecv_busbw_gbps",
            )
        }
        return out


@dataclass(frozen=True)
class Options:
    """Everything one gpu-check run needs; JSON-serialisable (it crosses process boundaries)."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    expected_gpus: int | None = None
    sizes: tuple[int, ...] = ()
    check_bytes: int = DEFAULT_CHECK_BYTES
    iters: int = 20
    warmup: int = 5
    matmul_n: int = 8192
    matmul_iters: int = 20
    copy_bytes: int = 2 * GIB
    allowed_throttle: int = 0x1
    out_dir: str = "/tmp/miles-gpu-check"
    plot: bool = True
    timeout_s: float = 600.0
    log_format: str = "text"
    enabled: bool = True
    spec_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        out["sizes"] = list(self.sizes)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Options:
        values = dict(data)
        values["thresholds"] = Thresholds(**values.get("thresholds", {}))
        values["sizes"] = tuple(int(s) for s in values.get("sizes", ()))
        return cls(**values)


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": MIB, "G": GIB, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864.  Suffixes K/M/G/T are binary (KiB, MiB, ...); a plain number is bytes."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ConfigError(f"bad size {text!r}: expected a number with an optional K/M/G suffix, e.g. 64M")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1 or value != int(value):
        raise ConfigError(f"bad size {text!r}: must be a whole number of bytes >= 1")
    return int(value)


def parse_sizes(text: str) -> tuple[int, ...]:
    """Message sizes: ``"1M,64M,2G"`` or a geometric sweep ``"MIN:MAX:FACTOR"`` (MAX always included).

    Sizes are rounded down to a multiple of 4 bytes (the sweeps move float32) and sorted.
    """
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise ConfigError(f"bad size sweep {text!r}: expected MIN:MAX:FACTOR, e.g. 1M:2G:4")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        try:
            factor = int(parts[2])
        except ValueError as exc:
            raise ConfigError(f"bad size sweep {text!r}: FACTOR must be an integer >= 2") from exc
        if factor < 2 or lo > hi:
            raise ConfigError(f"bad size sweep {text!r}: need MIN <= MAX and FACTOR >= 2")
        sizes = []
        size = lo
        while size <= hi:
            sizes.append(size)
            size *= factor
        if sizes[-1] != hi:
            sizes.append(hi)
    else:
        sizes = [parse_size(part) for part in text.split(",") if part.strip()]
        if not sizes:
            raise ConfigError("empty size list")
    rounded = sorted({max(4, s - s % 4) for s in sizes})
    return tuple(rounded)


def parse_throttle(text: str) -> int:
    """``"GpuIdle,SwPowerCap"`` or ``"0x5"`` -> bit mask of the NVML clock-event reasons allowed."""
    text = text.strip()
    if not text or text.lower() == "none":
        return 0
    if text.lower().startswith("0x") or text.isdigit():
        return int(text, 0)
    mask = 0
    for name in text.split(","):
        bit = THROTTLE_BITS.get(name.strip().lower())
        if bit is None:
            raise ConfigError(
                f"unknown throttle reason {name!r}; known: {', '.join(THROTTLE_REASONS.values())}"
            )
        mask |= bit
    return mask


def throttle_names(mask: int) -> list[str]:
    """Names of the reason bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


def load_spec(path: str | Path) -> dict[str, Any]:
    """Read a run spec (JSON).  Validation against the schema is the CLI's job; here only the keys used."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read run spec {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"run spec {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"run spec {path}: top level must be an object")
    return data


def spec_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The gpu-check settings a run spec carries: ``checks.gpu`` and the GPUs each worker pod sees.

    Returns keys ``enabled``, ``thresholds`` (a dict of Thresholds fields) and ``expected_gpus``
    (``topology.gpusPerWorker``, else ``checks.nodes.gpusPerNode``), each only when present.
    """
    out: dict[str, Any] = {}
    checks = spec.get("checks", {})
    gpu = checks.get("gpu") if isinstance(checks, Mapping) else None
    if gpu is not None:
        if not isinstance(gpu, Mapping):
            raise ConfigError("run spec: checks.gpu must be an object")
        keys = {
            "tolerance": "tolerance",
            "matmulTflops": "matmul_tflops",
            "copyGBps": "copy_gbps",
            "allReduceBusbwGBps": "allreduce_busbw_gbps",
            "sendRecvBusbwGBps": "sendrecv_busbw_gbps",
        }
        thresholds: dict[str, float] = {}
        for key, name in keys.items():
            if key in gpu:
                value = gpu[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ConfigError(f"run spec: checks.gpu.{key} must be a number >= 0, found {value!r}")
                thresholds[name] = float(value)
        tol = thresholds.get("tolerance")
        if tol is not None and not 0 < tol <= 1:
            raise ConfigError(f"run spec: checks.gpu.tolerance must be in (0, 1], found {tol}")
        out["thresholds"] = thresholds
        if "enabled" in gpu:
            out["enabled"] = bool(gpu["enabled"])
    expected: Any = None
    topology = spec.get("topology")
    if isinstance(topology, Mapping):
        expected = topology.get("gpusPerWorker")
    if expected is None and isinstance(checks, Mapping) and isinstance(checks.get("nodes"), Mapping):
        expected = checks["nodes"].get("gpusPerNode")
    if expected is not None:
        if isinstance(expected, bool) or not isinstance(expected, int) or expected < 1:
            raise ConfigError(f"run spec: GPUs per worker must be an integer >= 1, found {expected!r}")
        out["expected_gpus"] = expected
    return out


DEFAULT_SPEC_PATH = "/etc/miles/run.json"


def _default_spec() -> str | None:
    env = os.environ.get("MILES_HOOKS_SPEC")
    if env:
        return env
    return DEFAULT_SPEC_PATH if os.path.isfile(DEFAULT_SPEC_PATH) else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="miles-hooks gpu-check",
        description=(
            "GPU node checks: NVML health, per-GPU bf16 matmul and copy bandwidth, NCCL all-reduce and "
            "send/recv per node and across nodes. Exit 0 pass, 1 a check failed, 2 bad input, 3 timeout."
        ),
    )
    p.add_argument(
        "--spec",
        default=_default_spec(),
        help="run spec JSON: checks.gpu thresholds, topology.gpusPerWorker (default $MILES_HOOKS_SPEC, "
        f"else {DEFAULT_SPEC_PATH} when it exists)",
    )
    p.add_argument("--log-format", choices=("text", "json"), default=None)
    p.add_argument(
        "--expected-gpus",
        type=int,
        help="GPUs each node must show (default: from the spec, else not checked)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        help=f"fraction of each reference a figure must reach (default {DEFAULT_TOLERANCE})",
    )
    p.add_argument(
        "--matmul-tflops",
        type=float,
        help=f"bf16 matmul reference per GPU (default {REFERENCE_MATMUL_TFLOPS})",
    )
    p.add_argument(
        "--copy-gbps", type=float, help=f"device copy reference, read+write (default {REFERENCE_COPY_GBPS})"
    )
    p.add_argument(
        "--allreduce-gbps",
        type=float,
        help=f"intra-node all-reduce busbw reference (default {REFERENCE_ALLREDUCE_BUSBW_GBPS})",
    )
    p.add_argument(
        "--sendrecv-gbps",
        type=float,
        help=f"intra-node send/recv busbw reference per GPU pair (default {REFERENCE_SENDRECV_BUSBW_GBPS})",
    )
    p.add_argument(
        "--xnode-allreduce-gbps",
        type=float,
        help="cross-node all-reduce busbw reference (default: report only)",
    )
    p.add_argument(
        "--xnode-sendrecv-gbps",
        type=float,
        help="cross-node send/recv busbw reference per GPU pair (default: report only)",
    )
    p.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        help=f"message sizes, list or MIN:MAX:FACTOR (default {DEFAULT_SIZES})",
    )
    p.add_argument(
        "--check-size",
        default="1G",
        help="bandwidth thresholds apply to the best busbw at sizes >= this (default 1G)",
    )
    p.add_argument("--iters", type=int, default=20, help="timed iterations per message size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up iterations per message size (default 5)")
    p.add_argument("--matmul-n", type=int, default=8192, help="square bf16 matmul size (default 8192)")
    p.add_argument(
        "--matmul-iters",
        type=int,
        default=20,
        help="matmuls per timed window, 3 windows per GPU (default 20)",
    )
    p.add_argument("--copy-size", default="2G", help="device copy size per GPU (default 2G)")
    p.add_argument(
        "--allow-throttle", default="GpuIdle", help="NVML clock-event reasons that pass (default GpuIdle)"
    )
    p.add_argument(
        "--out-dir", default="/tmp/miles-gpu-check", help="where gpu-check.json and gpu-check.png go"
    )
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds before the whole check is abandoned (exit 3)"
    )
    return p


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{name} must be > 0, found {value}")


def parse_args(argv: Sequence[str]) -> Options:
    """Flags override the run spec, which overrides the built-in H200 references."""
    args = build_parser().parse_args(list(argv))
    settings: dict[str, Any] = {}
    if args.spec:
        settings = spec_settings(load_spec(args.spec))
    base = Thresholds(**settings.get("thresholds", {}))
    overrides = {
        "tolerance": args.tolerance,
        "matmul_tflops": args.matmul_tflops,
        "copy_gbps": args.copy_gbps,
        "allreduce_busbw_gbps": args.allreduce_gbps,
        "sendrecv_busbw_gbps": args.sendrecv_gbps,
        "xnode_allreduce_busbw_gbps": args.xnode_allreduce_gbps,
        "xnode_sendrecv_busbw_gbps": args.xnode_sendrecv_gbps,
    }
    for name, value in overrides.items():
        if name != "tolerance" and value is not None and value < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, found {value}")
    thresholds = replace(base, **{k: v for k, v in overrides.items() if v is not None})
    if not 0 < thresholds.tolerance <= 1:
        raise ConfigError(f"--tolerance must be in (0, 1], found {thresholds.tolerance}")
    expected = args.expected_gpus if args.expected_gpus is not None else settings.get("expected_gpus")
    if expected is not None and expected < 1:
        raise ConfigError(f"--expected-gpus must be >= 1, found {expected}")
    for name in ("iters", "warmup", "matmul_n", "matmul_iters"):
        value = getattr(args, name)
        if value < (0 if name == "warmup" else 1):
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, found {value}")
    _positive("--timeout", args.timeout)
    return Options(
        thresholds=thresholds,
        expected_gpus=expected,
        sizes=parse_sizes(args.sizes),
        check_bytes=parse_size(args.check_size),
        iters=args.iters,
        warmup=args.warmup,
        matmul_n=args.matmul_n,
        matmul_iters=args.matmul_iters,
        copy_bytes=parse_size(args.copy_size),
        allowed_throttle=parse_throttle(args.allow_throttle),
        out_dir=args.out_dir,
        plot=not args.no_plot,
        timeout_s=args.timeout,
        log_format=args.log_format or os.environ.get("MILES_HOOKS_LOG_FORMAT", "text"),
        enabled=settings.get("enabled", True),
        spec_path=args.spec,
    )
