"""The admin address a running gateway records in its data directory.

At start the gateway writes ``<data_dir>/admin.json`` (``{"url":
"http://127.0.0.1:8080", "pid": 1234}``: the dedicated ``admin_port`` when there is
one, else the ``http_port``, else the unified port), and removes it at a clean stop.
The ``lmq`` CLI reads it to send its operator commands to the running gateway; a file
left by a gateway that died is recognised by the URL not answering (then the CLI opens
the store itself) and is overwritten by the next start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ADDRESS_FILE", "admin_url", "read_address", "remove_address", "write_address"]

ADDRESS_FILE = "admin.json"

#: The listeners that serve the admin API, in order of preference.
_PREFERRED = ("admin", "http", "unified")


def admin_url(listeners: Sequence[tuple[str, str, int]]) -> str | None:
    """The URL of the admin API among ``(name, host, port)`` listeners, or None."""
    for wanted in _PREFERRED:
        for name, host, port in listeners:
            if name == wanted:
                if host in ("0.0.0.0", ""):
                    host = "127.0.0.1"
                elif host == "::":
                    host = "::1"
                return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    return None


def write_address(data_dir: Path, url: str) -> None:
    """Record ``url`` (written whole, then renamed over the old file)."""
    path = data_dir / ADDRESS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}) + "\n")
    os.replace(tmp, path)


def read_address(data_dir: Path) -> str | None:
    """The URL recorded in ``data_dir``, or None."""
    try:
        doc = json.loads((data_dir / ADDRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
    url = doc.get("url") if isinstance(doc, dict) else None
    return url if isinstance(url, str) else None


def remove_address(data_dir: Path) -> None:
    """Remove the record if this process wrote it."""
    path = data_dir / ADDRESS_FILE
    try:
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and doc.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
