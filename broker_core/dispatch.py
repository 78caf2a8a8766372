"""The dispatcher: the write path that appends records and indexes them atomically.

``write_locked`` takes, for each message, every target LMQ's next offset, encodes the
record with that dispatch list and buffers it; then it writes the buffer to the commit
log and commits ONE index WriteBatch with the entries, the LMQs' metadata and the
"dispatched up to" checkpoint. So:

- offsets are dense and monotonic per LMQ (assigned under one lock, in log order);
- a reader sees a message in all of its LMQs or in none (one atomic WriteBatch);
- the log holds the dispatch list, so replaying it rebuilds the same index entries
  (:mod:`broker_core.recovery`); the index is derived data.

If anything fails (a full disk, a too-large record) the batch is undone: the records are
cut off the log, the LMQs it loaded or created are forgotten, the next id is put back
and the caches that could hold its positions or offsets are emptied. Nothing of it is
visible, and the same offsets are assigned again to the next batch.

Thread safety: every method is called with the store's append lock held.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from struct import Struct

from broker_core.clock import now_ms, tag_hash
from broker_core.commit_log import CommitLog
from broker_core.config import StoreConfig
from broker_core.consume_queue import ENTRY, ConsumeQueueIndex, LmqMeta
from broker_core.errors import MessageTooLarge
from broker_core.key_index import KeyIndex
from broker_core.listeners import Listeners
from broker_core.lmq_table import LmqTable, Pending
from broker_core.origins import ORIGIN_PROPERTY, OriginTable
from broker_core.record import (
    Message,
    Record,
    RecordType,
    encode_record_with_tail,
    record_of_message,
)
from broker_core.results import AppendResult
from broker_core.tail_cache import TailCache

log = logging.getLogger(__name__)

_OFFSET = Struct(">Q")
_COUNT = Struct(">I")  # a dispatch list's count (broker_core.record)


class Dispatcher:
    __slots__ = ("log", "index", "lmqs", "tail", "listeners", "config", "keys", "origins")

    def __init__(
        self,
        log: CommitLog,
        index: ConsumeQueueIndex,
        lmqs: LmqTable,
        tail: TailCache,
        listeners: Listeners,
        config: StoreConfig,
        keys: KeyIndex,
        origins: OriginTable,
    ) -> None:
        self.log = log
        self.index = index
        self.lmqs = lmqs
        self.tail = tail
        self.listeners = listeners
        self.config = config
        #: The key index, written in the same batch as the entries it belongs with.
        self.keys = keys
        #: Copies' high-water marks and translation keys, in the same batch.
        self.origins = origins

    def write_locked(
        self,
        items: Sequence[tuple[Message, Sequence[str]]],
        rtype: RecordType = RecordType.MESSAGE,
    ) -> tuple[list[AppendResult], list[LmqMeta]]:
        """Encode, write and index ``items``, records of type ``rtype``; returns their
        results and the LMQs they touched (for the listeners). This is the hot path: per
        message one encode, one log buffer append and one index value; per target LMQ
        one key and one WriteBatch put."""
        now = now_ms()
        log_ = self.log
        lmqs = self.lmqs
        batch = self.index.new_batch()
        put = batch.raw_putter()
        pending = Pending(start=log_.end, next_id=lmqs.next_id)
        touched = pending.metas
        results: list[AppendResult] = []
        buf = bytearray()
        pos = log_.end
        seg_room = self.config.segment_bytes
        room = seg_room - log_.active_size  # what fits in the active segment
        seg_base = log_.active_base  # the key index files a record's keys under it
        cache = lmqs.cache
        meta_for_write = lmqs.meta_for_write
        listened = self.listeners.by_lmq
        # the hot tail's young generation, filled as records are built (emptied if the
        # batch fails: it is a cache, and a failed batch's offsets are reused)
        hot = self.tail.young
        of_message = record_of_message
        pack_entry = ENTRY.pack
        pack_offset = _OFFSET.pack
        pack_count = _COUNT.pack
        encode = encode_record_with_tail
        new_result = tuple.__new__  # a NamedTuple's own __new__ is a Python lambda
        is_message = rtype == RecordType.MESSAGE
        # the key index's put, or None when no property is indexed; a message whose
        # properties name none of them costs one C-level set test (isdisjoint)
        put_keys = self.keys.put if self.keys.properties and is_message else None
        no_keys = self.keys.names.isdisjoint
        origins = self.origins
        stage_origin = origins.stage
        try:
            for message, targets in items:
                if is_message and len(targets) == 1:
                    # The common case (one subscription filter, one queue): no lists,
                    # one key. Same steps as the general path below.
                    name = targets[0]
                    meta = cache.get(name)
                    if meta is None:
                        meta = meta_for_write(name, now, batch, pending)
                    offset = meta.next_offset
                    record = encode(pos, now, message, meta.wire1 + pack_offset(offset), rtype)
                    size = len(record)
                    if len(buf) + size > room:
                        buf, room = self.room_for(buf, size, seg_room)
                        seg_base = log_.active_base
                    buf += record
                    props = message.properties
                    if props:
                        if put_keys is not None and not no_keys(props):
                            put_keys(put, message.topic, props, pos, now, seg_base)
                        if ORIGIN_PROPERTY in props:
                            stage_origin(put, message.topic, props[ORIGIN_PROPERTY], pos,
                                         ((meta.id, offset),))
                    if listened and name in listened:
                        hot[(meta.id, offset)] = of_message(
                            message, pos, size, now, ((name, offset),))
                    body = len(message.body)
                    put(
                        meta.key_prefix + pack_offset(offset),
                        pack_entry(
                            pos, size, body, tag_hash(message.tag) if message.tag else 0, now
                        ),
                    )
                    if offset == meta.min_offset:
                        meta.min_position = pos
                    meta.next_offset = offset + 1
                    meta.bytes += body
                    touched[meta.id] = meta
                    results.append(new_result(AppendResult, (pos, size, now, (offset,))))
                    pos += size
                    continue
                if len(set(targets)) != len(targets):
                    targets = list(dict.fromkeys(targets))
                # One pass over the targets: each LMQ's offset, its part of the dispatch
                # list (name, offset) and its index key share the packed offset.
                metas = []
                offsets = []
                keys = []
                parts = [pack_count(len(targets))]
                for name in targets:
                    meta = cache.get(name)
                    if meta is None:
                        meta = meta_for_write(name, now, batch, pending)
                    metas.append(meta)
                    offset = meta.next_offset
                    offsets.append(offset)
                    packed = pack_offset(offset)
                    parts.append(meta.wire)
                    parts.append(packed)
                    keys.append(meta.key_prefix + packed)
                record = encode(pos, now, message, b"".join(parts), rtype)
                size = len(record)
                if len(buf) + size > room:
                    buf, room = self.room_for(buf, size, seg_room)
                    seg_base = log_.active_base
                buf += record
                if is_message:
                    props = message.properties
                    if props:
                        if put_keys is not None and not no_keys(props):
                            put_keys(put, message.topic, props, pos, now, seg_base)
                        if ORIGIN_PROPERTY in props:
                            stage_origin(put, message.topic, props[ORIGIN_PROPERTY], pos,
                                         [(m.id, o) for m, o in zip(metas, offsets,
                                                                    strict=True)])
                    body = len(message.body)
                    thash = tag_hash(message.tag) if message.tag else 0
                    value = pack_entry(pos, size, body, thash, now)
                    shared: Record | None = None  # one hot-tail record for all its LMQs
                    for meta, key in zip(metas, keys, strict=True):
                        put(key, value)
                        offset = meta.next_offset
                        if listened and meta.name in listened:
                            if shared is None:
                                shared = of_message(
                                    message, pos, size, now,
                                    tuple(zip(targets, offsets, strict=True)))
                            hot[(meta.id, offset)] = shared
                        if offset == meta.min_offset:
                            meta.min_position = pos
                        meta.next_offset = offset + 1
                        meta.bytes += body
                        touched[meta.id] = meta
                elif rtype == RecordType.ORIGIN_ADVANCE:  # only the high-water mark
                    stage_origin(put, message.topic, message.body, pos)
                else:  # an LMQ removal: the index forgets the LMQs in this same batch
                    for meta in metas:
                        batch.delete_lmq(meta)
                        lmqs.forget(meta.name)
                        touched.pop(meta.id, None)
                results.append(new_result(AppendResult, (pos, size, now, tuple(offsets))))
                pos += size
            if buf:
                log_.write(buf)
            move_to_end = cache.move_to_end
            for meta in touched.values():
                # LRU order and the write time, once per LMQ of the batch (not per message)
                meta.last_write_ms = now
                if meta.name in cache:
                    move_to_end(meta.name)
                batch.put_meta(meta)
            batch.put_checkpoint(lmqs.checkpoint(pos))
            batch.commit()
        except BaseException:
            origins.discard()
            self.tail.drop_young()
            self.undo(pending)
            raise
        origins.commit()
        lmqs.trim()
        self.tail.rotate()
        return results, list(touched.values())

    def room_for(self, buf: bytearray, size: int, seg_room: int) -> tuple[bytearray, int]:
        """A record of ``size`` bytes does not fit behind ``buf`` in the active segment:
        write ``buf`` out, roll if need be; the new (empty) buffer and the room left."""
        if size > seg_room:
            raise MessageTooLarge(size, seg_room)
        log_ = self.log
        if buf:
            log_.write(buf)
            buf = bytearray()
        if not log_.fits(size):
            log_.roll()
        return buf, seg_room - log_.active_size

    def undo(self, pending: Pending) -> None:
        """Forget in-memory changes of a failed batch and cut its records off the log."""
        self.lmqs.undo(pending)
        self.tail.clear_records()  # positions past pending.start will be reused
        if self.log.end > pending.start:
            try:
                self.log.truncate(pending.start)
            except OSError:
                log.exception("could not cut a failed batch off the log")

    def create_lmq_locked(self, name: str) -> LmqMeta:
        """Make sure an LMQ exists: index metadata only, no record in the log."""
        existing = self.lmqs.meta_for_read(name)
        if existing is not None:
            return existing
        end = self.log.end
        batch = self.index.new_batch()
        pending = Pending(start=end, next_id=self.lmqs.next_id)
        try:
            meta = self.lmqs.meta_for_write(name, now_ms(), batch, pending)
            meta.min_position = end
            batch.put_meta(meta)
            batch.put_checkpoint(self.lmqs.checkpoint(end))
            batch.commit()
        except BaseException:
            self.undo(pending)
            raise
        return meta

    def touch_locked(self, meta: LmqMeta, now: int) -> None:
        """Record consumer activity on an LMQ (the idle TTL reads ``touched_ms``)."""
        current = self.lmqs.cache.get(meta.name) or self.index.meta(meta.id)
        if current is None:
            return
        current.touched_ms = now
        batch = self.index.new_batch()
        batch.put_meta(current)
        batch.commit()
