"""Store configuration. Each option is documented where it is defined."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Durability(enum.StrEnum):
    """When an append is acknowledged.

    ``async``: the record is handed to the OS (``write``) before the append returns, and
    a flusher fsyncs at most ``flush_interval_ms`` later. A process crash (kill -9) loses
    nothing that was acknowledged; an OS crash or power loss can lose the last
    ``flush_interval_ms`` of acknowledged appends.

    ``sync``: an append is acknowledged only after an fsync that covers it (group
    commit: every writer waiting at that moment shares one fsync). Neither a process
    crash nor a power loss loses an acknowledged append.
    """

    ASYNC = "async"
    SYNC = "sync"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    #: Durability mode, see :class:`Durability`.
    durability: Durability = Durability.ASYNC
    #: In async mode, the longest time an appended record waits for its fsync.
    flush_interval_ms: int = 500
    #: Commit-log segment size in bytes. A record never spans two segments, so this is
    #: also the largest record (message plus its dispatch list) the log can hold.
    segment_bytes: int = 256 * 1024 * 1024
    #: Largest message body accepted; larger appends raise MessageTooLarge. Every front
    #: end refuses bodies above it (RabbitMQ's default ``max_message_size``, 16 MiB).
    max_message_bytes: int = 16 * 1024 * 1024
    #: Largest number of LMQs one message may be dispatched to.
    max_fanout: int = 100_000
    #: Retention: log segments whose newest record is older than this are removed
    #: (0 = keep forever). The active segment is never removed.
    retention_ms: int = 7 * 24 * 3600 * 1000
    #: Retention: the oldest segments are removed while the log is larger than this
    #: (0 = no size limit).
    retention_bytes: int = 0
    #: LMQs with no write and no offset commit for this long are removed by cleanup,
    #: entries and offsets alike (0 = never expire).
    lmq_ttl_ms: int = 0
    #: How many LMQs keep their dispatch state (id, next offset) cached in memory. The
    #: rest live only in RocksDB, so memory does not grow with the number of LMQs.
    lmq_cache_size: int = 65_536
    #: Pop: deliveries after which an unacked message goes to the dead-letter LMQ.
    max_deliveries: int = 16
    #: Pop: prefix of the dead-letter LMQ of a group (the group name follows).
    dead_letter_prefix: str = "%DLQ%"
    #: Maximum length of an LMQ name in UTF-8 bytes.
    max_lmq_name_bytes: int = 4096
    #: What opening the store does with damage in the commit log after the index
    #: checkpoint that is not a torn tail (valid records follow it: a flipped bit, a lost
    #: page). ``"refuse"``: the start fails with a StoreError naming the segment and
    #: position, and the log is left as it is. ``"skip"``: the damaged bytes are skipped up to
    #: the next valid record, reported in ``store.recovery`` and logged; the messages in
    #: them are lost, those after them kept. A torn tail (nothing valid after it) is
    #: always cut off; damage in an old record is never served (reads of it raise
    #: CorruptRecord). The index rebuild (``lmq store rebuild-index``) follows it too.
    on_corrupt: str = "refuse"
    #: Message properties whose values (split on spaces) are keys of the key index
    #: (:mod:`broker_core.key_index`): ``MessageStore.find_by_key(topic, key)``. The
    #: default names RocketMQ's ``KEYS`` and ``UNIQ_KEY``; a message carrying neither
    #: (every MQTT and AMQP message, unless a client sets a property of that name) is
    #: not indexed and costs nothing. Empty: no key index. A rebuild of the index
    #: (``lmq store rebuild-index``) indexes by the setting it runs with.
    key_index_properties: tuple[str, ...] = ("KEYS", "UNIQ_KEY")
    #: Timers (:mod:`broker_core.timers`): the longest delay a delayed message may ask
    #: for, in ms (40 days); a later due time is refused with ``DelayTooLong``. Pending
    #: timers cost one RocksDB key each and no memory, so this bounds nothing but intent.
    max_timer_delay_ms: int = 40 * 24 * 3600 * 1000
    #: Timers: RocketMQ's delay levels, level 1 first (``s``, ``m``, ``h``, ``d`` units).
    delay_levels: tuple[str, ...] = (
        "1s", "5s", "10s", "30s", "1m", "2m", "3m", "4m", "5m", "6m", "7m", "8m", "9m",
        "10m", "20m", "30m", "1h", "2h",
    )
    #: Timers: most timers fired in one log write and one index batch (a page); due
    #: timers are read from the index a page at a time, never all at once.
    timer_page: int = 1024

    # FIFO pop (broker_core.fifo): message groups consumed in order.
    #: The first retry backoff of a FIFO message whose invisible time ran out unacked:
    #: it comes back first for its group this long after, doubling with each delivery.
    fifo_retry_backoff_ms: int = 1_000
    #: The longest FIFO retry backoff.
    fifo_retry_max_backoff_ms: int = 60_000
    #: New messages one FIFO pop reads at most (delivered or parked behind their group).
    fifo_scan_limit: int = 4096

    # Transactions (broker_core.transactions): the check-back schedule of half messages.
    #: The first check of a half message is due this long after it was stored (or after
    #: its ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property, if longer).
    txn_first_check_ms: int = 6_000
    #: Between two checks of the same half message.
    txn_check_interval_ms: int = 30_000
    #: Checks after which an unresolved half message is dead-lettered, not checked again.
    txn_max_checks: int = 15
    #: The LMQ unresolved half messages go to after their last check (RocketMQ's topic).
    txn_dead_letter_lmq: str = "TRANS_CHECK_MAX_TIME_TOPIC"

    def __post_init__(self) -> None:
        if self.segment_bytes < 64 * 1024:
            raise ValueError("segment_bytes must be at least 64 KiB")
        if self.max_message_bytes >= self.segment_bytes:
            raise ValueError("max_message_bytes must be smaller than segment_bytes")
        if self.flush_interval_ms <= 0:
            raise ValueError("flush_interval_ms must be positive")
        if self.max_deliveries < 1:
            raise ValueError("max_deliveries must be at least 1")
        if self.max_timer_delay_ms <= 0 or self.timer_page < 1:
            raise ValueError("max_timer_delay_ms and timer_page must be positive")
        if self.txn_first_check_ms < 0 or self.txn_check_interval_ms <= 0:
            raise ValueError("txn_first_check_ms must be >= 0, txn_check_interval_ms > 0")
        if self.fifo_retry_backoff_ms < 0 or self.fifo_retry_max_backoff_ms < 0:
            raise ValueError("the FIFO retry backoffs cannot be negative")
        if self.fifo_scan_limit < 1:
            raise ValueError("fifo_scan_limit must be at least 1")
        if self.txn_max_checks < 0:
            raise ValueError("txn_max_checks must be at least 0")
        if not self.delay_levels:
            raise ValueError("delay_levels needs at least one level")
        for level in self.delay_levels:
            parse_duration_ms(level)  # a ValueError that names it
        if self.on_corrupt not in ("refuse", "skip"):
            raise ValueError(f"on_corrupt must be 'refuse' or 'skip', not {self.on_corrupt!r}")


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``"1s"``, ``"2m"``, ``"1h"``, ``"250ms"`` in ms (the notation of
    ``StoreConfig.delay_levels``); ValueError otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d)\s*", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 1s, 5m, 2h)")
    return int(match.group(1)) * _UNITS[match.group(2)]
