"""Instructions the gateway spends per remoting message, send to delivery, counted by
callgrind (as :mod:`bench.door_instructions` does for HTTP and MQTT): a figure the
machine's load does not move.

    .venv/bin/python -m bench.remoting_instructions --messages 20000

The gateway (``cli.serve``, ``durability = "async"``) runs under ``valgrind
--tool=callgrind`` with instrumentation off. The load is ``remoting_1to1``'s
(:mod:`bench.remoting`): one raw pipelined producer of SEND_MESSAGE_V2 (100-byte
bodies, at most ``--window`` messages in flight end to end) to a topic of 8 queues, one
raw long-polling consumer of one group. After a warm-up of 4,000 messages,
instrumentation is switched on for ``--messages`` messages (sent, answered and
delivered), then off; the instructions counted are divided by the messages. Only
user-space instructions of the gateway process count (all its threads); the kernel's
socket work is not in the figure. Needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.door_instructions import callgrind_gateway, dumped_total, instrumented
from bench.mqtt_wire import Stats
from bench.remoting import _close_raw, _raw_consumers
from bench.remoting_wire import RawSender
from gateway.clients import RemotingClient

WARMUP = 4000


async def _load(port: int, pid: int, messages: int, window: int) -> None:
    address = f"127.0.0.1:{port}"
    topic = f"instr{int(time.time())}"
    stats = Stats()
    async with RemotingClient(address) as setup:
        queues = len((await setup.route(topic)).write_queues)
    clients, pullers, transports = await _raw_consumers(address, topic, 1, stats)
    loop = asyncio.get_running_loop()
    transport, sender = await loop.create_connection(
        lambda: RawSender(topic, queues, 100), "127.0.0.1", port)
    wake = asyncio.Event()
    stats.on_progress = wake.set
    sent = 0

    async def drive(count: int) -> None:
        nonlocal sent
        target = sent + count
        start_nacked = sender.nacked
        while stats.delivered < target or sender.confirmed + sender.nacked < target:
            room = min(window - (sent - stats.delivered), target - sent)
            if room >= 32 or (room > 0 and sent + room == target):
                transport.write(sender.build(room))
                sent += room
                continue
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), 0.05)
            except TimeoutError:
                pass
        if sender.nacked != start_nacked:
            raise RuntimeError(f"{sender.nacked - start_nacked} sends refused")

    try:
        await drive(WARMUP)
        with instrumented(pid):
            await drive(messages)
        if stats.errors:
            raise RuntimeError(f"consumer errors: {stats.errors[:5]}")
    finally:
        transport.close()
        await _close_raw(clients, pullers, transports, topic, stats)


def measure(messages: int, port: int, window: int) -> float:
    """Instructions per message (see the module's docstring)."""
    with callgrind_gateway("lmq-instr-remoting-", unified=port, ready=port) as (pid, tmp):
        asyncio.run(_load(port, pid, messages, window))
        return dumped_total(pid, tmp) / messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--window", type=int, default=1000, help="messages in flight end to end")
    ap.add_argument("--port", type=int, default=23100, help="the unified (remoting) port")
    args = ap.parse_args()
    per = measure(args.messages, args.port, args.window)
    print(f"remoting: {per:,.0f} instructions per message ({args.messages} messages)")


if __name__ == "__main__":
    main()
