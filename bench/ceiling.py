"""The load generator's own ceiling, against :mod:`bench.sink` in a separate process.

Three figures: QoS 0 publishes/s into a sink that swallows bytes, QoS 1 publishes/s
with the sink answering PUBACKs (window 1000), and QoS 0 deliveries/s parsed from a sink
that writes pre-encoded PUBLISH packets as fast as the generator reads. A broker figure
close to these means the generator, not the broker, set it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from bench import mqtt_wire as mw
from bench.peers import ROOT, _kill_tree, _track, _untrack, free_port, wait_accepts

_perf = time.perf_counter


async def _publish(
    port: int, qos: int, duration: float, batch: int = 200, window: int = 1000
) -> float:
    stats = mw.Stats()
    conn = await mw.open_conn(port, stats, "sink-swallow" if qos == 0 else "sink-ack", record=False)
    tpl = mw.PublishTemplate("b/1", qos, 100)
    sent = 0
    t0 = _perf()
    end = t0 + duration
    pid = 1
    try:
        while _perf() < end:
            if conn.write_paused or (qos and sent - conn.acked >= window):
                await asyncio.sleep(0.0005)
                continue
            assert conn.transport is not None
            conn.transport.write(mw.build_batch(tpl, batch, pid))
            pid = (pid - 1 + batch) % 65535 + 1
            sent += batch
            await asyncio.sleep(0)
        done = conn.acked if qos else sent
        return done / (_perf() - t0)
    finally:
        conn.disconnect()


async def _receive(port: int, duration: float) -> tuple[float, int]:
    stats = mw.Stats()
    conn = await mw.open_conn(port, stats, "sink-source")
    await conn.subscribe([("sink/t", 0)])
    await asyncio.sleep(0.5)
    d0 = stats.delivered
    t0 = _perf()
    await asyncio.sleep(duration)
    rate = (stats.delivered - d0) / (_perf() - t0)
    conn.disconnect()
    return rate, stats.delivered


async def measure(duration: float) -> dict[str, Any]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.sink", "--port", str(port)],
        cwd=ROOT,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    _track(proc)
    try:
        await asyncio.get_running_loop().run_in_executor(None, lambda: wait_accepts(port, 20, proc))
        q0 = await _publish(port, 0, duration)
        q1 = await _publish(port, 1, duration)
        rx, _ = await _receive(port, duration)
        return {
            "publish_qos0_per_s": round(q0, 1),
            "publish_qos1_per_s": round(q1, 1),
            "receive_qos0_per_s": round(rx, 1),
        }
    finally:
        _kill_tree(proc.pid, 15)
        proc.wait(timeout=10)
        _untrack(proc)
