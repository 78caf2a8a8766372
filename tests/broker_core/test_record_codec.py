from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_core.errors import CorruptRecord, InsufficientData
from broker_core.record import (
    HEADER_SIZE,
    Message,
    Protocol,
    RecordType,
    decode_plain,
    decode_record,
    encode_record,
    iter_records,
)

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
messages = st.builds(
    Message,
    topic=text,
    body=st.binary(max_size=300),
    properties=st.dictionaries(text, st.binary(max_size=40), max_size=4),
    origin=text,
    tag=text,
    qos=st.integers(0, 2),
    retain=st.booleans(),
    protocol=st.sampled_from(Protocol),
    born_ms=st.integers(0, 2**63),
)
dispatch = st.lists(
    st.tuples(text.filter(bool).map(str.encode), st.integers(0, 2**64 - 1)), max_size=6
)


@given(messages, dispatch, st.integers(0, 2**63), st.integers(1, 2**63))
def test_round_trip(message, targets, position, store_ms):
    raw = encode_record(position=position, store_ms=store_ms, message=message, dispatch=targets)
    rec = decode_record(raw, expected_position=position)
    assert rec.size == len(raw)
    assert rec.type == RecordType.MESSAGE
    assert (rec.topic, rec.body, rec.origin, rec.tag) == (
        message.topic,
        message.body,
        message.origin,
        message.tag,
    )
    assert rec.properties == dict(message.properties)
    assert (rec.qos, rec.retain, rec.protocol) == (message.qos, message.retain, message.protocol)
    assert rec.born_ms == (message.born_ms or store_ms)
    assert rec.dispatch == tuple((n.decode(), o) for n, o in targets)


def _sample() -> bytes:
    msg = Message(topic="a/b", body=b"payload", origin="dev-1", properties={"k": b"v"})
    return encode_record(position=100, store_ms=5, message=msg, dispatch=[(b"a/b", 7)])


def test_every_strict_prefix_needs_more_data():
    raw = _sample()
    for cut in range(8, len(raw)):
        with pytest.raises(InsufficientData):
            decode_record(raw[:cut], expected_position=100)


def test_trailing_bytes_are_left_alone():
    raw = _sample()
    rec = decode_record(raw + b"\x00garbage", expected_position=100)
    assert rec.size == len(raw)


@pytest.mark.parametrize("index", range(12, 60))
def test_any_flipped_byte_after_the_crc_is_detected(index):
    raw = bytearray(_sample())
    raw[index] ^= 0x40
    with pytest.raises((CorruptRecord, InsufficientData)):
        decode_record(bytes(raw), expected_position=100)


def test_wrong_position_is_corrupt():
    with pytest.raises(CorruptRecord, match="position"):
        decode_record(_sample(), expected_position=101)


def test_bad_magic_and_size():
    raw = bytearray(_sample())
    raw[4] ^= 1
    with pytest.raises(CorruptRecord, match="magic"):
        decode_record(bytes(raw))
    raw = bytearray(_sample())
    raw[0:4] = (HEADER_SIZE - 1).to_bytes(4, "big")
    with pytest.raises(CorruptRecord, match="size"):
        decode_record(bytes(raw))


def test_iter_records_reports_where_it_stops():
    a = _sample()
    msg = Message(topic="x", body=b"y")
    b = encode_record(position=100 + len(a), store_ms=1, message=msg, dispatch=[])
    out = list(iter_records(a + b[:-3], 100))
    assert out[0][0] is not None and out[0][1] == 100
    rec, pos, err = out[1]
    assert rec is None and pos == 100 + len(a) and isinstance(err, InsufficientData)


def test_qos_is_validated():
    with pytest.raises(ValueError):
        Message(topic="a", body=b"", qos=3)


# -- decode_plain: a subscriber's read of a plain message ---------------------------------


@given(messages, dispatch, st.integers(0, 2**63), st.integers(1, 2**63), st.integers(0, 2**40))
def test_decode_plain_agrees_with_decode_record(message, targets, position, store_ms, offset):
    raw = encode_record(position=position, store_ms=store_ms, message=message, dispatch=targets)
    full = decode_record(raw, expected_position=position)
    plain = decode_plain(raw, position, offset)
    if message.properties or message.tag or message.protocol == Protocol.AMQP:
        assert plain is None  # decoded in full by the caller
        return
    assert plain is not None
    assert plain.offset == offset
    assert plain.protocol == full.protocol
    assert (plain.qos, plain.retain) == (full.qos, full.retain)
    assert plain.origin == full.origin.encode()
    assert plain.topic == full.topic.encode()
    assert plain.body == full.body


def test_decode_plain_leaves_control_records_to_decode_record():
    raw = encode_record(
        position=100,
        store_ms=1,
        message=Message("", b""),
        dispatch=[(b"gone", 7)],
        record_type=RecordType.LMQ_REMOVAL,
    )
    assert decode_plain(raw, 100, 0) is None


def test_decode_plain_checks_like_decode_record():
    good = encode_record(position=100, store_ms=1, message=Message("a/b", b"x" * 50), dispatch=[])
    assert decode_plain(good, 100, 0) is not None
    with pytest.raises(CorruptRecord, match="position"):
        decode_plain(good, 101, 0)
    for index in (4, 12, 20, HEADER_SIZE + 1, len(good) - 1):  # magic, crc, header, fields
        raw = bytearray(good)
        raw[index] ^= 0x01
        with pytest.raises(CorruptRecord):
            decode_plain(bytes(raw), 100, 0)
    # a short read, a record longer than the index says, a size field that lies
    for raw in (good[:-1], good + b"\0", good[:HEADER_SIZE], b"", good[:10]):
        with pytest.raises(CorruptRecord):
            decode_plain(raw, 100, 0)


@given(st.integers(0, 55), st.integers(0, 7), st.integers(0, 2))
def test_both_decoders_refuse_a_damaged_header_with_the_same_reason(index, bit, shift):
    """Validity is defined once (record._checked_header): a header byte flipped, or a
    record found at another position, is refused by the serving path (decode_plain) and
    by decode_record with the same reason."""
    good = encode_record(
        position=4096, store_ms=1, message=Message("a/b", b"x" * 50), dispatch=[(b"q", 3)]
    )
    raw = bytearray(good)
    raw[index] ^= 1 << bit
    expected_position = 4096 + shift  # shift 0: the right place
    reasons = []
    for decode in (lambda: decode_record(bytes(raw), expected_position),
                   lambda: decode_plain(bytes(raw), expected_position, 0)):
        try:
            decode()
        except (CorruptRecord, InsufficientData) as exc:
            reasons.append((type(exc), str(exc)))
        else:
            reasons.append(None)
    if index < 4:  # the size: decode_record reads it first (too short or impossible)
        assert reasons[1] is not None
        return
    assert reasons[0] is not None and reasons[0] == reasons[1]
