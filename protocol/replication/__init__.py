"""The replication protocol of a broker group (docs/replication.md), sans-IO.

A slave connects to its master's replication port and tails the master's commit log
from the slave's own end: the same bytes at the same positions. :mod:`.frames` is the
framing (magic, version, kind, epoch, length, CRC32C) and the messages;
:mod:`.epochs` the epoch history arithmetic (where a returning member's log diverges
from the master's). Nothing here does I/O: the gateway's adapter
(``gateway/replication``) owns the sockets and the store.
"""

from .epochs import EpochEntry, EpochError, check_history, divergence, end_of_epoch
from .frames import (
    MAX_FRAME,
    Ack,
    Data,
    File,
    FrameDecoder,
    FrameError,
    Hello,
    Kind,
    Message,
    Refuse,
    State,
    Trim,
    Welcome,
    encode,
)

__all__ = [
    "MAX_FRAME",
    "Ack",
    "Data",
    "EpochEntry",
    "EpochError",
    "File",
    "FrameDecoder",
    "FrameError",
    "Hello",
    "Kind",
    "Message",
    "Refuse",
    "State",
    "Trim",
    "Welcome",
    "check_history",
    "divergence",
    "encode",
    "end_of_epoch",
]
