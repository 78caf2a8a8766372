"""Retained messages: durable, one per topic, matched against new subscriptions.

Each retained message is kept in the store's metadata (the state RocksDB) under
``mqtt/retained/<topic>``, encoded as a commit-log record (:mod:`broker_core.record`)
so it keeps its properties, QoS, origin and times; it does not depend on the log, so
log retention never drops it. An empty payload clears the topic (MQTT 3.3.1.3).

Matching a filter is a prefix scan: the levels before the filter's first wildcard are
a literal key prefix, and each key under it is checked with the MQTT matching rules
(``$``-topics are not matched by a leading wildcard). Nothing is held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker_core import Message, MessageStore
from broker_core.record import Record, decode_record, encode_record
from lmq.topic_trie import filter_matches

PREFIX = "mqtt/retained/"


def literal_prefix(topic_filter: str) -> str:
    """The key prefix every topic matching the filter starts with: the levels before the
    first wildcard (``a/b/+/c`` -> ``a/b/``; ``a/#`` -> ``a``, since ``a/#`` matches
    ``a`` itself)."""
    out: list[str] = []
    for level in topic_filter.split("/"):
        if level == "+":
            return "/".join(out) + "/" if out else ""
        if level == "#":
            return "/".join(out)
        out.append(level)
    return topic_filter


class RetainedStore:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def set(self, message: Message, store_ms: int) -> None:
        """Retain ``message`` on its topic, or clear the topic if the body is empty."""
        key = PREFIX + message.topic
        if not message.body:
            self.store.delete_meta(key)
            return
        raw = encode_record(position=0, store_ms=store_ms, message=message, dispatch=[])
        self.store.put_meta(key, raw)

    def get(self, topic: str) -> Record | None:
        raw = self.store.get_meta(PREFIX + topic)
        return None if raw is None else decode_record(raw, 0)

    def matching(self, topic_filter: str) -> Iterator[Record]:
        prefix = literal_prefix(topic_filter)
        for key, raw in self.store.iter_meta(PREFIX + prefix):
            topic = key[len(PREFIX) :]
            if filter_matches(topic_filter, topic):
                yield decode_record(raw, 0)

    def count(self) -> int:
        return sum(1 for _ in self.store.iter_meta(PREFIX))
