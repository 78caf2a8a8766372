"""Per-call CPU of the compiled wire layers, in memory: ``python -m bench.wire_calls``.

* ``remoting decode``: a :class:`~protocol.remoting.FrameDecoder` fed one buffer of
  20,000 SEND_MESSAGE_V2 frames as ``bench.remoting_wire.SendTemplate`` writes them
  (100 B bodies, a UNIQ_KEY), drained with ``next_command``; process CPU of the drain
  per frame.
* ``grpc unary``: the server side of a unary call in the sans-IO
  :class:`protocol.grpc.server.ServerConnection` (request headers with RocketMQ's
  metadata and a deadline, one request message, the response message and the status
  trailers), 64 calls per read from an HTTP/2 client (``ngh2``) whose own work is not
  counted; process CPU per call.

The minimum of ``--repeat`` runs (default 7): on a shared machine the fastest run is the
one least disturbed. Run it once as built and once with ``LMQ_NO_EXTENSIONS=1`` to
compare the compiled modules with their Python sources; the first line says which ran.
"""

from __future__ import annotations

import argparse
import time

import ngh2

from bench.remoting_wire import SendTemplate
from protocol.grpc import server as grpc_server
from protocol.grpc.framing import prefix
from protocol.remoting import FrameDecoder
from protocol.remoting import command as remoting_command

_cpu = time.process_time
FRAMES = 20_000
HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/apache.rocketmq.v2.MessagingService/Heartbeat"),
    (b":authority", b"127.0.0.1:8081"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
    (b"x-mq-client-id", b"bench"),
    (b"x-mq-language", b"PYTHON"),
    (b"x-mq-protocol", b"v2"),
    (b"grpc-timeout", b"3S"),
]
REQUEST = b"\x08\x01"  # HeartbeatRequest(client_type=PRODUCER)
RESPONSE = b"\x0a\x04\x08\x00\x12\x00"


def remoting_decode() -> float:
    template = SendTemplate("benchTopic")
    frames = b"".join(
        template.frame(i, i % 8, b'"1765000000000"', i, b"x" * 100) for i in range(FRAMES)
    )
    decoder = FrameDecoder()
    decoder.feed(frames)
    start = _cpu()
    while decoder.next_command() is not None:
        pass
    return (_cpu() - start) / FRAMES * 1e6


def grpc_unary(rounds: int = 100, batch: int = 64) -> float:
    server = grpc_server.ServerConnection(1 << 22)
    client = ngh2.Connection(ngh2.Role.CLIENT)
    client.initiate_connection()
    server.receive_data(client.data_to_send())
    server.events()
    client.receive_data(server.data_to_send())
    client.events()
    spent = 0.0
    for _ in range(rounds):
        for _ in range(batch):
            sid = client.send_request(HEADERS)
            client.send_data(sid, prefix(len(REQUEST)) + REQUEST)
            client.end_stream(sid)
        data = client.data_to_send()
        start = _cpu()
        server.receive_data(data)
        for event in server.events():
            if type(event) is grpc_server.MessageReceived:
                server.consumed(event.stream_id, event.size)
                server.send_message(event.stream_id, RESPONSE)
                server.end_call(event.stream_id, grpc_server.OK)
        out = server.data_to_send()
        server.events()
        spent += _cpu() - start
        client.receive_data(out)
        client.events()
    return spent / (rounds * batch) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    compiled = not (remoting_command.__file__ or "").endswith(".py")
    print(f"compiled modules: {'on' if compiled else 'off (the Python sources)'}")
    for name, fn in (("remoting decode", remoting_decode), ("grpc unary", grpc_unary)):
        best = min(fn() for _ in range(args.repeat))
        print(f"{name}: {best:.2f} us per call (min of {args.repeat})")


if __name__ == "__main__":
    main()
