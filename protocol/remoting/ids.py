"""UNIQ_KEY, the client-built message id (``MessageClientIDSetter``).

Upper-case hex of, big-endian::

    ip (4 or 16 bytes) | i16 pid | i32 salt | u32 ms since the month began | u16 counter

32 hex digits for an IPv4 producer, 56 for IPv6. Java's salt is its class loader's hash
code; the time is milliseconds since the first of the current month at midnight, in the
producer's time zone (32 bits: in the last days of a 31-day month it passes 2^31 and
Java's ``int`` goes negative, but its bits, read back unsigned, are still right). The
counter wraps at 16 bits.

A UNIQ_KEY gives the send time back only to within the month it was made in: given
"now", the time is taken in the current month, or in the previous one if that would be
in the future (``getNearlyTimeFromID``). Everything here takes the time and the time
zone as arguments; nothing reads a clock.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from .errors import MessageError

_TAIL = struct.Struct(">hiIH")  # pid, salt, ms in month, counter


def month_start_ms(now_ms: int, tz: tzinfo = UTC) -> int:
    """Milliseconds of the first of ``now_ms``'s month at midnight in ``tz``."""
    now = datetime.fromtimestamp(now_ms / 1000, tz)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp()) * 1000


def _previous_month_start(start_ms: int, tz: tzinfo) -> int:
    return month_start_ms(start_ms - 1, tz)


@dataclass(frozen=True, slots=True)
class UniqKey:
    ip: bytes
    pid: int
    salt: int
    ms_in_month: int
    counter: int

    def __str__(self) -> str:
        return (
            (
                self.ip
                + _TAIL.pack(
                    _i16(self.pid),
                    _i32(self.salt),
                    self.ms_in_month & 0xFFFFFFFF,
                    self.counter & 0xFFFF,
                )
            )
            .hex()
            .upper()
        )

    @classmethod
    def parse(cls, text: str) -> UniqKey:
        if len(text) not in (32, 56):
            raise MessageError(f"UNIQ_KEY {text!r}: not 32 or 56 hex digits")
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raise MessageError(f"UNIQ_KEY {text!r}: not hex") from None
        pid, salt, ms, counter = _TAIL.unpack(raw[-_TAIL.size :])
        return cls(raw[: -_TAIL.size], pid & 0xFFFF, salt, ms, counter)

    @property
    def ip_text(self) -> str:
        return str(ipaddress.ip_address(self.ip))

    def time_ms(self, now_ms: int, tz: tzinfo = UTC) -> int:
        """The send time, placed in the month of ``now_ms`` or the one before."""
        start = month_start_ms(now_ms, tz)
        if start + self.ms_in_month >= now_ms:
            start = _previous_month_start(start, tz)
        return start + self.ms_in_month


def _i16(value: int) -> int:
    value &= 0xFFFF
    return value - 0x10000 if value >= 0x8000 else value


def _i32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= (1 << 31) else value


class UniqKeyFactory:
    """Makes UNIQ_KEYs for one process: fixed ip, pid and salt, a wrapping counter."""

    __slots__ = ("_counter", "_ip", "_pid", "_salt", "_tz")

    def __init__(self, ip: str | bytes, pid: int, salt: int = 0, tz: tzinfo = UTC) -> None:
        address = ipaddress.ip_address(ip)
        self._ip = address.packed
        self._pid, self._salt, self._tz = pid, salt, tz
        self._counter = 0

    def next(self, now_ms: int) -> str:
        counter, self._counter = self._counter, (self._counter + 1) & 0xFFFF
        ms = now_ms - month_start_ms(now_ms, self._tz)
        return str(UniqKey(self._ip, self._pid, self._salt, ms, counter))
