"""RocketMQ's remoting protocol, sans-IO: frames, headers, message encodings.

No sockets, no event loop: the gateway front end and the Python client feed bytes to
:class:`FrameDecoder` and write what :meth:`RemotingCommand.encode` returns. The typed
headers (``headers``, ``pop``), JSON bodies (``bodies``, ``route``), message encodings
(``messages``), UNIQ_KEY (``ids``) and the ACL signature (``signature``) are modules of
their own; docs/rocketmq.md "Wire format" describes all of it.
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
from .errors import (
    BodyError,
    CommandError,
    FrameError,
    HeaderError,
    MessageError,
    RemotingError,
)
from .frames import FrameDecoder

__all__ = [
    "MAX_FRAME_LENGTH",
    "BodyError",
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
