"""Periodic storage housekeeping while the gateway runs (RIP-28 "data cleaning").

Every ``HOUSEKEEPING_INTERVAL_S``, in a worker thread (the store is thread-safe):

- **retention**: log segments past ``retention_ms`` / ``retention_bytes`` are removed and
  every LMQ's index entries below the new log start with them
  (:meth:`MessageStore.apply_retention`);
- **idle LMQs** (when ``lmq_ttl_ms`` > 0): LMQs with no write and no offset commit for
  the TTL are removed, except those still in use: an MQTT filter some session (online
  or offline) subscribes to, AMQP queues (whose lifetime is the queue's:
  ``x-expires``, delete) and the queues of existing RocketMQ topics (whose lifetime is
  the topic's: ``lmq topics delete``). So an offline device's backlog is never
  cleaned away under it.
"""

from __future__ import annotations

import asyncio
import logging

from broker_core import MessageStore
from gateway.topic_space import AMQP_PREFIX, MQTT_PREFIX, TopicSpace

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_S = 60.0


def _in_use(store: MessageStore, topic_space: TopicSpace, name: str) -> bool:
    if name.startswith(AMQP_PREFIX):
        return True
    if name.startswith(MQTT_PREFIX):
        return topic_space.subscriptions_on(name[len(MQTT_PREFIX) :]) > 0
    if topic_space.is_rocketmq_queue(name):
        return True
    return store.has_listeners(name)


def run_once(store: MessageStore, topic_space: TopicSpace) -> None:
    """One pass of retention and idle-LMQ removal (blocking: run it in a thread).
    Nothing on a slave of a broker group: its log is its master's, cut and cleaned
    there; the master's TRIM frames remove the slave's segments below the master's log
    start (docs/replication.md)."""
    if store.replica is not None and store.replica.fenced is not None:
        return
    report = store.apply_retention()
    if report.segments_removed:
        log.info(
            "retention",
            extra={
                "segments_removed": report.segments_removed,
                "bytes_removed": report.bytes_removed,
                "index_entries_removed": report.entries_removed,
            },
        )
    ttl = store.config.lmq_ttl_ms
    if ttl > 0:
        doomed = [i.name for i in store.idle_lmqs(ttl) if not _in_use(store, topic_space, i.name)]
        if doomed:
            removed = store.remove_lmqs(doomed)
            log.info("idle LMQs removed", extra={"lmqs": removed.lmqs, "messages": removed.entries})


async def housekeeping_loop(store: MessageStore, topic_space: TopicSpace) -> None:
    """:func:`run_once` every ``HOUSEKEEPING_INTERVAL_S``, in a worker thread."""
    while True:
        await asyncio.sleep(HOUSEKEEPING_INTERVAL_S)
        try:
            await asyncio.to_thread(run_once, store, topic_space)
        except Exception:
            log.exception("housekeeping failed")
