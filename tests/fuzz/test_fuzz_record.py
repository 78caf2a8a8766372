"""Fuzzing the commit-log record decoder.

Contract (broker_core/record.py): ``decode_record(view, expected_position)`` on any bytes
returns a record or raises :class:`InsufficientData` / :class:`CorruptRecord`, nothing
else; it never returns a record whose CRC does not match its bytes; every strict prefix
of a valid record is :class:`InsufficientData`; every single-byte change of a valid
record is refused (the CRC covers everything after itself, size and magic are checked);
``iter_records`` always ends, yields only valid records, in order, and stops at the first
damage with the position of the damage.

Beyond random bytes and mutations of valid records, :func:`forged_records` builds records
whose header lengths lie but whose CRC is correct, so the field parsing behind the CRC
check is exercised too.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.errors import CorruptRecord, InsufficientData
from broker_core.record import (
    HEADER_SIZE,
    MAGIC,
    Message,
    Protocol,
    Record,
    RecordType,
    decode_record,
    encode_record,
    iter_records,
)

from ._support import corpus, examples, mutate

HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
FAST = settings(max_examples=examples(200), deadline=None, suppress_health_check=HEALTH)
MANY = settings(max_examples=examples(1000), deadline=None, suppress_health_check=HEALTH)

text = st.text(max_size=8)


@st.composite
def valid_records(draw: st.DrawFn, position: int | None = None) -> tuple[bytes, Message, Any]:
    message = Message(
        topic=draw(text), body=draw(st.binary(max_size=40)),
        properties=draw(st.none() | st.dictionaries(text, st.binary(max_size=8), max_size=3)),
        origin=draw(text), tag=draw(text), qos=draw(st.integers(0, 2)),
        retain=draw(st.booleans()), protocol=draw(st.sampled_from(Protocol)),
        born_ms=draw(st.integers(0, 2**40)),
    )
    dispatch = draw(st.lists(st.tuples(text.map(str.encode), st.integers(0, 2**64 - 1)),
                             max_size=3))
    pos = draw(st.integers(0, 2**40)) if position is None else position
    rtype = draw(st.sampled_from(RecordType))
    raw = encode_record(position=pos, store_ms=draw(st.integers(0, 2**40)), message=message,
                        dispatch=dispatch, record_type=rtype)
    return raw, message, (pos, dispatch, rtype)


def crc_ok(raw: bytes | memoryview, size: int) -> bool:
    return crc32c(bytes(raw[12:size])) == struct.unpack_from(">I", raw, 8)[0]


def check_decode(raw: bytes, expected_position: int | None = None) -> Record | None:
    try:
        record = decode_record(raw, expected_position)
    except (InsufficientData, CorruptRecord):
        return None
    assert isinstance(record, Record)
    assert HEADER_SIZE + 4 <= record.size <= len(raw)
    assert crc_ok(raw, record.size), "returned a record whose CRC does not match"
    assert expected_position is None or record.position == expected_position
    return record


@MANY
@given(st.binary(max_size=120), st.none() | st.integers(0, 10))
def test_random_bytes(raw: bytes, position: int | None) -> None:
    check_decode(raw, position)
    # the same bytes behind a plausible size and magic
    check_decode(struct.pack(">II", len(raw) + 8, MAGIC) + raw, position)


@FAST
@given(valid_records())
def test_valid_records_decode_and_every_prefix_needs_more(rec: Any) -> None:
    raw, message, (pos, dispatch, rtype) = rec
    record = check_decode(raw + b"\x00" * 3, pos)
    assert record is not None and record.size == len(raw)
    assert (record.topic, record.body, record.origin, record.tag, record.qos, record.retain,
            record.protocol, record.type) == (message.topic, message.body, message.origin,
                                              message.tag, message.qos, message.retain,
                                              message.protocol, rtype)
    assert record.properties == dict(message.properties or {})
    assert record.dispatch == tuple((n.decode(), o) for n, o in dispatch)
    for cut in range(len(raw)):
        with pytest.raises(InsufficientData):
            decode_record(raw[:cut], pos)


@FAST
@given(valid_records(), st.data())
def test_every_single_byte_change_is_refused(rec: Any, data: Any) -> None:
    raw, _, (pos, _, _) = rec
    at = data.draw(st.integers(0, len(raw) - 1))
    for value in {data.draw(st.integers(0, 255)), raw[at] ^ 0x01, raw[at] ^ 0x80}:
        if value == raw[at]:
            continue
        damaged = raw[:at] + bytes((value,)) + raw[at + 1 :]
        with pytest.raises((InsufficientData, CorruptRecord)):
            decode_record(damaged, pos)
        # growing the size field can only ask for more, with the rest of a log behind it
        # it must still be refused
        with pytest.raises((InsufficientData, CorruptRecord)):
            decode_record(damaged + raw, pos)


@FAST
@given(valid_records(), st.data())
def test_mutated_records(rec: Any, data: Any) -> None:
    raw, _, (pos, _, _) = rec
    check_decode(data.draw(mutate(raw, max_mutations=6)), data.draw(st.sampled_from([None, pos])))


@st.composite
def forged_records(draw: st.DrawFn) -> bytes:
    """Header fields that lie (lengths, type, protocol), with a correct CRC."""
    lengths = [draw(st.integers(0, 12) | st.integers(0, 0xFFFF)) for _ in range(3)]
    props_len = draw(st.integers(0, 40) | st.integers(0, 2**32 - 1))
    body_len = draw(st.integers(0, 40) | st.integers(0, 2**32 - 1))
    variable = draw(st.binary(max_size=60) | st.lists(st.sampled_from(
        [b"\x00\x00", b"\x00\x01", b"\xff\xff", b"\x00\x00\x00\x01", b"a", b"\xc3", b"\xff"]),
        max_size=20).map(b"".join))
    rest = struct.pack(">BBHQQQHHHHII", draw(st.integers(0, 3)), draw(st.integers(0, 3)),
                       draw(st.integers(0, 0xFFFF)), 0, 0, 0, *lengths, 0, props_len, body_len)
    payload = rest + variable
    return struct.pack(">III", 12 + len(payload), MAGIC, crc32c(payload)) + payload


@MANY
@given(forged_records())
def test_forged_records_with_a_good_crc(raw: bytes) -> None:
    check_decode(raw, 0)
    check_decode(raw, None)


@FAST
@given(st.lists(valid_records(position=0), min_size=1, max_size=4), st.data())
def test_iter_records_on_damaged_logs(recs: list[Any], data: Any) -> None:
    # Re-encode each record at its real position so that the log is valid.
    log = b""
    for _raw, message, (_, dispatch, rtype) in recs:
        log += encode_record(position=1000 + len(log), store_ms=1, message=message,
                             dispatch=dispatch, record_type=rtype)
    damaged = data.draw(st.just(log) | mutate(log) | st.binary(max_size=100).map(
        lambda b: log + b))
    walked = list(iter_records(damaged, 1000))
    assert len(walked) <= len(damaged) // (HEADER_SIZE + 4) + 1  # it ended
    expect = 1000
    for i, (record, position, error) in enumerate(walked):
        assert position == expect
        if record is None:
            assert isinstance(error, InsufficientData | CorruptRecord)
            assert i == len(walked) - 1
            break
        assert error is None and record.position == position
        assert crc_ok(damaged[position - 1000 :], record.size)
        expect += record.size
    else:
        assert expect - 1000 == len(damaged)
    if damaged == log:
        assert [r.size for r, _, _ in walked] == [len(encode_record(
            position=0, store_ms=1, message=m, dispatch=d, record_type=t))
            for _, m, (_, d, t) in recs]


# -- the corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "data"), corpus("record"))
def test_corpus(kind: str, data: bytes) -> None:
    if kind == "record":
        check_decode(data, None)
        check_decode(data, 0)
        list(iter_records(data, 0))
    else:  # pragma: no cover
        raise AssertionError(f"unknown corpus kind {kind!r}")
