"""Logging: readable lines by default, JSON lines with ``--log-format json``.

Structured fields are passed as ``extra={"fields": {...}}``; they are appended as ``key=value`` in text
mode and merged into the object in JSON mode. Never pass a secret value as a field.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

LOGGER_NAME = "miles_hooks"
FORMATS = ("text", "json")


def get(step: str) -> logging.Logger:
    return logging.getLogger(f"{LOGGER_NAME}.{step}")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    value = getattr(record, "fields", None)
    return dict(value) if isinstance(value, dict) else {}


def _ts(record: logging.LogRecord) -> str:
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{base}.{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        step = record.name.removeprefix(LOGGER_NAME).lstrip(".") or "main"
        line = f"{_ts(record)} {record.levelname:<7} [{step}] {record.getMessage()}"
        extra = _fields(record)
        if extra:
            line += " " + " ".join(f"{k}={_compact(v)}" for k, v in extra.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        step = record.name.removeprefix(LOGGER_NAME).lstrip(".") or "main"
        obj: dict[str, Any] = {
            "ts": _ts(record),
            "level": record.levelname.lower(),
            "step": step,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            obj.setdefault(key, value)
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str, sort_keys=False)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value else json.dumps(value)
    return json.dumps(value, default=str, separators=(",", ":"))


def resolve_format(flag: str | None) -> str:
    value = flag or os.environ.get("MILES_HOOKS_LOG_FORMAT") or "text"
    return value if value in FORMATS else "text"


def setup(fmt: str, verbose: bool = False) -> None:
    root = logging.getLogger(LOGGER_NAME)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False


def also_to_file(path: str) -> None:
    """Every later line of the step also goes to ``path`` (appended), in the stderr handler's format: a log
    that must outlive its pod."""
    root = logging.getLogger(LOGGER_NAME)
    handler = logging.FileHandler(path, encoding="utf-8")
    formats = [h.formatter for h in root.handlers if h.formatter is not None]
    handler.setFormatter(formats[0] if formats else TextFormatter())
    root.addHandler(handler)
