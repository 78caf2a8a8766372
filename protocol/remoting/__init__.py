"""RocketMQ's remoting protocol, sans-IO: frames, headers, message encodings.

No sockets, no event loop: the gateway front end and the Python client feed bytes to
:class:`FrameDecoder` and write what :meth:`RemotingCommand.encode` returns.
"""

from .codes import (
    LanguageCode,
    Perm,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    SerializeType,
    SysFlag,
)
from .command import MAX_FRAME_LENGTH, RemotingCommand, decode_command
from .errors import CommandError, FrameError, HeaderError, MessageError, RemotingError
from .frames import FrameDecoder

__all__ = [
    "MAX_FRAME_LENGTH",
    "CommandError",
    "FrameDecoder",
    "FrameError",
    "HeaderError",
    "LanguageCode",
    "MessageError",
    "Perm",
    "PullSysFlag",
    "RemotingCommand",
    "RemotingError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "SysFlag",
    "decode_command",
]
