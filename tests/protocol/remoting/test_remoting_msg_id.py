"""offsetMsgId (``MessageDecoder.createMessageId``): the store's address, port and
commit-log offset, big-endian, upper-case hex."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.remoting.errors import MessageError
from protocol.remoting.messages import offset_msg_id, parse_offset_msg_id


def test_layout_ipv4() -> None:
    # 127.0.0.1, port 10911 (0x2A9F), offset 0x1234, written out from the layout
    assert offset_msg_id(("127.0.0.1", 10911), 0x1234) == "7F00000100002A9F0000000000001234"
    assert parse_offset_msg_id("7F00000100002A9F0000000000001234") == (("127.0.0.1", 10911), 0x1234)


def test_layout_ipv6_and_mapped_ipv4() -> None:
    v6 = offset_msg_id(("2001:db8::1", 8080), 7)
    assert v6 == "20010DB8000000000000000000000001" + "00001F90" + "0000000000000007"
    # an IPv4-mapped address is the IPv4 store (as a dual-stack socket reports it)
    assert offset_msg_id(("::ffff:10.0.0.1", 1), 2) == offset_msg_id(("10.0.0.1", 1), 2)


@given(st.ip_addresses(), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_round_trip(host: object, port: int, offset: int) -> None:
    address = str(host)
    msg_id = offset_msg_id((address, port), offset)
    assert len(msg_id) in (32, 56)
    (parsed, parsed_port), parsed_offset = parse_offset_msg_id(msg_id)
    assert (parsed_port, parsed_offset) == (port, offset)
    mapped = getattr(host, "ipv4_mapped", None)
    assert parsed == (str(mapped) if mapped is not None else address)


@pytest.mark.parametrize("bad", ["", "7F00", "Z" * 32, "0" * 33])
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(MessageError):
        parse_offset_msg_id(bad)
