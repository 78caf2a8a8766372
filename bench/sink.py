"""A trivial MQTT sink/source server, to measure the load generator's own ceiling.

    python -m bench.sink --port 18830

It answers CONNECT with CONNACK and SUBSCRIBE with SUBACK and then, by the client id the
generator chose:

* ``sink-swallow*``: drops every byte after CONNECT unread;
* ``sink-ack*``: walks fixed headers and answers each QoS 1 PUBLISH with a PUBACK;
* ``sink-source*``: after SUBACK writes pre-encoded QoS 0 PUBLISH packets (stamped with
  the time, 256 per write) for as long as the client reads them.

It runs in its own process, so it does not share the generator's core.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time

_ts = struct.Struct(">d").pack


class SinkConn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.mode = ""
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.sourcing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.sourcing:
            self._source()

    def _source(self) -> None:
        head = b"\x30" + bytes([2 + 6 + 100]) + b"\x00\x06sink/t"
        pad = bytes(92)
        t = self.transport
        assert t is not None
        while not self.paused and not t.is_closing():
            t.write((head + _ts(time.perf_counter()) + pad) * 256)

    def data_received(self, data: bytes) -> None:
        if self.mode == "swallow":
            return
        data = self.buf + data if self.buf else data
        n, i = len(data), 0
        acks = []
        t = self.transport
        assert t is not None
        while i + 2 <= n:
            h = data[i]
            ln, p, shift = 0, i + 1, 0
            while p < n:
                b = data[p]
                p += 1
                ln |= (b & 0x7F) << shift
                shift += 7
                if b < 128:
                    break
            else:
                break
            end = p + ln
            if end > n:
                break
            kind = h >> 4
            if kind == 1:  # CONNECT: client id follows the 10-byte variable header
                q = p + 10
                cid = data[q + 2 : q + 2 + ((data[q] << 8) | data[q + 1])].decode()
                self.mode = cid.split("-")[1] if cid.startswith("sink-") else "ack"
                t.write(b"\x20\x02\x00\x00")
            elif kind == 8:  # SUBSCRIBE
                t.write(b"\x90\x03" + data[p : p + 2] + b"\x00")
                if self.mode == "source":
                    self.sourcing = True
                    asyncio.get_running_loop().call_soon(self._source)
            elif kind == 3 and (h >> 1) & 3:
                q = p + 2 + ((data[p] << 8) | data[p + 1])
                acks.append(b"\x40\x02" + data[q : q + 2])
            elif kind == 12:
                t.write(b"\xd0\x00")
            i = end
            if self.mode == "swallow":
                i = n
                break
        self.buf = data[i:] if i < n else b""
        if acks:
            t.write(b"".join(acks))


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(SinkConn, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    asyncio.run(serve(ap.parse_args().port))


if __name__ == "__main__":
    main()
