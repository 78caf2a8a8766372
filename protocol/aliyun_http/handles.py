"""Receipt handles that carry what they need, so any gateway node (sharing the key) and
a restarted one can act on them with no table of handles.

Two kinds:

- ``C`` (consumed): a popped message: the RocketMQ topic and consumer group, the queue
  id, the message's offset in that queue and the time it becomes visible again. These
  rebuild the store's in-flight key (``visible_at, group, lmq, offset``), which the store
  keeps in its state database across restarts.
- ``T`` (transaction): a half message: its topic and its log position (the store's
  transaction id), and the next check time for ``NextConsumeTime``.

Wire form: ``<payload>.<tag>``, both unpadded URL-safe base64 (only ``[A-Za-z0-9_-.]``:
safe in XML and in a URL). The payload is the fields joined by NUL (names never hold
one); the tag is the first 16 bytes of HMAC-SHA256 over the payload with the gateway's
handle key, so a forged or altered handle is refused (:class:`InvalidHandle`) before
anything is looked up.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
from dataclasses import dataclass

__all__ = ["Handle", "HandleCodec", "HandleKind", "InvalidHandle"]

_VERSION = "1"
_TAG_BYTES = 16
#: Longer is not a handle of ours (topic and group names are at most 127 + 255 chars).
MAX_HANDLE_CHARS = 1024


class InvalidHandle(ValueError):
    """A handle that is malformed or not signed with this key."""


class HandleKind(enum.Enum):
    CONSUMED = "C"
    TRANSACTION = "T"


@dataclass(frozen=True, slots=True)
class Handle:
    kind: HandleKind
    topic: str
    #: The consumer group (``C``); the group the half was polled by or "" (``T``).
    group: str
    #: The queue id (``C``); 0 (``T``).
    queue_id: int
    #: The offset in the queue (``C``); the half's log position (``T``).
    offset: int
    #: When the message becomes visible again (``C``) or is checked next (``T``), epoch ms.
    visible_at: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class HandleCodec:
    """Encodes and checks handles with ``key`` (at least 16 bytes)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a handle key has at least 16 bytes")
        self._key = key

    def _tag(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:_TAG_BYTES]

    def encode(self, handle: Handle) -> str:
        fields = (_VERSION, handle.kind.value, handle.topic, handle.group,
                  str(handle.queue_id), str(handle.offset), str(handle.visible_at))
        payload = "\x00".join(fields).encode()
        return f"{_b64(payload)}.{_b64(self._tag(payload))}"

    def decode(self, text: str) -> Handle:
        if len(text) > MAX_HANDLE_CHARS or text.count(".") != 1:
            raise InvalidHandle("not a receipt handle of this gateway")
        head, _, tag = text.partition(".")
        try:
            payload = _unb64(head)
            given = _unb64(tag)
        except (binascii.Error, ValueError):
            raise InvalidHandle("not a receipt handle of this gateway") from None
        # Only the canonical spelling: the last character of unpadded base64 has bits
        # the decoder ignores, so an altered handle could otherwise decode the same.
        if _b64(payload) != head or _b64(given) != tag:
            raise InvalidHandle("not a receipt handle of this gateway")
        if not hmac.compare_digest(given, self._tag(payload)):
            raise InvalidHandle("the receipt handle's signature does not verify")
        try:
            version, kind, topic, group, queue_id, offset, visible = (
                payload.decode().split("\x00"))
            if version != _VERSION:
                raise ValueError(version)
            return Handle(HandleKind(kind), topic, group, int(queue_id), int(offset),
                          int(visible))
        except ValueError:
            raise InvalidHandle("unreadable receipt handle") from None
