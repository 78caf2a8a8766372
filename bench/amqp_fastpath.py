"""AMQP fast-path codecs against pamqp: µs per operation, (fastpath, pamqp).

Run ``python -m bench.amqp_fastpath``; the figures are kept in docs/benchmarks.md.
"""

from __future__ import annotations

import timeit
from typing import Any

from pamqp import body as pamqp_body
from pamqp import commands, frame, header

from protocol.amqp.fastpath import (
    ContentHeader,
    decode_ack,
    decode_publish,
    encode_ack,
    encode_content_header,
    encode_deliver,
    encode_get_ok,
    encode_message,
)


def bench_fastpath(number: int = 20000) -> dict[str, tuple[float, float]]:
    """µs per op, (fastpath, pamqp), for the table in this module's docstring."""
    def us(fn: Any) -> float:
        return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e6

    props = commands.Basic.Properties(
        content_type="application/json", headers={"a": 1, "b": "x"}, delivery_mode=2,
        expiration="60000", message_id="m-1")
    pub = frame.marshal(commands.Basic.Publish(exchange="amq.topic", routing_key="a.b.c"), 1)
    ack = frame.marshal(commands.Basic.Ack(delivery_tag=42), 1)
    hdr = frame.marshal(header.ContentHeader(0, 100, props), 1)
    pub_payload, ack_payload, hdr_payload = pub[7:-1], ack[7:-1], hdr[7:-1]
    raw_props = ContentHeader(hdr_payload).properties_raw
    body = b"x" * 100
    deliver = commands.Basic.Deliver("ctag-1", 42, False, "amq.topic", "a.b.c")
    get_ok = commands.Basic.GetOk(42, False, "amq.topic", "a.b.c", 7)
    ch = header.ContentHeader(0, 100, props)
    return {
        "decode Basic.Publish": (us(lambda: decode_publish(pub_payload)),
                                 us(lambda: frame.unmarshal(pub))),
        "decode Basic.Ack": (us(lambda: decode_ack(ack_payload)), us(lambda: frame.unmarshal(ack))),
        "encode Basic.Deliver": (
            us(lambda: encode_deliver(1, "ctag-1", 42, False, "amq.topic", "a.b.c")),
            us(lambda: frame.marshal(deliver, 1))),
        "encode Basic.Ack": (us(lambda: encode_ack(1, 42)),
                             us(lambda: frame.marshal(commands.Basic.Ack(42), 1))),
        "encode Basic.GetOk": (
            us(lambda: encode_get_ok(1, 42, False, "amq.topic", "a.b.c", 7)),
            us(lambda: frame.marshal(get_ok, 1))),
        "decode content header (4 props + headers)": (
            us(lambda: ContentHeader(hdr_payload)), us(lambda: frame.unmarshal(hdr))),
        "encode content header from raw properties": (
            us(lambda: encode_content_header(1, raw_props, 100)), us(lambda: frame.marshal(ch, 1))),
        "encode Deliver + header + 1 body frame": (
            us(lambda: encode_message(
                encode_deliver(1, "ctag-1", 42, False, "amq.topic", "a.b.c"),
                1, raw_props, body, 131072)),
            us(lambda: frame.marshal(deliver, 1) + frame.marshal(ch, 1)
               + frame.marshal(pamqp_body.ContentBody(body), 1))),
    }


if __name__ == "__main__":  # pragma: no cover
    for op, (fast, slow) in bench_fastpath().items():
        print(f"{op:45s} {fast:6.2f} {slow:8.2f}")
