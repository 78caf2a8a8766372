"""AMQP 0-9-1, server side, sans-IO, on pamqp's codec.

- :mod:`.framing`: protocol header and frame cutting, and
  :func:`relax_pamqp_name_validation` (a server calls it once; importing changes nothing);
- :mod:`.fastpath`: struct codecs for Publish/Deliver/GetOk/Return/Ack/Nack and raw
  content headers;
- :mod:`.connection`: :class:`AMQPConnection`, the connection state machine;
- :mod:`.channel`: per-channel state and content assembly;
- :mod:`.events`, :mod:`.errors`, :mod:`.sasl`.
"""

from .connection import AMQPConnection, ConnectionState
from .errors import (
    AMQPError,
    ChannelError,
    ConnectionLevelError,
    LocalProtocolError,
    ProtocolHeaderError,
    amqp_error,
)
from .events import NEED_DATA
from .fastpath import ContentHeader
from .framing import relax_pamqp_name_validation

__all__ = [
    "AMQPConnection", "ConnectionState", "AMQPError", "ChannelError", "ConnectionLevelError",
    "LocalProtocolError", "ProtocolHeaderError", "amqp_error", "NEED_DATA", "ContentHeader",
    "relax_pamqp_name_validation",
]
