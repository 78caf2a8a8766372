"""Commit-log records decoded a batch at a time into Arrow columns (numpy + pyarrow).

The record layout is :mod:`broker_core.record`'s and nothing else: the header's numpy
dtype is derived from :data:`broker_core.record.HEADER`, and every decision that is not
the common case goes to :func:`broker_core.record.decode_record` itself. So the two
readers agree by construction where they share code and by test
(``tests/spark/test_spark_columnar.py``: equal on every record kind, damaged bytes
included) where they do not.

How a byte range is read (:func:`scan_columns`, the same contract as
:func:`spark.reader.scan_range`: the records that *start* in ``[start, end)``, damage
counted by the task that walks onto it):

1. **Walk** (Python, one ``unpack_from`` per record): follow the size fields from the
   current position while the magic and the size are plausible, up to
   :data:`BATCH_ROWS` records. This is the only per-record Python loop besides the CRC.
2. **Check, vectorised**: gather the candidates' headers into one numpy array and test
   at once what :func:`decode_record` tests one by one: CRC32C (the ``crc32c`` C
   function, once per record), stored position, type and protocol, field lengths, the
   dispatch list's structure (walked entry by entry across all records at once) and
   UTF-8 of the origin, topic and LMQ names (Arrow's validation; a batch that fails it
   is checked record by record to find the culprit). A record with a tag or properties
   (rare on the MQTT path) is checked by :func:`decode_record` itself.
3. **Columns**: the valid prefix of the walk becomes Arrow arrays by gathering bytes
   (strings as offsets + one values buffer, LMQ lists as list offsets + names), with no
   Python object per record.
4. **The rest, exactly as before**: at the first record that is not valid (or a timer
   fire or transaction control record, whose body the row reader interprets),
   :func:`decode_record`, :func:`broker_core.record.find_record` and the row reader's
   damage accounting take over for that one step, then the walk resumes.

The reader's ``decoder="rows"`` (the data source's option ``decoder``) uses the
record-at-a-time path (:func:`spark.reader.scan_range`) instead: the reference this
module is tested against.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from broker_core.errors import CorruptRecord, InsufficientData
from broker_core.record import (
    FLAG_DELAYED,
    FLAG_QOS_MASK,
    FLAG_RETAIN,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_RECORD_SIZE,
    Protocol,
    RecordType,
    decode_record,
    find_record,
)

#: Records per walk (and at most per Arrow batch).
BATCH_ROWS = 32_768

_NP_CODES = {"I": ">u4", "H": ">u2", "Q": ">u8", "B": "u1"}
_HEADER_FIELDS = (
    "size", "magic", "crc", "type", "prot", "flags", "position", "store_ms", "born_ms",
    "origin_len", "topic_len", "tag_len", "pad", "props_len", "body_len",
)  # fmt: skip
#: broker_core.record.HEADER as a numpy structured dtype (the same format string).
HEADER_DTYPE = np.dtype(
    [
        (name, _NP_CODES[code])
        for name, code in zip(_HEADER_FIELDS, HEADER.format.lstrip(">"), strict=True)
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE
_MIN_SIZE = HEADER_SIZE + 4
_SIZE_MAGIC = struct.Struct(">II").unpack_from
_CRC_POSITION = struct.Struct(">I4xQ").unpack_from  # crc, then position at +8
_HEADER_OFFSETS = np.arange(HEADER_SIZE, dtype=np.int64)
_PROTOCOL_NAMES = pa.array([p.name for p in sorted(Protocol, key=int)], pa.string())
_PLAIN, _HELD, _DISPATCH = 0, 1, 2
#: Types whose kind comes from the body (timer fire, transaction control): row path.
_ROW_TYPES = (int(RecordType.TIMER_FIRE), int(RecordType.TXN_CONTROL))
_MESSAGE, _HALF = int(RecordType.MESSAGE), int(RecordType.TXN_HALF)
_MAX_TYPE = max(int(t) for t in RecordType)
_MAX_PROTOCOL = max(int(p) for p in Protocol)


def _walk_py(
    data,
    pos: int,
    end: int,
    limit: int,
    base: int,
    magic: int,
    min_size: int,
    max_size: int,
    max_n: int,
) -> tuple[list[int], int, bool]:
    """The walk in Python (spark/_walk.c says what it does); without the extension."""
    starts: list[int] = []
    view = memoryview(data)
    limit = min(limit, len(data))
    p = pos
    while len(starts) < max_n and p < end and p + 8 <= limit:
        size, found = _SIZE_MAGIC(data, p)
        if found != magic or size < min_size or size > max_size or p + size > limit:
            break
        crc, position = _CRC_POSITION(data, p + 8)
        if crc32c(view[p + 12 : p + size]) != crc or position != base + p:
            break
        starts.append(p)
        p += size
    return starts, p, len(starts) == max_n


def _walker():
    if os.environ.get("LMQ_NO_EXTENSIONS"):
        return _walk_py
    try:
        from spark._walk import walk as walk_c
    except ImportError:
        return _walk_py
    return walk_c


_WALK = _walker()


def walk(
    data, pos: int, end: int, limit: int, base: int
) -> tuple[list[int] | np.ndarray, int, bool]:
    """Offsets of the records from ``pos`` that start before ``end`` and end by
    ``limit``, each with its magic, a possible size, its CRC32C and its own position,
    up to :data:`BATCH_ROWS` of them; then where the walk stopped and whether it stopped
    because it had taken that many."""
    starts, stop, full = _WALK(
        data, pos, end, limit, base, MAGIC, _MIN_SIZE, MAX_RECORD_SIZE, BATCH_ROWS
    )
    if isinstance(starts, bytes):
        starts = np.frombuffer(starts, dtype=np.int64)
    return starts, stop, full


def _gather(buf: np.ndarray, src: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrow string parts of the byte runs ``buf[src[i] : src[i] + lens[i]]``: int32
    offsets (n + 1) and the concatenated values."""
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return offsets.astype(np.int32), np.zeros(0, dtype=np.uint8)
    idx = np.arange(total, dtype=np.int64)
    idx += np.repeat(src.astype(np.int64) - offsets[:-1], lens)
    return offsets.astype(np.int32), buf[idx]


def _strings(offsets: np.ndarray, values: np.ndarray, n: int) -> pa.Array:
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(values))


def _utf8_ok(offsets: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per string: is it valid UTF-8 (as ``bytes.decode`` says)?"""
    ok = np.ones(n, dtype=bool)
    if n == 0:
        return ok
    try:
        _strings(offsets, values, n).validate(full=True)
        return ok
    except pa.ArrowInvalid:
        pass
    raw = values.tobytes()
    for i in range(n):
        try:
            raw[offsets[i] : offsets[i + 1]].decode()
        except UnicodeDecodeError:
            ok[i] = False
    return ok


class _Walk:
    """The candidates of one walk, checked; ``valid`` is the length of the valid prefix."""

    def __init__(self, buf: np.ndarray, view: memoryview, starts, base: int) -> None:
        n = len(starts)
        s = np.asarray(starts, dtype=np.int64)
        h = buf[(s[:, None] + _HEADER_OFFSETS).ravel()].view(HEADER_DTYPE)
        size = h["size"].astype(np.int64)
        rtype = h["type"]
        origin_len = h["origin_len"].astype(np.int64)
        topic_len = h["topic_len"].astype(np.int64)
        tag_len = h["tag_len"].astype(np.int64)
        props_len = h["props_len"].astype(np.int64)
        body_len = h["body_len"].astype(np.int64)
        # magic, size, CRC and stored position: checked by the walk
        ok = (rtype >= 1) & (rtype <= _MAX_TYPE) & (h["prot"] <= _MAX_PROTOCOL)
        fixed = HEADER_SIZE + origin_len + topic_len + tag_len + props_len + body_len
        ok &= fixed + 4 <= size
        end = s + size
        dstart = s + np.minimum(fixed, size - 4)  # clamped: only read where ok says
        count = (
            buf[(dstart[:, None] + np.arange(4)).ravel()].view(">u4").astype(np.int64).reshape(n)
        )
        # every entry takes at least 10 bytes (decode_dispatch's bound, tighter)
        ok &= count * 10 <= end - dstart - 4
        names_src, names_len, names_rec, names_k = [], [], [], []
        cursor = dstart + 4
        active = np.flatnonzero(ok & (count > 0))
        k = 0
        while active.size:
            c = cursor[active]
            e = end[active]
            fits = c + 2 <= e
            nlen = np.zeros(active.size, dtype=np.int64)
            cf = c[fits]
            nlen[fits] = (buf[cf].astype(np.int64) << 8) | buf[cf + 1]
            fits &= c + 2 + nlen + 8 <= e
            ok[active[~fits]] = False
            active, c, nlen = active[fits], c[fits], nlen[fits]
            names_src.append(c + 2)
            names_len.append(nlen)
            names_rec.append(active)
            names_k.append(np.full(active.size, k, dtype=np.int64))
            cursor[active] = c + 10 + nlen
            k += 1
            active = active[count[active] > k]
        ok &= cursor == end
        self.n = n
        self.starts = s
        self.header = h
        self.size = size
        self.rtype = rtype
        self.count = np.where(ok, count, 0)
        self.ok = ok
        if names_rec:
            rec = np.concatenate(names_rec)
            order = np.lexsort((np.concatenate(names_k), rec))
            keep = ok[rec[order]]
            order = order[keep]
            self.name_src = np.concatenate(names_src)[order]
            self.name_len = np.concatenate(names_len)[order]
        else:
            self.name_src = self.name_len = np.zeros(0, dtype=np.int64)
        # strings: origin and topic gathered, UTF-8 checked; a tag or properties: the
        # row decoder decides (they are not emitted, but make a record invalid)
        self.origin = _gather(buf, s + HEADER_SIZE, np.where(ok, origin_len, 0))
        self.topic = _gather(buf, s + HEADER_SIZE + origin_len, np.where(ok, topic_len, 0))
        ok &= _utf8_ok(*self.origin, n)
        ok &= _utf8_ok(*self.topic, n)
        self.names = _gather(buf, self.name_src, self.name_len)
        names_ok = _utf8_ok(*self.names, len(self.name_len))
        if not names_ok.all():
            list_offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(self.count, out=list_offsets[1:])
            bad_entries = np.flatnonzero(~names_ok)
            ok[np.searchsorted(list_offsets, bad_entries, side="right") - 1] = False
        for i in np.flatnonzero(ok & ((tag_len > 0) | (props_len > 0))).tolist():
            a = int(starts[i])
            try:
                decode_record(view[a : a + int(size[i])], a + base)
            except (CorruptRecord, InsufficientData):
                ok[i] = False
        bad = np.flatnonzero(~ok)
        self.valid = int(bad[0]) if bad.size else n


def _columns(walk: _Walk, k: int, base: int, flt, report, list_type):
    """The RAW_SCHEMA columns (without ``report``) of the first ``k`` records of
    ``walk``, the messages and held records only; counts them in ``report``."""
    since, until = flt.since_ms, flt.until_ms
    n = walk.n
    topics = _strings(*walk.topic, n).slice(0, k)
    h = walk.header[:k]
    rtype = walk.rtype[:k]
    flags = h["flags"]
    held = ((rtype == _MESSAGE) & ((flags & FLAG_DELAYED) != 0)) | (rtype == _HALF)
    emitted = (rtype == _MESSAGE) | (rtype == _HALF)
    store = h["store_ms"].astype(np.int64)
    out = np.zeros(k, dtype=bool)
    if since is not None:
        out |= ~held & (store < since)
    if until is not None:
        out |= store >= until
    out &= emitted
    keep = emitted & ~out
    if not flt.include_sys:
        sys = pc.or_(pc.equal(topics, "$SYS"), pc.starts_with(topics, "$SYS/"))
        sys = keep & sys.to_numpy(zero_copy_only=False)
        report.sys_records += int(sys.sum())
        keep &= ~sys
    report.record_bytes += int(walk.size[:k].sum())
    report.control_records += int((~emitted & ~np.isin(rtype, _ROW_TYPES)).sum())
    report.filtered_records += int(out.sum())
    report.held_records += int((keep & held).sum())
    report.records += int((keep & ~held).sum())
    if not keep.any():
        return None
    count = walk.count
    list_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=list_offsets[1:])
    names = _strings(*walk.names, len(walk.name_len))
    values_end = int(list_offsets[k])
    lists = pa.ListArray.from_arrays(
        pa.array(list_offsets[: k + 1].astype(np.int32)),
        names.slice(0, values_end),
        type=list_type,
        mask=pa.array(held),
    )
    arrays = [
        pa.array(walk.starts[:k] + base),
        pa.array(store),
        pa.array(h["born_ms"].astype(np.int64)),
        _strings(*walk.origin, n).slice(0, k),
        _PROTOCOL_NAMES.take(pa.array(h["prot"].astype(np.int32))),
        topics,
        pa.array(h["body_len"].astype(np.int32)),
        pa.array((flags & FLAG_QOS_MASK).astype(np.int32)),
        pa.array((flags & FLAG_RETAIN) != 0),
        lists,
        pa.array(np.where(held, _HELD, _PLAIN).astype(np.int32)),
    ]
    return arrays, keep


def scan_columns(
    data,
    *,
    base: int,
    start: int,
    end: int,
    limit: int,
    expected_bytes: int | None,
    is_last: bool,
    report,
    flt,
    schema: pa.Schema,
    row_batch,
) -> Iterator[pa.RecordBatch]:
    """:func:`spark.reader.scan_range`, a batch at a time: yields Arrow batches of
    ``schema`` (RAW_SCHEMA, ``report`` column null) for the messages, held records and
    dispatches that start in ``[start, end)`` and pass the window, and accounts in
    ``report`` exactly as the row reader does.

    ``row_batch(records)`` turns decoded :class:`~broker_core.record.Record` objects
    (the few this module leaves to the row reader: timer fires, transaction controls,
    records after damage) into a batch of ``schema``, or None.
    """
    from spark.reader import keep_row, skip_damage

    size = len(data)
    limit = min(limit, size)
    if limit <= 0:
        buf = np.zeros(0, dtype=np.uint8)
    else:
        buf = np.frombuffer(data, dtype=np.uint8, count=limit)
    view = memoryview(data)
    if start == 0:
        pos = 0
    else:
        found = find_record(data, base, start, limit, limit, view)
        pos = limit if found is None else found
    rows: list = []
    while pos < limit:
        # 1. walk
        starts, p, full = walk(data, pos, end, limit, base)
        k = 0
        if len(starts):
            checked = _Walk(buf, view, starts, base)
            k = checked.valid
            if k:
                done = _columns(checked, k, base, flt, report, schema.field(9).type)
                if done is not None:
                    arrays, keep = done
                    arrays.append(pa.nulls(k, schema.field(len(schema) - 1).type))
                    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
                    yield batch.filter(pa.array(keep)) if not keep.all() else batch
                for i in np.flatnonzero(np.isin(checked.rtype[:k], _ROW_TYPES)).tolist():
                    a = int(starts[i])
                    record = decode_record(view[a : a + int(checked.size[i])], a + base)
                    if keep_row(record, report, flt):
                        rows.append(record)
            pos = int(starts[k]) if k < len(starts) else p
            del checked
            if k == len(starts) and full:
                continue
        if pos >= limit:
            break
        # 2. one step of the row reader at the first record the walk did not take
        try:
            record = decode_record(view[pos:limit], expected_position=base + pos)
        except (InsufficientData, CorruptRecord) as exc:
            nxt = skip_damage(data, view, base, pos, limit, is_last, report, exc)
            if nxt is not None:
                pos = nxt
                continue
            pos = limit
            break
        if pos >= end:
            break
        report.record_bytes += record.size
        pos += record.size
        if keep_row(record, report, flt):
            rows.append(record)
    del buf
    if rows:
        batch = row_batch(rows)
        if batch is not None:
            yield batch
    if end >= limit and not is_last and expected_bytes is not None:
        if size < expected_bytes:
            missing = expected_bytes - size
            report.problem(base + size, missing, f"segment ends {missing} bytes early")
        elif size > limit:
            report.problem(base + limit, size - limit, "bytes past the next segment's base")
