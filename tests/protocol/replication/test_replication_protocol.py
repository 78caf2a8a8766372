"""The replication protocol, sans-IO: frames round-trip; bad frames (foreign bytes,
another version, a forged CRC, a torn or oversized frame, a malformed payload) raise
FrameError and the decoder stays failed; the epoch arithmetic of a returning member."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.replication import (
    Ack,
    Data,
    EpochEntry,
    EpochError,
    File,
    FrameDecoder,
    FrameError,
    Hello,
    Refuse,
    State,
    Trim,
    Welcome,
    divergence,
    encode,
)
from protocol.replication.epochs import end_of_epoch

MESSAGES = [
    Hello("g", "b-1", 1234, [EpochEntry(1, 0), EpochEntry(3, 900)]),
    Welcome(1000, 0, 5000, "mqtt=127.0.0.1:1883"),
    Data(1000, 3, 5000, b"\x00" * 100),
    Data(5000, 3, 5000, b""),
    Ack(5000),
    Refuse("a reason ü"),
    State(True, [(0, b"Okey", b"\x00" * 8), (1, b"Pgone", b""), (2, b"O", b"P")]),
    State(False, []),
    File("users", b'{"users": {}}'),
    Trim(4096),
]


def test_round_trip_one_byte_at_a_time() -> None:
    stream = b"".join(encode(7, m) for m in MESSAGES)
    dec = FrameDecoder()
    out = []
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
        while (got := dec.next()) is not None:
            out.append(got)
    assert out == [(7, m) for m in MESSAGES]


@given(st.binary(max_size=200), st.integers(0, 2**64 - 1))
def test_any_data_round_trips(body: bytes, epoch: int) -> None:
    dec = FrameDecoder()
    dec.feed(encode(epoch, Data(1, 2, 3, body)))
    assert dec.next() == (epoch, Data(1, 2, 3, body))


def _fails(data: bytes, match: str) -> None:
    dec = FrameDecoder(max_frame=1 << 20)
    dec.feed(data)
    with pytest.raises(FrameError, match=match):
        dec.next()
    with pytest.raises(FrameError, match=match):  # and stays failed
        dec.next()


def test_bad_frames_are_refused() -> None:
    good = encode(5, Ack(10))
    _fails(b"GET / HTTP/1.1\r\n\r\n" + b"x" * 10, "bad magic")
    _fails(b"GET ", "bad magic")  # before a whole header
    _fails(good[:4] + b"\x02" + good[5:], "version 2")
    _fails(good[:5] + b"\x09" + good[6:], "unknown frame kind 9")
    forged = bytearray(good)
    forged[15] ^= 1  # the epoch changed, the CRC not
    _fails(bytes(forged), "fails its CRC")
    flipped = bytearray(encode(5, Data(0, 1, 0, b"records")))
    flipped[-1] ^= 0x40
    _fails(bytes(flipped), "fails its CRC")
    huge = bytearray(good)
    huge[16:20] = (2 << 20).to_bytes(4, "big")
    _fails(bytes(huge), "exceeds the limit")
    # a well-framed ACK with a payload of the wrong size
    from crc32c import crc32c

    from protocol.replication.frames import _U32, HEADER

    head = HEADER.pack(b"LMQR", 1, 4, 0, 5, 3, 0)[:20]
    payload = b"abc"
    _fails(head + _U32.pack(crc32c(payload, crc32c(head))) + payload, "too short")


def test_torn_frame_waits_for_more() -> None:
    frame = encode(1, Data(0, 1, 10, b"0123456789"))
    dec = FrameDecoder()
    dec.feed(frame[:-1])
    assert dec.next() is None
    dec.feed(frame[-1:])
    assert dec.next() == (1, Data(0, 1, 10, b"0123456789"))


def test_end_of_epoch() -> None:
    h = [EpochEntry(1, 0), EpochEntry(3, 100), EpochEntry(6, 250)]
    assert end_of_epoch(h, 300, 0) == (0, 0)
    assert end_of_epoch(h, 300, 1) == (1, 100)
    assert end_of_epoch(h, 300, 2) == (1, 100)
    assert end_of_epoch(h, 300, 5) == (3, 250)
    assert end_of_epoch(h, 300, 9) == (6, 300)
    assert end_of_epoch([], 40, 3) == (0, 40)


def test_divergence() -> None:
    master = [EpochEntry(1, 0), EpochEntry(3, 100), EpochEntry(6, 250)]
    # a slave behind in the same epoch keeps everything
    assert divergence(master, 300, [EpochEntry(1, 0), EpochEntry(3, 100)], 180) == 180
    # the old master of epoch 3 wrote past 250 where epoch 6 began elsewhere: cut at 250
    assert divergence(master, 300, [EpochEntry(1, 0), EpochEntry(3, 100)], 400) == 250
    # it had an epoch (5) the master never saw, starting at 240: cut at 240
    assert (
        divergence(master, 300, [EpochEntry(1, 0), EpochEntry(3, 100), EpochEntry(5, 240)], 400)
        == 240
    )
    # no history but records (its epoch file lost): epoch 0's end, the first start
    assert divergence(master, 300, [], 80) == 0
    assert divergence([EpochEntry(1, 60)], 300, [], 80) == 60
    # a member longer than the master in the master's own epoch: cut at the master's end
    assert divergence(master, 300, master, 420) == 300
    with pytest.raises(EpochError, match="stale"):
        divergence(master, 300, [EpochEntry(7, 10)], 20)
