"""The gateway's dedup window on the remoting send path (gateway/remoting/dedup.py):
sends carrying ``__LMQ_DEDUP_ID`` are stored once per (topic, id) within
``remoting_dedup_window``, single sends and batches, across a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.clients.remoting import Message, Producer, RemotingClient
from gateway.connector.endpoints import DEDUP_ID
from gateway.remoting.dedup import dedup_message_id

from ..remoting.remoting_support import port_of, running_gateway
from .connector_support import pull_all


async def stored_in(client: RemotingClient, topic: str) -> list:
    """What ``topic`` holds, in the order it was stored."""
    messages = await pull_all(client.namesrv, topic)
    return sorted(messages, key=lambda m: m.store_timestamp)


def bodies(messages: list) -> list[bytes]:
    return [m.body for m in sorted(messages, key=lambda m: (m.queue_id, m.queue_offset))]


async def test_a_send_with_a_stored_dedup_id_stores_nothing(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        async with RemotingClient(f"127.0.0.1:{port_of(gw)}") as client:
            producer = Producer(client, "dedup")
            first = await producer.send("orders", b"a", properties={DEDUP_ID: "m-1"},
                                        queue_id=0)
            again = await producer.send("orders", b"a", properties={DEDUP_ID: "m-1"},
                                        queue_id=1)
            assert (again.offset_msg_id, again.queue.queue_id, again.queue_offset) == (
                first.offset_msg_id, 0, first.queue_offset)
            # another id, and the same id on another topic, are stored
            await producer.send("orders", b"b", properties={DEDUP_ID: "m-2"}, queue_id=0)
            await producer.send("other", b"a", properties={DEDUP_ID: "m-1"}, queue_id=0)
            # no dedup id: stored every time
            await producer.send("orders", b"c", queue_id=0)
            await producer.send("orders", b"c", queue_id=0)
            stored = await stored_in(client, "orders")
            assert bodies(stored) == [b"a", b"b", b"c", b"c"]
            assert stored[0].properties["UNIQ_KEY"] == dedup_message_id("orders", "m-1")
            assert stored[0].properties[DEDUP_ID] == "m-1"
            assert len(await stored_in(client, "other")) == 1


async def test_a_batch_leaves_out_stored_and_repeated_ids(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw:
        async with RemotingClient(f"127.0.0.1:{port_of(gw)}") as client:
            producer = Producer(client, "dedup")
            first = await producer.send("orders", b"a", properties={DEDUP_ID: "a"},
                                        queue_id=0)

            def m(body: bytes, dedup: str) -> Message:
                return Message("orders", body, properties={DEDUP_ID: dedup})

            result = await producer.send_batch(
                "orders", [m(b"a", "a"), m(b"b", "b"), m(b"b", "b"), m(b"c", "c")], queue_id=0)
            ids = result.offset_msg_id.split(",")
            assert len(ids) == 4 and ids[0] == first.offset_msg_id and ids[1] == ids[2]
            assert result.queue_offset == first.queue_offset
            # all of a batch already stored: nothing appended
            await producer.send_batch("orders", [m(b"b", "b"), m(b"c", "c")], queue_id=0)
            assert bodies(await stored_in(client, "orders")) == [b"a", b"b", b"c"]


async def test_the_window_holds_across_a_restart_and_ends(tmp_path: Path) -> None:
    data = tmp_path / "gw"
    async with running_gateway(data) as gw:
        async with RemotingClient(f"127.0.0.1:{port_of(gw)}") as client:
            await Producer(client, "dedup").send("orders", b"a", properties={DEDUP_ID: "x"},
                                                 queue_id=0)
    async with running_gateway(data, remoting_dedup_window=0.5) as gw:
        async with RemotingClient(f"127.0.0.1:{port_of(gw)}") as client:
            producer = Producer(client, "dedup")
            await producer.send("orders", b"a", properties={DEDUP_ID: "x"}, queue_id=0)
            assert bodies(await stored_in(client, "orders")) == [b"a"]
            await asyncio.sleep(0.6)  # the window is a time: nothing to wait on
            await producer.send("orders", b"a", properties={DEDUP_ID: "x"}, queue_id=0)
            assert bodies(await stored_in(client, "orders")) == [b"a", b"a"]
