"""The RocketMQ topic registry: every topic's :class:`~lmq.rocketmq.TopicConfig`, its
queue LMQs, and auto-creation.

A topic is its configuration in the store's metadata under ``rmq/topic/<name>``
(:func:`lmq.rocketmq.topic_meta_key`) plus one LMQ per queue, ``rmq:<name>:<q>``
(:func:`lmq.rocketmq.queue_lmq`), for ``q`` below ``TopicConfig.queue_count``. The
registry loads every configuration when it is built and keeps them in a dict; the
metadata is the durable copy, written before the dict changes.

Invariants:

- a topic in the registry has all of its queue LMQs (:meth:`TopicRegistry.create` makes
  them with ``store.create_lmq`` before it persists the configuration; on load, missing
  ones are made again: an empty LMQ is index metadata only and an index rebuild from
  the log forgets it);
- changing a topic's queue counts grows the set of queues freely, and shrinks it only
  over queues that hold no message (:class:`QueueInUse` otherwise), so no message is
  ever dropped by a configuration change;
- :meth:`TopicRegistry.delete` removes the configuration first, then the LMQs (entries,
  committed offsets, pop state) through ``store.remove_lmqs``: a crash in between
  leaves LMQs without a topic, which ``delete`` of the same name removes again.

Change listeners (:meth:`TopicRegistry.add_listener`) are called with the topic name
after every create, change or delete; the topic space uses one to drop its route memo.

Thread safety: none of its own. The gateway calls it on the event-loop thread; the
``lmq`` CLI on its one thread with the gateway stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from broker_core import MessageStore
from lmq.rocketmq import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    TOPIC_META_PREFIX,
    InvalidName,
    MessageType,
    Perm,
    TopicConfig,
    is_system_topic,
    queue_lmq,
    topic_meta_key,
    validate_topic,
)

__all__ = [
    "AUTO_CREATE_GROUPS", "AUTO_CREATE_TOPICS", "SPECIAL_TOPIC_QUEUES", "QueueInUse",
    "TopicListener", "TopicOptionError", "TopicRegistry", "changed_topic", "check_name",
    "parse_perm", "perm_text", "topic_document",
]

log = logging.getLogger(__name__)

#: The gateway's defaults (RocketMQ's ``autoCreateTopicEnable`` and
#: ``autoCreateSubscriptionGroup``, both on by default there too).
AUTO_CREATE_TOPICS = True
AUTO_CREATE_GROUPS = True

#: Called with a topic's name after it was created, changed or deleted.
TopicListener = Callable[[str], None]

#: Queues of an auto-created retry (``%RETRY%<group>``) or dead-letter (``%DLQ%<group>``)
#: topic: one, as RocketMQ's broker creates them (``retryQueueNums``, ``DLQ_NUMS_PER_GROUP``).
SPECIAL_TOPIC_QUEUES = 1


class QueueInUse(ValueError):
    """A change of queue counts would drop a queue that still holds messages."""


class TopicRegistry:
    """RocketMQ topics on the store.

    ``auto_create``: :meth:`ensure` creates an unknown topic with ``default_queues``
    read and write queues (RocketMQ's ``autoCreateTopicEnable``), of type
    ``auto_type`` (MIXED by default: the producer that created it may send any message
    type; NORMAL in the strict mode). Retry and dead-letter
    topics are created by :meth:`ensure` whatever ``auto_create`` says, with one queue,
    as RocketMQ's broker creates them itself on a consumer's first pull or send-back.
    """

    def __init__(
        self, store: MessageStore, auto_create: bool, default_queues: int,
        auto_type: MessageType = MessageType.MIXED,
    ) -> None:
        if not 1 <= default_queues <= 1024:
            raise ValueError(f"default_queues must be 1-1024, not {default_queues}")
        self.store = store
        self.auto_create = auto_create
        self.default_queues = default_queues
        self.auto_type = auto_type
        self._topics: dict[str, TopicConfig] = {}
        self._listeners: list[TopicListener] = []
        self._load()

    def _load(self) -> None:
        store = self.store
        for key, raw in store.iter_meta(TOPIC_META_PREFIX):
            if not key.startswith(TOPIC_META_PREFIX):
                break
            try:
                config = TopicConfig.decode(raw)
            except (ValueError, TypeError) as exc:
                log.warning("ignoring the unreadable topic configuration %s: %s", key, exc)
                continue
            self._topics[config.name] = config
            if not store.read_only:
                for lmq in config.lmqs():
                    if store.lmq(lmq) is None:
                        store.create_lmq(lmq)

    def reload(self) -> None:
        """Read the configurations again from the store (a promoted member of a broker
        group: they came replicated); listeners hear of every name that was or is."""
        before = set(self._topics)
        self._topics = {}
        self._load()
        for name in before | set(self._topics):
            self._changed(name)

    # -- lookups ------------------------------------------------------------------------

    def get(self, name: str) -> TopicConfig | None:
        """The topic's configuration, or None if there is no such topic."""
        config = self._topics.get(name)
        if config is None and self._replica_fenced():
            config = self._replicated(name)
        return config

    def _replica_fenced(self) -> bool:
        replica = self.store.replica
        return replica is not None and replica.fenced is not None

    def _replicated(self, name: str) -> TopicConfig | None:
        """A slave of a broker group: a topic its master created since this member
        loaded the registry (its configuration came replicated), so that reads from the
        slave find it (docs/replication.md, "routes name the slaves")."""
        raw = self.store.get_meta(topic_meta_key(name))
        if raw is None:
            return None
        try:
            config = TopicConfig.decode(raw)
        except (ValueError, TypeError):
            return None
        self._topics[name] = config
        self._changed(name)
        return config

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __len__(self) -> int:
        return len(self._topics)

    def names(self) -> list[str]:
        """Every topic's name, sorted."""
        return sorted(self._topics)

    def configs(self) -> Iterator[TopicConfig]:
        """Every topic's configuration, by name."""
        for name in self.names():
            yield self._topics[name]

    # -- changes ------------------------------------------------------------------------

    def add_listener(self, listener: TopicListener) -> Callable[[], None]:
        """Call ``listener(name)`` after each create, change or delete; returns a function
        that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def create(self, config: TopicConfig) -> TopicConfig:
        """Create the topic, or change an existing one to ``config``; returns ``config``.

        Its queue LMQs are created first, then the configuration is persisted. When the
        new ``queue_count`` is lower than the old one, the queues above it are removed
        if none holds a message; otherwise :class:`QueueInUse` is raised and nothing
        changes (lower the write queues first, let consumers drain the queue, then
        lower the read queues: RocketMQ's own procedure)."""
        store = self.store
        old = self._topics.get(config.name)
        dropped: list[str] = []
        if old is not None and config.queue_count < old.queue_count:
            for q in range(config.queue_count, old.queue_count):
                lmq = queue_lmq(config.name, q)
                info = store.lmq(lmq)
                if info is not None and info.messages > 0:
                    raise QueueInUse(
                        f"queue {q} of topic {config.name!r} holds {info.messages}"
                        " message(s); it can be removed once it is empty"
                    )
                dropped.append(lmq)
        for lmq in config.lmqs():
            store.create_lmq(lmq)
        store.put_meta(topic_meta_key(config.name), config.encode())
        self._topics[config.name] = config
        if dropped:
            store.remove_lmqs(dropped)
        self._changed(config.name)
        return config

    def ensure(self, name: str) -> TopicConfig | None:
        """The topic's configuration, creating the topic if it is missing and may be
        created: a retry or dead-letter topic always (one queue), any other valid,
        non-system name when ``auto_create`` is on (``default_queues`` queues). None
        when the topic does not exist and may not be created. An auto-created topic is
        of type ``auto_type``; a retry or dead-letter topic is NORMAL. Raises
        :class:`~lmq.rocketmq.InvalidName` for a name RocketMQ would refuse."""
        config = self.get(name)
        if config is not None:
            return config
        validate_topic(name)
        kind = MessageType.NORMAL
        if name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            queues = SPECIAL_TOPIC_QUEUES
        elif not self.auto_create or is_system_topic(name) or "%" in name:
            return None
        else:
            queues, kind = self.default_queues, self.auto_type
        return self.create(
            TopicConfig(name, read_queues=queues, write_queues=queues, message_type=kind))

    def delete(self, name: str) -> bool:
        """Delete the topic: its configuration, then its queue LMQs with their messages,
        committed offsets and pop state. Also removes ``rmq:<name>:*`` LMQs left by an
        interrupted delete. Returns whether there was anything to delete."""
        store = self.store
        existed = self._topics.pop(name, None) is not None
        if existed:
            store.delete_meta(topic_meta_key(name))
        lmqs = [info.name for info in store.lmqs(queue_lmq(name, 0)[:-1])]
        if lmqs:
            store.remove_lmqs(lmqs)
        if existed:
            self._changed(name)
        return existed or bool(lmqs)

    def _changed(self, name: str) -> None:
        for listener in list(self._listeners):
            listener(name)


def check_name(name: str) -> str:
    """``name`` if it may name a topic created by an operator (valid, not a system
    topic); :class:`~lmq.rocketmq.InvalidName` otherwise."""
    validate_topic(name)
    if is_system_topic(name):
        raise InvalidName(f"{name!r} is a RocketMQ system topic")
    return name


# -- an operator's create or change (``lmq topics create``, the admin API) ---------------

_PERMS = {"rw": Perm.READ | Perm.WRITE, "r": Perm.READ, "w": Perm.WRITE, "-": 0}


class TopicOptionError(ValueError):
    """An option of a topic change refused: ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_perm(text: str) -> int:
    """``rw``, ``r``, ``w``, ``-`` or RocketMQ's number (6, 4, 2, 0; 1 = inherit)."""
    lowered = text.strip().lower()
    if lowered in _PERMS:
        return int(_PERMS[lowered])
    if lowered.isdigit() and int(lowered) <= 7:
        return int(lowered)
    raise TopicOptionError("perm", f"{text!r}: give rw, r, w, - or RocketMQ's number (6, 4, 2)")


def perm_text(perm: int) -> str:
    text = ("r" if perm & Perm.READ else "") + ("w" if perm & Perm.WRITE else "")
    return text or "-"


def changed_topic(
    name: str, old: TopicConfig | None, *, queues: int | None = None,
    read_queues: int | None = None, write_queues: int | None = None,
    perm: str | None = None, message_type: str | None = None,
) -> TopicConfig:
    """The configuration an operator asks for: ``old`` (or a new topic's defaults: 8 read
    and 8 write queues, ``rw``, NORMAL) with the options given. ``queues`` sets both
    counts and excludes the other two. Raises :class:`TopicOptionError` naming the
    option at fault (``name`` for an invalid or system topic name)."""
    try:
        check_name(name)
    except InvalidName as exc:
        raise TopicOptionError("name", str(exc)) from None
    if queues is not None:
        if read_queues is not None or write_queues is not None:
            raise TopicOptionError("queues", "give queues, or read_queues and/or write_queues")
        if not 1 <= queues <= 1024:
            raise TopicOptionError("queues", f"queues must be 1-1024, not {queues}")
        read_queues = write_queues = queues
    for field, value in (("read_queues", read_queues), ("write_queues", write_queues)):
        if value is not None and not 1 <= value <= 1024:
            raise TopicOptionError(field, f"{field} must be 1-1024, not {value}")
    kind = None
    if message_type is not None:
        try:
            kind = MessageType(message_type.upper())
        except ValueError:
            raise TopicOptionError("message_type", f"message_type must be one of "
                                   f"{', '.join(t.value for t in MessageType)}") from None
    base = old or TopicConfig(name)
    return TopicConfig(
        name,
        read_queues=read_queues if read_queues is not None else base.read_queues,
        write_queues=write_queues if write_queues is not None else base.write_queues,
        perm=parse_perm(perm) if perm is not None else base.perm,
        message_type=kind or base.message_type,
    )


def topic_document(store: MessageStore, config: TopicConfig) -> dict[str, Any]:
    """A topic's configuration and each queue's min/max offsets, messages and bytes
    (``lmq topics show --json``, the admin API)."""
    queues = []
    for q in range(config.queue_count):
        info = store.lmq(queue_lmq(config.name, q))
        queues.append({
            "queue_id": q,
            "lmq": queue_lmq(config.name, q),
            "min_offset": info.min_offset if info else 0,
            "max_offset": info.max_offset if info else 0,
            "messages": info.messages if info else 0,
            "bytes": info.bytes if info else 0,
            "last_write_ms": info.last_write_ms if info else 0,
        })
    return {
        "name": config.name,
        "read_queues": config.read_queues,
        "write_queues": config.write_queues,
        "perm": int(config.perm),
        "perm_text": perm_text(config.perm),
        "message_type": config.message_type.value,
        "queues": queues,
    }
