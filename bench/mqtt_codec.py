"""MQTT PUBLISH codec micro-benchmark: ``python -m bench.mqtt_codec [--repeat N]``.

What it times, per PUBLISH (QoS 1, the 17-byte topic ``devices/42/status``, a 64-byte
payload), for MQTT 3.1.1 and 5.0:

* ``next_event``: a server :class:`~protocol.mqtt.Connection` in CONNECTED is fed one
  buffer of 20,000 such packets and drained with ``next_event`` (process CPU time of the
  drain, divided by 20,000; the buffer is built beforehand).
* ``decode_packet``: one packet decoded from its own ``bytes`` (``timeit``).
* ``send_publish`` / ``send_publish(bytes topic)``: the server machine encoding one
  outbound PUBLISH from its fields, the topic given as ``str`` and as UTF-8 bytes.
* ``send(Publish)``: the general path, a ``Publish`` encoded through ``send``.
* ``5.0+props``: the same with two properties (Message Expiry, Content Type).

Each figure is the median of ``--repeat`` runs (default 7); the runs of every case are
interleaved so that load from other processes spreads over all of them. The figures
quoted in docs/mqtt.md come from this script.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from collections.abc import Callable

from protocol.mqtt import (
    EMPTY_PROPERTIES,
    NEED_DATA,
    Connack,
    Connect,
    Connection,
    MQTTVersion,
    Properties,
    Publish,
    Role,
    decode_packet,
    packet_bytes,
)

TOPIC = "devices/42/status"
PAYLOAD = b"x" * 64
PACKETS = 20_000
TIMEIT_N = 20_000


def _connected(version: MQTTVersion) -> Connection:
    client = Connection(Role.CLIENT)
    server = Connection(Role.SERVER)
    server.receive_data(client.send(Connect("bench", version)))
    server.next_event()
    client.receive_data(server.send(Connack()))
    client.next_event()
    return server


def _drain_case(version: MQTTVersion, props: Properties) -> Callable[[], float]:
    one = packet_bytes(Publish(TOPIC, PAYLOAD, 1, packet_id=7, properties=props), version)
    data = one * PACKETS

    def run() -> float:
        server = _connected(version)
        start = time.process_time()
        server.receive_data(data)
        n = 0
        while server.next_event() is not NEED_DATA:
            n += 1
        took = time.process_time() - start
        assert n == PACKETS
        return took / PACKETS

    return run


def _timeit_case(stmt: str, env: dict[str, object]) -> Callable[[], float]:
    def run() -> float:
        return timeit.timeit(stmt, number=TIMEIT_N, globals=env) / TIMEIT_N

    return run


def cases() -> dict[str, Callable[[], float]]:
    props = Properties(message_expiry_interval=60, content_type="application/json")
    out: dict[str, Callable[[], float]] = {}
    for label, version, p in (
        ("3.1.1", MQTTVersion.V3_1_1, EMPTY_PROPERTIES),
        ("5.0", MQTTVersion.V5, EMPTY_PROPERTIES),
        ("5.0+props", MQTTVersion.V5, props),
    ):
        pkt = Publish(TOPIC, PAYLOAD, 1, packet_id=7, properties=p)
        env: dict[str, object] = {
            "decode_packet": decode_packet, "data": packet_bytes(pkt, version), "v": version,
            "server": _connected(version), "topic": TOPIC, "btopic": TOPIC.encode(),
            "payload": PAYLOAD, "props": p, "pkt": pkt,
        }
        out[f"{label} next_event"] = _drain_case(version, p)
        out[f"{label} decode_packet"] = _timeit_case("decode_packet(data, v)", env)
        out[f"{label} send_publish"] = _timeit_case(
            "server.send_publish(topic, payload, 1, False, False, 7, props)", env)
        if p is EMPTY_PROPERTIES:
            out[f"{label} send_publish(bytes topic)"] = _timeit_case(
                "server.send_publish(btopic, payload, 1, False, False, 7, props)"
                if _takes_bytes() else
                "server.send_plain_publish(btopic, payload, 1, False, False, 7)", env)
        out[f"{label} send(Publish)"] = _timeit_case("server.send(pkt)", env)
    return out


def _takes_bytes() -> bool:
    """Whether ``send_publish`` takes the topic as bytes (before that, the bytes-topic
    case is timed through ``send_plain_publish``, its predecessor)."""
    server = _connected(MQTTVersion.V3_1_1)
    try:
        server.send_publish(b"t", b"", 0, False, False, None, EMPTY_PROPERTIES)  # type: ignore[arg-type]
    except (AttributeError, TypeError):
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.mqtt_codec", description=__doc__)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args(argv)
    runs = {name: run for name, run in cases().items() if args.only in name}
    results: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, run in runs.items():
            results[name].append(run())
    for name, values in results.items():
        print(f"{name:32} median {statistics.median(values) * 1e6:6.3f} us"
              f"   min {min(values) * 1e6:6.3f} us")


if __name__ == "__main__":
    main()
