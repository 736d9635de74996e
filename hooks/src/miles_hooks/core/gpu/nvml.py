"""NVML health of every GPU the node shows (nvidia-ml-py, imported lazily).

Returns plain data; ``verdict.health_failures`` decides what fails.  A query the GPU does not
support (for example retired pages on Hopper, which uses row remapping) is recorded as ``None``
with the reason under ``unreadable`` and is not a failure by itself, except for temperature and
power, which must be readable.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def node_health() -> dict[str, Any]:
    """Query NVML once for the whole node."""
    try:
        pynvml: Any = importlib.import_module("pynvml")
    except ImportError as exc:  # the miles image ships nvidia-ml-py; say so plainly if it does not
        return {"error": f"nvidia-ml-py (pynvml) not importable: {exc}", "device_count": None, "gpus": []}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"error": f"nvmlInit failed: {exc}", "device_count": None, "gpus": []}
    try:
        out: dict[str, Any] = {"error": None}
        out["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            out["cuda_driver_version"] = _cuda_version(int(pynvml.nvmlSystemGetCudaDriverVersion_v2()))
        except Exception:
            out["cuda_driver_version"] = None
        count = int(pynvml.nvmlDeviceGetCount())
        out["device_count"] = count
        out["gpus"] = [_gpu(pynvml, i) for i in range(count)]
        return out
    except Exception as exc:
        return {"error": f"NVML query failed: {exc}", "device_count": None, "gpus": []}
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _gpu(nv: Any, index: int) -> dict[str, Any]:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    unreadable: dict[str, str] = {}

    def read(key: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as exc:
            unreadable[key] = str(exc) or type(exc).__name__
            return None

    gpu: dict[str, Any] = {"index": index}
    gpu["name"] = read("name", lambda: _text(nv.nvmlDeviceGetName(handle)))
    gpu["uuid"] = read("uuid", lambda: _text(nv.nvmlDeviceGetUUID(handle)))
    gpu["pci_bus_id"] = read("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(handle).busId))
    gpu["memory_total_gib"] = read(
        "memory_total_gib", lambda: nv.nvmlDeviceGetMemoryInfo(handle).total / 2**30
    )
    mode = read("ecc_mode", lambda: nv.nvmlDeviceGetEccMode(handle))
    gpu["ecc_mode"] = None if mode is None else bool(mode[0])
    if gpu["ecc_mode"]:
        gpu["ecc_uncorrected_volatile"] = read(
            "ecc_uncorrected_volatile",
            lambda: int(
                nv.nvmlDeviceGetTotalEccErrors(
                    handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
                )
            ),
        )
        gpu["ecc_uncorrected_aggregate"] = read(
            "ecc_uncorrected_aggregate",
            lambda: int(
                nv.nvmlDeviceGetTotalEccErrors(
                    handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC
                )
            ),
        )
    else:
        gpu["ecc_uncorrected_volatile"] = gpu["ecc_uncorrected_aggregate"] = None
    pending = read("retired_pages_pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    gpu["retired_pages_pending"] = None if pending is None else bool(int(pending) == nv.NVML_FEATURE_ENABLED)
    rows = read("remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(handle))
    if rows is None:
        gpu["remapped_rows_uncorrectable"] = gpu["remapped_rows_pending"] = gpu["remapped_rows_failure"] = (
            None
        )
    else:
        gpu["remapped_rows_uncorrectable"] = int(rows[1])
        gpu["remapped_rows_pending"] = bool(rows[2])
        gpu["remapped_rows_failure"] = bool(rows[3])
    reasons_fn = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    gpu["throttle_reasons"] = read("throttle_reasons", lambda: int(reasons_fn(handle)))
    gpu["temperature_c"] = read(
        "temperature_c", lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
    )
    gpu["power_w"] = read("power_w", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    gpu["sm_clock_mhz"] = read(
        "sm_clock_mhz", lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))
    )
    gpu["unreadable"] = unreadable
    return gpu
