"""The RocketMQ consumer-group registry: every group's :class:`~lmq.rocketmq.GroupConfig`
in the store's metadata under ``rmq/group/<name>`` (:func:`lmq.rocketmq.group_meta_key`),
loaded when the registry is built and kept in a dict (the metadata is the durable copy,
written before the dict changes).

A group owns no LMQ of its own: its committed offsets are the store's offsets of group
``<name>`` on the ``rmq:`` queue LMQs it consumes, and its retry and dead-letter topics
(``%RETRY%<name>``, ``%DLQ%<name>``) are topics of the
:class:`~gateway.rocketmq.topics.TopicRegistry`. :meth:`GroupRegistry.delete` removes
the configuration only; offsets are left to ``lmq offsets`` (RocketMQ's
``deleteSubGroup`` likewise keeps the consumer offsets unless asked to clean them).

Thread safety: none of its own (event-loop thread in the gateway; the CLI's one thread).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from broker_core import MessageStore
from broker_core.clock import now_ms
from lmq.rocketmq import (
    GROUP_META_PREFIX,
    LMQ_PREFIX,
    GroupConfig,
    dlq_topic,
    group_meta_key,
    parse_queue_lmq,
    queue_lmq,
    validate_group,
)

if TYPE_CHECKING:
    from broker_core import BlockedGroup

__all__ = [
    "GroupRegistry", "Released", "add_lag", "blocked_row", "group_progress", "group_summaries",
    "in_flight_rows",
    "release_message_group",
]

log = logging.getLogger(__name__)


class GroupRegistry:
    """RocketMQ consumer groups on the store.

    ``auto_create``: :meth:`ensure` creates an unknown group with the default
    :class:`~lmq.rocketmq.GroupConfig` on its first use (RocketMQ's
    ``autoCreateSubscriptionGroup``, on by default there too).
    """

    def __init__(self, store: MessageStore, auto_create: bool = True) -> None:
        self.store = store
        self.auto_create = auto_create
        self._groups: dict[str, GroupConfig] = {}
        self.reload()

    def reload(self) -> None:
        """Read the configurations from the store (again, on a promoted member of a
        broker group: they came replicated)."""
        self._groups = {}
        for key, raw in self.store.iter_meta(GROUP_META_PREFIX):
            try:
                config = GroupConfig.decode(raw)
            except (ValueError, TypeError) as exc:
                log.warning("ignoring the unreadable group configuration %s: %s", key, exc)
                continue
            self._groups[config.name] = config

    def get(self, name: str) -> GroupConfig | None:
        """The group's configuration, or None if there is no such group."""
        return self._groups.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._groups

    def __len__(self) -> int:
        return len(self._groups)

    def names(self) -> list[str]:
        """Every group's name, sorted."""
        return sorted(self._groups)

    def create(self, config: GroupConfig) -> GroupConfig:
        """Create the group or replace its configuration; returns ``config``."""
        self.store.put_meta(group_meta_key(config.name), config.encode())
        self._groups[config.name] = config
        return config

    def ensure(self, name: str) -> GroupConfig | None:
        """The group's configuration, creating it with the defaults when it is missing
        and ``auto_create`` is on; None otherwise. Raises
        :class:`~lmq.rocketmq.InvalidName` for a name RocketMQ would refuse."""
        config = self._groups.get(name)
        if config is not None:
            return config
        validate_group(name)
        if not self.auto_create:
            return None
        return self.create(GroupConfig(name))

    def delete(self, name: str) -> bool:
        """Forget the group's configuration; returns whether it existed."""
        if self._groups.pop(name, None) is None:
            return False
        self.store.delete_meta(group_meta_key(name))
        return True


def group_progress(store: MessageStore, group: str | None = None, *, lag: bool = True
                   ) -> dict[str, list[dict[str, Any]]]:
    """group -> one row per RocketMQ queue it committed an offset on (topic, queue id,
    offset, the queue's max offset, lag), by topic and queue; of every group, or of
    ``group``. Reads every committed offset: a worker thread in the gateway. Without
    ``lag``, the rows have no max offset and lag (no LMQ read: :func:`add_lag` adds
    them to the rows wanted)."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for lmq, name, offset in store.offsets():
        if group is not None and name != group:
            continue
        parsed = parse_queue_lmq(lmq) if lmq.startswith(LMQ_PREFIX) else None
        if parsed is None:
            continue
        rows[name].append({"topic": parsed[0], "queue_id": parsed[1], "lmq": lmq,
                           "offset": offset})
    for group_rows in rows.values():
        group_rows.sort(key=lambda r: (r["topic"], r["queue_id"]))
    if lag:
        add_lag(store, [r for group_rows in rows.values() for r in group_rows])
    return rows


def add_lag(store: MessageStore, rows: list[dict[str, Any]]) -> None:
    """Each row of :func:`group_progress` gets its queue's ``max_offset`` and its
    ``lag`` (one LMQ read per queue)."""
    maxes: dict[str, int] = {}
    for row in rows:
        lmq = row["lmq"]
        if lmq not in maxes:
            info = store.lmq(lmq)
            maxes[lmq] = info.max_offset if info else 0
        row["max_offset"] = maxes[lmq]
        row["lag"] = max(0, maxes[lmq] - row["offset"])


def group_summaries(registry: GroupRegistry, progress: dict[str, list[dict[str, Any]]]
                    ) -> list[dict[str, Any]]:
    """One row per group, configured or with committed offsets (``progress``, of
    :func:`group_progress`), by name: what ``lmq groups list`` prints and the admin
    API lists."""
    rows = []
    for name in sorted(set(registry.names()) | set(progress)):
        config = registry.get(name)
        queues = progress.get(name, [])
        rows.append({
            "group": name,
            "configured": config is not None,
            "retry_max_times": config.retry_max_times if config else None,
            "consume_enable": config.consume_enable if config else None,
            "topics": sorted({r["topic"] for r in queues}),
            "queues": len(queues),
            "lag": sum(r.get("lag", 0) for r in queues),  # (0 before add_lag)
        })
    return rows


def blocked_row(b: BlockedGroup) -> dict[str, Any]:
    """A blocked FIFO message group as ``lmq groups show`` and the admin API show it."""
    parsed = parse_queue_lmq(b.lmq)
    return {
        "message_group": b.message_group,
        "topic": parsed[0] if parsed else None,
        "queue_id": parsed[1] if parsed else None,
        "lmq": b.lmq,
        "offset": b.offset,
        "deliveries": b.deliveries,
        "since_ms": b.since_ms,
        "blocked_for_ms": max(0, now_ms() - b.since_ms),
        "retry_at_ms": b.ready_at,
        "waiting": b.waiting,
    }


def in_flight_rows(
    store: MessageStore, group: str, lmq: str, after: int = -1, limit: int = 100
) -> tuple[list[dict[str, Any]], bool]:
    """The messages of ``lmq`` that ``group`` popped and has not acked, by offset, the
    first ``limit`` after offset ``after`` (read-only, from the store's pop state), as
    ``lmq groups show --in-flight`` and the admin API show them; and whether more
    follow. The message id is the client's (``UNIQ_KEY``), one LMQ read per row."""
    items = store.pop.inflight_messages(group, lmq, after, limit + 1)
    rows = []
    for item in items[:limit]:
        message = store.read_at(lmq, item.key.offset)
        uniq = message.record.properties.get("UNIQ_KEY") if message else None
        rows.append(
            {
                "offset": item.key.offset,
                "message_id": uniq.decode("utf-8", "replace") if uniq else None,
                "deliveries": item.deliveries,
                "popped_ms": item.popped_ms,
                "invisible_until_ms": item.key.visible_at,
            }
        )
    return rows, len(items) > limit


class Released(NamedTuple):
    queue_id: int
    offset: int
    dead_letter_topic: str


def release_message_group(
    store: MessageStore, ensure_topic: Callable[[str], Any], group: str, topic: str,
    message_group: str,
) -> Released | None:
    """Release a blocked FIFO message group of ``group`` on ``topic``: its head message
    goes to ``%DLQ%<group>`` (made with ``ensure_topic`` when missing) and the group
    moves on (``store.pop.release_message_group``). None when the
    message group has no message out on the topic's queue LMQs. (``lmq groups
    release``, the gRPC admin call and the admin API.)"""
    dlq = dlq_topic(group)
    for info in store.lmqs(queue_lmq(topic, 0)[:-1]):
        parsed = parse_queue_lmq(info.name)
        if parsed is None or parsed[0] != topic:
            continue
        offset = store.pop.release_message_group(group, info.name, message_group,
                                             queue_lmq(dlq, 0))
        if offset is not None:
            ensure_topic(dlq)  # only once a head went there: a refusal leaves no topic
            return Released(parsed[1], offset, dlq)
    return None
