"""The remoting PULL path's cost per message, without sockets: ``python -m bench.remoting_pull``.

A store holds ``--messages`` records as SEND_MESSAGE_V2 stores them (100 B bodies, a
UNIQ_KEY, the producer's address), spread round-robin over the 8 queues of one topic
(so one queue's records are interleaved with seven others' in the log, as in
``remoting_1to1``). Each variant drains every queue in pulls of ``--batch`` messages and
writes RocketMQ's stored-message layout, as PULL_MESSAGE does:

* ``pull+encode_record``: ``store.pull`` (records decoded in full) and
  ``gateway.remoting.messages.encode_record``: the path before ``pull_raw``;
* ``pull_raw+write_raw``: ``store.pull_raw`` (records checked, fields left as bytes)
  and ``write_raw``: the path PULL_MESSAGE takes from the log now;
* ``hot tail+write_record``: the LMQs listened to while written, so a pull is served
  decoded records from the store's hot tail (a consumer waiting at the queue's end).

Both ways write the same bytes (checked here on the first pull, and by
tests/gateway/remoting/test_remoting_stored.py). Best of ``--repeat``, in us per message.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from broker_core import MessageStore, StoreConfig
from gateway.remoting import messages as rm
from gateway.remoting.stored import pack_host
from lmq.rocketmq import queue_lmq
from protocol.remoting.messages import encode_properties

TOPIC = "benchPull"
QUEUES = 8


def fill(store: MessageStore, n: int) -> None:
    items = []
    for seq in range(n):
        props = {"WAIT": "true", "UNIQ_KEY": f"AC110001{seq:024X}"}
        text = encode_properties(props)
        msg = rm.to_store_message(
            TOPIC, seq.to_bytes(8, "big") + bytes(92), text, props, origin="benchProducers",
            born_ms=1_700_000_000_000 + seq, born_host="127.0.0.1:54321")
        items.append((msg, [queue_lmq(TOPIC, seq % QUEUES)]))
        if len(items) == 500:
            store.append_batch(items)
            items = []
    if items:
        store.append_batch(items)


Drain = Callable[[MessageStore, str, int, int], bytes]


def drain_decoded(store: MessageStore, lmq: str, queue_id: int, batch: int) -> bytes:
    out = bytearray()
    host = pack_host("127.0.0.1:8080")
    offset = 0
    while True:
        r = store.pull(lmq, offset, batch)
        if not r.messages:
            return bytes(out)
        for m in r.messages:
            rm.encode_record(out, m.record, topic=TOPIC, queue_id=queue_id,
                             queue_offset=m.offset, store_host=host)
        offset = r.next_offset


def drain_raw(store: MessageStore, lmq: str, queue_id: int, batch: int) -> bytes:
    from broker_core.record import RawMessage
    from gateway.remoting.stored import topic_field

    out = bytearray()
    host = pack_host("127.0.0.1:8080")
    topic = topic_field(TOPIC)
    offset = 0
    while True:
        r = store.pull_raw(lmq, offset, batch)
        if not r.messages:
            return bytes(out)
        for m in r.messages:
            if type(m) is RawMessage:
                rm.write_raw(out, m, topic, queue_id, host)
            else:
                rm.write_record(out, m.record, topic, queue_id, m.offset, host)
        offset = r.next_offset


def run(store: MessageStore, drain: Drain, batch: int, n: int, repeat: int) -> tuple[float, bytes]:
    best = float("inf")
    first = b""
    for _ in range(repeat):
        store.tail.clear_records()  # every record read from the log, as a fresh reader
        t = time.perf_counter()
        outs = [drain(store, queue_lmq(TOPIC, q), q, batch) for q in range(QUEUES)]
        best = min(best, time.perf_counter() - t)
        first = outs[0]
    return best / n * 1e6, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=48, help="messages per pull")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    has_raw = hasattr(MessageStore, "pull_raw")
    with tempfile.TemporaryDirectory() as tmp:
        with MessageStore.open(Path(tmp) / "log", StoreConfig()) as store:
            fill(store, args.messages)
            base, expected = run(store, drain_decoded, args.batch, args.messages, args.repeat)
            print(f"pull+encode_record      {base:6.2f} us/message")
            if has_raw:
                raw, got = run(store, drain_raw, args.batch, args.messages, args.repeat)
                assert got == expected, "pull_raw+write_raw wrote different bytes"
                print(f"pull_raw+write_raw      {raw:6.2f} us/message ({base / raw:.1f}x)")
        with MessageStore.open(Path(tmp) / "hot", StoreConfig()) as store:
            removers = [store.add_listener(queue_lmq(TOPIC, q), lambda *_: None)
                        for q in range(QUEUES)]
            fill(store, min(args.messages, 8000))  # within the hot tail's generation
            drain = drain_raw if has_raw else drain_decoded
            hot, _ = run(store, drain, args.batch, min(args.messages, 8000), args.repeat)
            print(f"hot tail+write_record   {hot:6.2f} us/message")
            for remove in removers:
                remove()


if __name__ == "__main__":
    main()
