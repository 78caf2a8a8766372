"""Exceptions of the remoting package.

"Need more bytes" is not an error: :class:`~protocol.remoting.frames.FrameDecoder`
simply returns ``None`` until a whole frame is buffered. Everything here is about bytes or
fields that are wrong, and every class is also a ``ValueError``.

* :class:`FrameError` -- a frame or its header cannot be decoded. ``fatal`` says whether
  the framing itself is lost (a length that lies, a frame over the limit): then the only
  safe thing is to close the connection. A non-fatal error concerns one frame whose bytes
  have been consumed; the caller may answer it (``opaque`` is set when it could be read)
  and go on with the next frame.
* :class:`HeaderError` -- a decoded command's ``extFields`` lack a required field or hold
  a value of the wrong type. The caller answers with an error response.
* :class:`BodyError` -- a JSON body (heartbeat, lock batch, route, batch ack...) is not
  what its request code needs.
* :class:`MessageError` -- a message body (stored-message layout, batch body, properties,
  UNIQ_KEY, route JSON) is malformed.
* :class:`CommandError` -- we tried to build or encode a command that cannot be put on
  the wire (a code over the binary header's i16, a header over 16 MiB).
"""

from __future__ import annotations


class RemotingError(ValueError):
    """Base of every error of this package."""


class FrameError(RemotingError):
    """A frame cannot be decoded; see the module docstring for ``fatal`` and ``opaque``."""

    def __init__(
        self,
        message: str,
        *,
        fatal: bool = False,
        opaque: int | None = None,
        code: int | None = None,
        flag: int | None = None,
    ) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.opaque = opaque
        self.code = code
        self.flag = flag

    def __repr__(self) -> str:
        return f"FrameError({str(self)!r}, fatal={self.fatal}, opaque={self.opaque})"


class HeaderError(RemotingError):
    """A required ``extFields`` entry is missing or has the wrong type."""


class BodyError(RemotingError):
    """A JSON body is malformed or lacks a field its code needs."""


class MessageError(RemotingError):
    """A message encoding (stored record, batch, properties, ids) is bad. ``index`` is
    the position of the offending message in a batch, when there is one."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class CommandError(RemotingError):
    """A command we were asked to encode cannot be represented on the wire."""
