"""Task ownership (after hypercorn's ``task_group.py``): every task the gateway starts
belongs to a :class:`TaskOwner` — the gateway's, or a connection's, which hands its
tasks to the gateway's as well. A connection's tasks are cancelled when it closes; at
shutdown the gateway cancels whatever is left and waits for it, with a bound.

Unlike ``asyncio.TaskGroup``, one failing task does not cancel its siblings (one bad
connection must not take the others down): its exception is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskOwner:
    def __init__(self, parent: TaskOwner | None = None) -> None:
        self._parent = parent
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        if self._parent is not None:
            task = self._parent.spawn(coro, name)
        else:
            task = asyncio.get_running_loop().create_task(coro, name=name)
            task.add_done_callback(_report)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def join(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every task; return how many are left."""
        pending = set(self._tasks)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout)
        return len(pending)

    def __len__(self) -> int:
        return len(self._tasks)


def _report(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("task failed", exc_info=exc, extra={"task": task.get_name()})
