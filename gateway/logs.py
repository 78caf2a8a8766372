"""Structured logs on the stdlib ``logging``: one line per event.

Code logs a short event message and puts the details in ``extra``::

    log.info("connection accepted", extra={"peer": "10.0.0.7:51234", "listener": "mqtt"})

The ``json`` format writes one JSON object per line (``ts``, ``level``, ``logger``,
``msg`` and the extra fields); the ``text`` format writes the message followed by
``key=value`` pairs. Tracebacks are folded into the JSON object (``exc``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{base}.{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extras(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname.lower(), record.name, record.getMessage()]
        parts += [f"{k}={_text_value(v)}" for k, v in _extras(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: object) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in "\"=" for c in text):
        return json.dumps(text)
    return text


def configure_logging(
    log_format: str = "text", level: str = "info", stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at ``level`` or above to ``stream`` (stderr) in
    ``log_format``; returns the installed handler (replacing one installed before)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_lmq", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler._lmq = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
