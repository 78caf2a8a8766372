"""A unary call runs at once up to its first wait, then as a task
(gateway.grpc.server._resume): what it waits for, a failure and a cancellation reach
it as they would in a task of its own."""

from __future__ import annotations

import asyncio

import pytest

from gateway.grpc.server import _resume


async def test_the_rest_runs_as_a_task_with_what_it_waited_for() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    seen: list[object] = []

    async def call() -> None:
        seen.append("before")
        seen.append(await fut)
        await asyncio.sleep(0)  # a bare yield, then a second future
        seen.append(await asyncio.sleep(0.01, "slept"))
        seen.append(asyncio.current_task() is not None)

    coro = call()
    waiting = coro.send(None)  # stepped outside a task, as _start does
    assert waiting is fut and seen == ["before"]
    task = loop.create_task(_resume(coro, waiting))
    fut.set_result(7)
    await task
    assert seen == ["before", 7, "slept", True]


async def test_a_failure_after_the_wait_is_the_task_s() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    async def call() -> None:
        await fut

    coro = call()
    task = loop.create_task(_resume(coro, coro.send(None)))
    fut.set_exception(ValueError("store failed"))
    with pytest.raises(ValueError, match="store failed"):
        await task


async def test_cancelling_the_task_cancels_the_call_where_it_waits() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    seen: list[str] = []

    async def call() -> None:
        try:
            await fut
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            seen.append("finally")

    coro = call()
    task = loop.create_task(_resume(coro, coro.send(None)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled", "finally"]
    assert fut.cancelled() and task.cancelled()
