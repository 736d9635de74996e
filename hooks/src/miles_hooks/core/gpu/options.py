"""Options, thresholds and message sizes of the GPU node checks (standard library only)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from miles_hooks.core.errors import BadInput

GIB = 1 << 30
MIB = 1 << 20

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


@dataclass(frozen=True)
class Thresholds:
    """Reference figures; a measurement passes when it reaches ``reference * tolerance``.

    The values come from the run spec's ``checks.gpu`` (the chart's values are the single source of
    the references and the tolerance) or from flags; there are no built-in figures. A figure without
    a reference (or without a tolerance) has no pass mark: it is reported, and fails only on an error
    or a wrong result. The cross-node references exist only as flags.
    """

    tolerance: float | None = None
    matmul_tflops: float | None = None
    copy_gbps: float | None = None
    allreduce_busbw_gbps: float | None = None
    sendrecv_busbw_gbps: float | None = None
    xnode_allreduce_busbw_gbps: float | None = None
    xnode_sendrecv_busbw_gbps: float | None = None

    def minimum(self, name: str) -> float | None:
        """The pass mark of one figure (``None`` when the figure has no reference)."""
        ref = getattr(self, name)
        if ref is None or self.tolerance is None:
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
    """Everything one gpu-check run needs; JSON-serialisable (it crosses process boundaries).

    The defaults here are the only defaults of the ``gpu-check`` flags (the CLI shows them).
    """

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
        raise BadInput(f"bad size {text!r}: expected a number with an optional K/M/G suffix, e.g. 64M")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if value < 1 or value != int(value):
        raise BadInput(f"bad size {text!r}: must be a whole number of bytes >= 1")
    return int(value)


def parse_sizes(text: str) -> tuple[int, ...]:
    """Message sizes: ``"1M,64M,2G"`` or a geometric sweep ``"MIN:MAX:FACTOR"`` (MAX always included).

    Sizes are rounded down to a multiple of 4 bytes (the sweeps move float32) and sorted.
    """
    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise BadInput(f"bad size sweep {text!r}: expected MIN:MAX:FACTOR, e.g. 1M:2G:4")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        try:
            factor = int(parts[2])
        except ValueError as exc:
            raise BadInput(f"bad size sweep {text!r}: FACTOR must be an integer >= 2") from exc
        if factor < 2 or lo > hi:
            raise BadInput(f"bad size sweep {text!r}: need MIN <= MAX and FACTOR >= 2")
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
            raise BadInput("empty size list")
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
            raise BadInput(f"unknown throttle reason {name!r}; known: {', '.join(THROTTLE_REASONS.values())}")
        mask |= bit
    return mask


def throttle_names(mask: int) -> list[str]:
    """Names of the reason bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


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
            raise BadInput("run spec: checks.gpu must be an object")
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
                    raise BadInput(f"run spec: checks.gpu.{key} must be a number >= 0, found {value!r}")
                thresholds[name] = float(value)
        tol = thresholds.get("tolerance")
        if tol is not None and not 0 < tol <= 1:
            raise BadInput(f"run spec: checks.gpu.tolerance must be in (0, 1], found {tol}")
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
            raise BadInput(f"run spec: GPUs per worker must be an integer >= 1, found {expected!r}")
        out["expected_gpus"] = expected
    return out


# The ``gpu-check`` flags that set a threshold, by Thresholds field (the CLI declares them).
THRESHOLD_FLAGS: dict[str, str] = {
    "tolerance": "tolerance",
    "matmul_tflops": "matmul_tflops",
    "copy_gbps": "copy_gbps",
    "allreduce_busbw_gbps": "allreduce_gbps",
    "sendrecv_busbw_gbps": "sendrecv_gbps",
    "xnode_allreduce_busbw_gbps": "xnode_allreduce_gbps",
    "xnode_sendrecv_busbw_gbps": "xnode_sendrecv_gbps",
}
DEFAULT_ALLOW_THROTTLE = "GpuIdle"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resolve(spec: Mapping[str, Any] | None, flags: Mapping[str, Any]) -> Options:
    """The options of one run: ``flags`` (the ``gpu-check`` flag values by name, None or absent when
    not given) override the run spec's settings, which override the :class:`Options` defaults."""

    def given(name: str) -> Any:
        return flags.get(name)

    settings = spec_settings(spec) if spec is not None else {}
    thresholds = dict(settings.get("thresholds", {}))
    for field_name, flag in THRESHOLD_FLAGS.items():
        value = given(flag)
        if value is None:
            continue
        if field_name != "tolerance" and value < 0:
            raise BadInput(f"{_flag(flag)} must be >= 0, found {value}")
        thresholds[field_name] = float(value)
    th = Thresholds(**thresholds)
    if th.tolerance is None:
        given_refs = [_flag(THRESHOLD_FLAGS[k]) for k, v in thresholds.items() if v is not None]
        if given_refs:
            raise BadInput(
                f"{', '.join(given_refs)}: a reference needs a tolerance; pass --tolerance, or --spec "
                "with checks.gpu.tolerance"
            )
    elif not 0 < th.tolerance <= 1:
        raise BadInput(f"--tolerance must be in (0, 1], found {th.tolerance}")
    expected = given("expected_gpus")
    if expected is None:
        expected = settings.get("expected_gpus")
    if expected is not None and expected < 1:
        raise BadInput(f"--expected-gpus must be >= 1, found {expected}")
    defaults = Options()
    counts: dict[str, int] = {}
    for name in ("iters", "warmup", "matmul_n", "matmul_iters"):
        value = given(name)
        value = getattr(defaults, name) if value is None else int(value)
        if value < (0 if name == "warmup" else 1):
            raise BadInput(f"{_flag(name)} must be >= 1, found {value}")
        counts[name] = value
    timeout = given("timeout")
    timeout = defaults.timeout_s if timeout is None else float(timeout)
    if timeout <= 0:
        raise BadInput(f"--timeout must be > 0, found {timeout}")
    log_format = given("log_format") or os.environ.get("MILES_HOOKS_LOG_FORMAT", defaults.log_format)
    return replace(
        defaults,
        thresholds=th,
        expected_gpus=expected,
        sizes=parse_sizes(given("sizes") or DEFAULT_SIZES),
        check_bytes=defaults.check_bytes if given("check_size") is None else parse_size(given("check_size")),
        copy_bytes=defaults.copy_bytes if given("copy_size") is None else parse_size(given("copy_size")),
        allowed_throttle=parse_throttle(
            DEFAULT_ALLOW_THROTTLE if given("allow_throttle") is None else given("allow_throttle")
        ),
        out_dir=given("out_dir") or defaults.out_dir,
        plot=not given("no_plot"),
        timeout_s=timeout,
        log_format=log_format,
        enabled=settings.get("enabled", True),
        spec_path=given("spec") or None,
        **counts,
    )
