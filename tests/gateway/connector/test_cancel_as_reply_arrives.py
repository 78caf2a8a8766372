"""A copy task cancelled in the loop turn its peer's reply arrives must end (Python
3.11's ``asyncio.wait_for`` returned the reply and dropped the cancellation, so the task
ran on: the remoting client's ``invoke`` did that to the connector's copy tasks). The
cancellation is made to land exactly then: by a done callback of the reply's future,
which runs in the turn the reply resolves it, before the waiting task resumes. Real
endpoints against an in-process gateway over 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway.clients.remoting import RemotingConnection
from gateway.config import AUTO
from gateway.connector.endpoints import CopyMessage
from gateway.connector.mqtt import MqttPeer, MqttTarget
from protocol.remoting.codes import RequestCode

from ..amqp_support import ThreadGateway


async def ends_when_cancelled(task: asyncio.Task[Any], reply: asyncio.Future[Any]) -> bool:
    """Cancel ``task`` as ``reply`` completes; whether the task then ends, cancelled."""
    reply.add_done_callback(lambda _: task.cancel())
    done, _ = await asyncio.wait({task}, timeout=2.0)
    if task in done:
        return task.cancelled()
    task.cancel()  # (a second cancellation does not race with a reply)
    await asyncio.wait({task}, timeout=5.0)
    return False


async def test_mqtt_target_write_cancelled_as_its_puback_arrives(gw: ThreadGateway) -> None:
    target = MqttTarget("gw", MqttPeer(port=gw.mqtt_port, client_id="tgt-cancel"))
    await target.open()
    client = target._client
    assert client is not None
    writes = 0

    async def copy() -> None:  # a copy task's write loop
        nonlocal writes
        while True:
            await target.write("cancel/t", "q", [CopyMessage(body=b"m", topic="q")])
            writes += 1

    task = asyncio.create_task(copy())
    # The PUBACK needs a round trip through the gateway (a later loop turn): the
    # future is found, still pending, in the turn after the write sent its PUBLISH.
    while not (pubacks := [f for (kind, _), f in client._waiters.items() if kind == "puback"]):
        await asyncio.sleep(0)
    assert not pubacks[0].done()
    try:
        assert await ends_when_cancelled(task, pubacks[0]), (
            f"the write loop ran on after its cancellation ({writes} more writes)"
        )
    finally:
        await target.close()


async def test_remoting_invoke_cancelled_as_its_response_arrives(tmp_path: Path) -> None:
    """The site that was found (b43b615): the connector's gateway and RocketMQ endpoints
    pull and send through this call."""
    gw = ThreadGateway(tmp_path / "data", remoting_port=AUTO).start()
    try:
        listener = gw.gateway.listener("remoting") if gw.gateway else None
        assert listener is not None
        conn = await RemotingConnection.open(f"127.0.0.1:{listener.port}")
        calls = 0

        async def pull_loop() -> None:  # a copy task's reads
            nonlocal calls
            while True:
                await conn.invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
                calls += 1

        task = asyncio.create_task(pull_loop())
        while not conn._pending:
            await asyncio.sleep(0)
        (response,) = conn._pending.values()
        assert not response.done()
        try:
            assert await ends_when_cancelled(task, response), (
                f"the loop ran on after its cancellation ({calls} more calls)"
            )
        finally:
            await conn.close()
    finally:
        gw.stop()
