"""The audit log: every change made through the admin API, one JSON line each.

``<data_dir>/audit.log`` (``admin_audit_log`` elsewhere), appended and flushed before
the call is answered, and the same record logged on ``gateway.audit`` (INFO)::

    {"time": "2026-12-07T20:01:02.345Z", "user": "alice", "via": "basic",
     "peer": "127.0.0.1", "action": "topic.create", "target": "orders",
     "details": {"read_queues": 8, ...}, "status": 200}

``status`` is the answer's: a refused change (4xx) is recorded too, with its
``error``. Reads are not recorded. The file is only appended; rotate it with
``copytruncate`` (logrotate) or by moving it away (it is reopened per record).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from gateway.admin.core import Caller

__all__ = ["AuditLog"]

log = logging.getLogger("gateway.audit")


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def record(
        self,
        caller: Caller,
        action: str,
        target: str,
        details: dict[str, Any],
        status: int,
        error: str | None = None,
    ) -> dict[str, Any]:
        now = time.time()
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now * 1000) % 1000:03d}Z",
            "user": caller.user,
            "via": caller.kind,
            "peer": caller.peer,
            "action": action,
            "target": target,
            "details": details,
            "status": status,
        }
        if error is not None:
            entry["error"] = error
        line = json.dumps(entry, separators=(",", ":"), default=str) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line)
        log.info("admin change", extra={k: v for k, v in entry.items() if k != "time"})
        return entry
