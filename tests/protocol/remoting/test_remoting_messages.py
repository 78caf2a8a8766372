"""Message encodings at the byte level: properties, stored records, batches, UNIQ_KEY."""

from __future__ import annotations

import struct
import zlib
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting import MessageError, SysFlag
from protocol.remoting import messages as m
from protocol.remoting.ids import UniqKey, UniqKeyFactory, month_start_ms

# --- properties -------------------------------------------------------------------------


def test_properties_exact_separators():
    props = {"TAGS": "eu", "KEYS": "k1 k2", "UNIQ_KEY": "AB"}
    assert m.encode_properties(props) == "TAGS\x01eu\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01AB\x02"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TAGS\x01eu\x02KEYS\x01k", {"TAGS": "eu", "KEYS": "k"}),  # last \x02 missing
        ("A\x01b\x02\x02", {"A": "b"}),
        ("\x01v\x02A\x01\x02B\x01c", {"B": "c"}),  # empty name, empty value skipped
        ("noseparator\x02A\x01x\x01y", {"A": "x\x01y"}),  # value may hold \x01
        ("", {}),
    ],
)
def test_properties_decode_like_java(text, expected):
    assert m.decode_properties(text) == expected


@pytest.mark.parametrize("bad", [{"": "v"}, {"a\x01": "v"}, {"a\x02": "v"}, {"a": "v\x02"}])
def test_properties_refuse_what_would_not_read_back(bad):
    with pytest.raises(MessageError):
        m.encode_properties(bad)


names = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=8,
)
values = st.text(
    st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)), min_size=1, max_size=8
)


@settings(deadline=None)
@given(st.dictionaries(names, values, max_size=6))
def test_properties_round_trip(props):
    assert m.decode_properties(m.encode_properties(props)) == props


# --- stored records ---------------------------------------------------------------------


def stored_record_by_hand(
    *, v6_store: bool = False, magic: int = -626843481, body: bytes = b"hello", sys_flag: int = 0
) -> bytes:
    props = b"TAGS\x01eu\x02"
    topic = b"orders"
    store = bytes(15) + b"\x01" if v6_store else bytes([10, 0, 0, 2])
    parts = [
        struct.pack(">i", magic),
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
        struct.pack(">i", 3),  # queue id
        struct.pack(">i", 0),  # flag
        struct.pack(">q", 41),  # queue offset
        struct.pack(">q", 123456),  # commit-log offset
        struct.pack(">i", sys_flag | (0x20 if v6_store else 0)),
        struct.pack(">q", 1700000000000),  # born
        bytes([192, 168, 1, 7]) + struct.pack(">i", 50000),
        struct.pack(">q", 1700000000005),  # stored
        store + struct.pack(">i", 10911),
        struct.pack(">i", 2),  # reconsume times
        struct.pack(">q", 0),
        struct.pack(">i", len(body)) + body,
        (struct.pack(">b", len(topic)) if magic == -626843481 else struct.pack(">h", len(topic)))
        + topic,
        struct.pack(">h", len(props)) + props,
    ]
    raw = b"".join(parts)
    return struct.pack(">i", 4 + len(raw)) + raw


MESSAGE = m.StoredMessage(
    topic="orders",
    body=b"hello",
    properties={"TAGS": "eu"},
    queue_id=3,
    queue_offset=41,
    commit_log_offset=123456,
    born_timestamp=1700000000000,
    born_host=("192.168.1.7", 50000),
    store_timestamp=1700000000005,
    store_host=("10.0.0.2", 10911),
    reconsume_times=2,
)


def test_stored_record_ipv4_v1_matches_the_layout():
    assert m.encode_stored(MESSAGE) == stored_record_by_hand()
    [decoded] = m.decode_stored(stored_record_by_hand(), check_crc=True)
    assert decoded == MESSAGE.__class__(
        **{**_fields(MESSAGE), "body_crc": zlib.crc32(b"hello") & 0x7FFFFFFF}
    )
    assert decoded.msg_id == "0A000002" + "00002A9F" + "000000000001E240"


def test_stored_record_ipv6_store_host_sets_the_flag():
    msg = MESSAGE.__class__(**{**_fields(MESSAGE), "store_host": ("::1", 10911)})
    assert m.encode_stored(msg) == stored_record_by_hand(v6_store=True)
    [decoded] = m.decode_stored(stored_record_by_hand(v6_store=True))
    assert decoded.store_host == ("::1", 10911)
    assert decoded.sys_flag & SysFlag.STOREHOST_V6
    assert len(decoded.msg_id) == 56


def test_ipv4_mapped_address_is_written_as_ipv4():
    msg = MESSAGE.__class__(**{**_fields(MESSAGE), "store_host": ("::ffff:10.0.0.2", 10911)})
    assert m.encode_stored(msg) == stored_record_by_hand()


def test_magic_v2_for_long_topics_and_on_request():
    assert m.encode_stored(MESSAGE, magic=m.MAGIC_V2) == stored_record_by_hand(magic=-626843477)
    assert m.decode_stored(stored_record_by_hand(magic=-626843477))[0].topic == "orders"
    long_topic = MESSAGE.__class__(**{**_fields(MESSAGE), "topic": "t" * 200})
    raw = m.encode_stored(long_topic)
    assert struct.unpack_from(">i", raw, 4)[0] == m.MAGIC_V2
    assert m.decode_stored(raw)[0].topic == "t" * 200
    with pytest.raises(MessageError, match="needs MAGIC v2"):
        m.encode_stored(long_topic, magic=m.MAGIC_V1)


def test_compressed_body_kept_flagged_and_inflated_by_the_reader():
    packed = zlib.compress(b"x" * 5000, 5)
    flags = SysFlag.COMPRESSED | SysFlag.COMPRESSION_ZLIB
    msg = MESSAGE.__class__(**{**_fields(MESSAGE), "body": packed, "sys_flag": int(flags)})
    raw = m.encode_stored(msg)
    assert raw == stored_record_by_hand(body=packed, sys_flag=int(flags))
    [kept] = m.decode_stored(raw, decompress=False, check_crc=True)
    assert kept.body == packed and kept.sys_flag & SysFlag.COMPRESSED
    [inflated] = m.decode_stored(raw)
    assert inflated.body == b"x" * 5000 and not inflated.sys_flag & SysFlag.COMPRESSED
    lz4 = MESSAGE.__class__(
        **{**_fields(MESSAGE), "sys_flag": int(SysFlag.COMPRESSED | SysFlag.COMPRESSION_LZ4)}
    )
    with pytest.raises(MessageError, match="LZ4"):
        m.decode_stored(m.encode_stored(lz4))
    # Type bits 0: an old client's zlib.
    assert m.decompress_body(zlib.compress(b"abc"), int(SysFlag.COMPRESSED)) == b"abc"


def test_several_records_and_errors_name_the_record():
    raw = stored_record_by_hand() * 3
    assert len(m.decode_stored(raw)) == 3
    with pytest.raises(MessageError, match="message 1 at byte"):
        m.decode_stored(raw[: len(raw) * 2 // 3 - 1])
    bad_crc = bytearray(stored_record_by_hand())
    bad_crc[8] ^= 1
    with pytest.raises(MessageError, match="body CRC"):
        m.decode_stored(bytes(bad_crc), check_crc=True)
    with pytest.raises(MessageError, match="unknown magic"):
        m.decode_stored(struct.pack(">ii", 8, 7))


def _fields(msg):
    return {name: getattr(msg, name) for name in msg.__dataclass_fields__}


hosts = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None).map(str),
).flatmap(lambda h: st.tuples(st.just(h), st.integers(0, 65535)))
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
stored = st.builds(
    m.StoredMessage,
    topic=st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
    body=st.binary(max_size=50),
    properties=st.dictionaries(names, values, max_size=3),
    queue_id=i32,
    flag=i32,
    queue_offset=i64,
    commit_log_offset=i64,
    sys_flag=st.integers(0, 0xFFFF).map(lambda f: f & ~int(SysFlag.COMPRESSED)),
    born_timestamp=i64,
    born_host=hosts,
    store_timestamp=i64,
    store_host=hosts,
    reconsume_times=i32,
    prepared_transaction_offset=i64,
)


@settings(deadline=None)
@given(st.lists(stored, max_size=3))
def test_stored_round_trip(msgs):
    raw = b"".join(m.encode_stored(x) for x in msgs)
    decoded = m.decode_stored(raw, check_crc=True)
    assert len(decoded) == len(msgs)
    for got, want in zip(decoded, msgs, strict=True):
        v6 = (SysFlag.BORNHOST_V6 if ":" in want.born_host[0] else 0) | (
            SysFlag.STOREHOST_V6 if ":" in want.store_host[0] else 0
        )
        flags = (want.sys_flag & ~int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)) | v6
        assert got == m.StoredMessage(
            **{**_fields(want), "sys_flag": flags, "body_crc": m.body_crc(want.body)}
        )


@settings(deadline=None)
@given(st.binary(max_size=200))
def test_stored_decoder_raises_only_message_error(data):
    try:
        m.decode_stored(data, check_crc=True)
    except MessageError:
        pass


@settings(deadline=None)
@given(stored, st.data())
def test_mutated_stored_records_raise_only_message_error(msg, data):
    raw = bytearray(m.encode_stored(msg))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        m.decode_stored(bytes(raw))
    except MessageError:
        pass


# --- batch ------------------------------------------------------------------------------


def batch_by_hand(flag: int, body: bytes, props: bytes) -> bytes:
    size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
    return (
        struct.pack(">iiiii", size, 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(props))
        + props
    )


def test_batch_matches_the_layout_and_round_trips():
    raw = batch_by_hand(0, b"one", b"UNIQ_KEY\x01A\x02") + batch_by_hand(
        4, b"", b"UNIQ_KEY\x01B\x02"
    )
    msgs = [
        m.BatchMessage(b"one", {"UNIQ_KEY": "A"}),
        m.BatchMessage(b"", {"UNIQ_KEY": "B"}, flag=4),
    ]
    assert m.encode_batch(msgs) == raw
    assert m.decode_batch(raw) == msgs


@pytest.mark.parametrize(
    ("raw", "index", "message"),
    [
        (batch_by_hand(0, b"a", b"") + b"\x00\x00", 1, "2 bytes cannot hold a message"),
        (batch_by_hand(0, b"a", b"")[:-1], 0, "runs past"),
        (
            batch_by_hand(0, b"a", b"") + struct.pack(">iiiii", 99, 0, 0, 0, 1) + b"b\x00\x00",
            1,
            "total size 99",
        ),
        (struct.pack(">iiiii", 24, 0, 0, 0, -5) + b"\x00" * 4, 0, "body of -5 bytes"),
        (batch_by_hand(0, b"a", b"\xff"), 0, "properties is not UTF-8"),
    ],
)
def test_batch_errors_name_the_message(raw, index, message):
    with pytest.raises(MessageError, match=message) as info:
        m.decode_batch(raw)
    assert info.value.index == index


@settings(deadline=None)
@given(st.binary(max_size=120))
def test_batch_decoder_raises_only_message_error(data):
    try:
        m.decode_batch(data)
    except MessageError:
        pass


# --- UNIQ_KEY ---------------------------------------------------------------------------


def test_uniq_key_layout_by_hand():
    now = int(datetime(2026, 11, 24, 8, 30, tzinfo=UTC).timestamp() * 1000)
    start = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)
    key = UniqKeyFactory("10.1.2.3", pid=4660, salt=0x01020304).next(now)
    expected = (
        (bytes([10, 1, 2, 3]) + struct.pack(">hiIH", 4660, 0x01020304, now - start, 0))
        .hex()
        .upper()
    )
    assert key == expected and len(key) == 32
    parsed = UniqKey.parse(key)
    assert (parsed.ip_text, parsed.pid, parsed.salt, parsed.counter) == (
        "10.1.2.3",
        4660,
        0x01020304,
        0,
    )
    assert parsed.time_ms(now + 60_000) == now


def test_uniq_key_counter_wraps_and_pid_is_16_bits():
    factory = UniqKeyFactory("::1", pid=70000)
    keys = [UniqKey.parse(factory.next(1_700_000_000_000)) for _ in range(3)]
    assert [k.counter for k in keys] == [0, 1, 2] and len(str(keys[0])) == 56
    assert keys[0].pid == 70000 & 0xFFFF
    factory._counter = 0xFFFF
    assert UniqKey.parse(factory.next(0)).counter == 0xFFFF
    assert UniqKey.parse(factory.next(0)).counter == 0


def test_uniq_key_time_late_in_a_31_day_month_and_across_months():
    # 30 Dec 2026: over 2^31 ms into the month, Java's int is negative; bits survive.
    late = int(datetime(2026, 12, 30, 23, 0, tzinfo=UTC).timestamp() * 1000)
    key = UniqKeyFactory("10.0.0.1", 1).next(late)
    assert UniqKey.parse(key).ms_in_month > 2**31
    assert UniqKey.parse(key).time_ms(late + 1000) == late
    # Read in January, the span lands in December.
    january = int(datetime(2027, 1, 2, tzinfo=UTC).timestamp() * 1000)
    assert UniqKey.parse(key).time_ms(january) == late


def test_uniq_key_in_a_time_zone():
    tz = timezone(timedelta(hours=8))
    now = int(datetime(2026, 11, 1, 3, 0, tzinfo=tz).timestamp() * 1000)
    assert month_start_ms(now, tz) == int(datetime(2026, 11, 1, tzinfo=tz).timestamp() * 1000)
    key = UniqKeyFactory("10.0.0.1", 1, tz=tz).next(now)
    assert UniqKey.parse(key).ms_in_month == 3 * 3600 * 1000
    assert UniqKey.parse(key).time_ms(now + 5, tz) == now


@pytest.mark.parametrize("bad", ["", "ABC", "Z" * 32, "0" * 33])
def test_uniq_key_parse_errors(bad):
    with pytest.raises(MessageError, match="UNIQ_KEY"):
        UniqKey.parse(bad)
