"""``GET /v1/admin/overview``: the gateway at a glance; ``GET /v1/admin/overview/history``:
the samples of the last hour the gateway keeps (:mod:`gateway.history`)."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core import MessageStore, StoreError, VerifyReport
from gateway.admin.core import AdminError, Call, Result
from gateway.history import INTERVAL_S

if TYPE_CHECKING:
    from gateway.admin.api import Admin


def routes(admin: Admin) -> list[tuple[str, str, Any, str]]:
    async def overview(call: Call) -> dict[str, Any]:
        ctx = admin.ctx
        # the store statistics of the last read when younger than a sample interval,
        # else of a read started now; the answer does not wait for it
        status, health = await ctx.introspection.health(max_age=INTERVAL_S)
        store = health.get("store") or {}
        return {
            "version": _version(),
            "status": health.get("status"),
            "uptime_seconds": health.get("uptime_seconds"),
            "listeners": health.get("listeners"),
            "connections": {
                "total": len(ctx.state.connections),
                "by_protocol": dict(ctx.state.by_protocol),
                "by_listener": dict(ctx.state.by_listener),
            },
            "rates": _rates(ctx.introspection.overview_history()),
            "store": {
                "bytes": store.get("log_bytes"),
                "segments": store.get("segments"),
                "lmqs": store.get("lmqs"),
                "end_position": store.get("log_end_position"),
                "index_disk_bytes": store.get("index_disk_bytes"),
                "durability": store.get("durability"),
                "timers_pending": store.get("timers_pending"),
                "transactions_pending": store.get("transactions_pending"),
                "publisher_pending": ctx.publisher.pending,
                "error": store.get("error"),
            },
            "replication": health.get("replication"),
            "process": _process(),
            "authentication": "open" if admin.auth.open_mode() else "users",
        }

    async def history(call: Call) -> dict[str, Any]:
        raw = call.query.get("since", "0")
        try:
            since = int(raw)
        except ValueError:
            raise AdminError(
                400, "since must be a time in milliseconds since the epoch", field="since"
            ) from None
        return admin.ctx.introspection.overview_history(since)

    async def store_stats(call: Call) -> dict[str, Any]:
        try:
            return await admin.ctx.introspection.store_stats()
        except StoreError as exc:
            raise AdminError(503, f"store statistics unavailable: {exc}") from None

    verify_state: dict[str, Any] = {}

    async def verify_start(call: Call) -> Result:
        """Start a verify run in a worker thread, on a read-only view of the store (as
        ``lmq store verify`` beside a running gateway); one at a time."""
        if verify_state.get("state") == "running":
            raise AdminError(409, "a verify run is already running")
        check_index = call.flag("check_index", True)
        report = VerifyReport()
        data_dir = Path(admin.ctx.config.data_dir)
        verify_state.clear()
        verify_state.update(
            state="running",
            report=report,
            check_index=check_index,
            started=time.time(),
            finished=None,
            error=None,
            log_bytes=admin.ctx.store.log_bytes,
        )

        def run() -> None:
            with MessageStore.open_read_only(data_dir, admin.ctx.config.store) as store:
                store.verify(check_index=check_index, report=report)

        async def background() -> None:
            try:
                await asyncio.to_thread(run)
            except StoreError as exc:
                verify_state["error"] = str(exc)
            verify_state["state"] = "done"
            verify_state["finished"] = time.time()

        admin.ctx.spawn(background(), "admin-verify")
        return Result(202, _verify_doc(verify_state))

    async def verify_status(call: Call) -> dict[str, Any]:
        if not verify_state:
            raise AdminError(404, "no verify run yet (POST /v1/admin/store/verify)")
        return _verify_doc(verify_state)

    return [
        ("POST", "/store/verify", verify_start, "store.verify"),
        ("GET", "/store/verify", verify_status, ""),
        ("GET", "/overview", overview, ""),
        ("GET", "/overview/history", history, ""),
        ("GET", "/store", store_stats, ""),
    ]


def _verify_doc(state: dict[str, Any]) -> dict[str, Any]:
    report: VerifyReport = state["report"]
    done = state["state"] == "done"
    total = state["log_bytes"] or 1
    return {
        "state": state["state"],
        "check_index": state["check_index"],
        "started": state["started"],
        "finished": state["finished"],
        "records": report.records,
        "bytes": report.bytes,
        "log_progress": round(min(1.0, report.bytes / total), 4),
        "entries_checked": report.entries_checked,
        "problems": list(report.problems),
        "ok": (report.ok and state["error"] is None) if done else None,
        "error": state["error"],
    }


def _rates(history: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Messages a second in and out per protocol over the last sample's interval (empty
    before the second sample)."""
    samples = history.get("samples") or []
    if not samples:
        return {"in": {}, "out": {}}
    last = samples[-1]
    return {"in": dict(last["in"]), "out": dict(last["out"])}


def _version() -> str:
    try:
        return version("lmq-gateway")
    except PackageNotFoundError:
        return "unknown"


def _process() -> dict[str, Any]:
    """Memory (resident bytes, peak) and open files of this process (Linux /proc; the
    peak from getrusage elsewhere too)."""
    rss = None
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        open_files: int | None = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_files = None
    return {
        "pid": os.getpid(),
        "rss_bytes": rss,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "open_files": open_files,
    }
