"""The client's one-pass reader of PULL/POP bodies (gateway/clients/received.py) against
the codec's definition (protocol.remoting.messages.decode_stored): the same messages for
any records (IPv4, IPv6 and IPv4-mapped hosts, V1 and V2 magic, compressed bodies,
properties), and for any damaged body either the same messages or the codec's error."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.clients.received import ReceivedMessage, decode_messages
from protocol.remoting.errors import MessageError
from protocol.remoting.messages import MAGIC_V2, StoredMessage, decode_stored, encode_stored

HOSTS = [("127.0.0.1", 8080), ("10.1.2.3", 1), ("::1", 10911), ("2001:db8::7", 65535),
         ("::ffff:10.0.0.9", 77)]

_messages = st.builds(
    StoredMessage,
    topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=140),
    body=st.binary(max_size=200),
    properties=st.dictionaries(
        st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=8),
        st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=20), max_size=4),
    queue_id=st.integers(0, 2**31 - 1), flag=st.integers(-(2**31), 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1), commit_log_offset=st.integers(-(2**63), 2**63 - 1),
    sys_flag=st.sampled_from([0, 0x4, 0x8, 0x80, 0x10, 0x30]),
    born_timestamp=st.integers(0, 2**45), born_host=st.sampled_from(HOSTS),
    store_timestamp=st.integers(0, 2**45), store_host=st.sampled_from(HOSTS),
    reconsume_times=st.integers(0, 100), prepared_transaction_offset=st.integers(0, 2**40),
)


def _encode(message: StoredMessage) -> bytes:
    topic_bytes = len(message.topic.encode())
    return encode_stored(message, magic=MAGIC_V2 if topic_bytes > 127 or
                         message.queue_id % 3 == 0 else None)


def _reference(body: bytes) -> list[ReceivedMessage]:
    return [ReceivedMessage.from_stored(m) for m in decode_stored(body)] if body else []


@given(st.lists(_messages, max_size=5))
def test_same_messages_as_the_codec(messages) -> None:
    body = b"".join(_encode(m) for m in messages)
    assert decode_messages(body) == _reference(body)


def test_compressed_bodies_are_inflated_as_the_codec_does() -> None:
    body = encode_stored(StoredMessage(topic="t", body=zlib.compress(b"x" * 5000),
                                       sys_flag=0x1 | 0x300, queue_offset=4))
    (got,) = decode_messages(body)
    assert got == _reference(body)[0] and got.body == b"x" * 5000 and got.sys_flag == 0x300


@given(st.lists(_messages, min_size=1, max_size=3), st.data())
def test_a_damaged_body_gives_the_codecs_answer(messages, data) -> None:
    body = bytearray(b"".join(_encode(m) for m in messages))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    damaged = bytes(body[:cut])
    try:
        expected = _reference(damaged)
    except MessageError as exc:
        with pytest.raises(MessageError) as got:
            decode_messages(damaged)
        assert str(got.value) == str(exc)
    else:
        assert decode_messages(damaged) == expected
