"""Time PUBLISH encoding and decoding: ``python -m protocol.mqtt.bench_codec``.

The figures are quoted in the docstring of :mod:`protocol.mqtt.codec`.
"""

from __future__ import annotations

import timeit

from .codec import decode_packet, encode_publish, packet_bytes
from .packet_types import MQTTVersion
from .packets import Publish
from .properties import EMPTY_PROPERTIES, Properties


def main() -> None:
    props = Properties(message_expiry_interval=60, content_type="application/json")
    cases = [
        ("3.1.1", MQTTVersion.V3_1_1, EMPTY_PROPERTIES),
        ("5.0", MQTTVersion.V5, EMPTY_PROPERTIES),
        ("5.0+props", MQTTVersion.V5, props),
    ]
    for label, version, p in cases:
        pkt = Publish("devices/42/status", b"x" * 64, 1, packet_id=7, properties=p)
        data = packet_bytes(pkt, version)
        n = 100_000
        env = {"pkt": pkt, "buf": bytearray(), "v": version, "data": data,
               "encode_publish": encode_publish, "decode_packet": decode_packet}
        enc = "encode_publish(pkt, buf, v); buf.clear()"
        t_enc = min(timeit.repeat(enc, number=n, repeat=5, globals=env))
        t_dec = min(timeit.repeat("decode_packet(data, v)", number=n, repeat=5, globals=env))
        print(f"{label:10} encode {t_enc / n * 1e6:.2f} µs  decode {t_dec / n * 1e6:.2f} µs")


if __name__ == "__main__":
    main()
