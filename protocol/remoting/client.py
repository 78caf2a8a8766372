"""The client side of a remoting connection, sans-IO, plus the client's pure rules.

Theory of operation. A remoting connection carries requests both ways: the client's
requests, each answered by one response carrying the request's ``opaque``, and the
server's requests (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, ...), which the
client may answer or, when oneway, must not. :class:`ClientConnection` numbers the
client's requests (opaque 1, 2, ... wrapping inside the positive int32 range, as the
Java client's ``AtomicInteger`` does before it overflows), remembers which are waiting
for a response, and sorts what the server sends into :class:`Response` (matched to a
waiting request), :class:`ServerRequest`, and :class:`Unmatched` (a response nobody
waits for: a late answer to a request that timed out or was oneway). It holds no timers:
the adapter decides when a request has waited long enough and calls :meth:`forget`.

The rest are rules a RocketMQ client follows that need no I/O: the average queue
allocation of a consumer group's rebalance (``AllocateMessageQueueAveragely``), the
subscription data a heartbeat carries (tags split on ``||`` and their Java string hash
codes), and the tag test a client applies to pulled messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from .bodies import SubscriptionData
from .codes import LanguageCode
from .command import RemotingCommand
from .frames import FrameDecoder

_OPAQUE_LIMIT = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class Response:
    """The response to the request with the same opaque."""

    command: RemotingCommand


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request the server sent; answer it with :meth:`ClientConnection.respond`
    unless ``command.is_oneway``."""

    command: RemotingCommand


@dataclass(frozen=True, slots=True)
class Unmatched:
    """A response whose request is no longer waiting (timed out, forgotten, oneway)."""

    command: RemotingCommand


Event = Response | ServerRequest | Unmatched


class ClientConnection:
    """Opaque numbering and response matching for one connection.

    ``send_request`` returns the opaque and the frame to write; ``receive_data`` returns
    the events the bytes complete and raises :class:`~protocol.remoting.FrameError` when
    a frame cannot be decoded (a fatal one means the connection must be closed).
    """

    __slots__ = ("_decoder", "_next", "_waiting", "language", "version")

    def __init__(
        self,
        *,
        language: LanguageCode = LanguageCode.PYTHON,
        version: int = 479,
        max_frame_length: int | None = None,
    ) -> None:
        self.language = language
        self.version = version
        self._decoder = (
            FrameDecoder() if max_frame_length is None else FrameDecoder(max_frame_length)
        )
        self._next = 0
        self._waiting: set[int] = set()

    @property
    def waiting(self) -> int:
        """How many requests wait for their response."""
        return len(self._waiting)

    def next_opaque(self) -> int:
        self._next = self._next + 1 if self._next < _OPAQUE_LIMIT else 1
        return self._next

    def send_request(
        self,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
    ) -> tuple[int, bytes]:
        """Number a request and encode it (JSON header). A oneway request is not
        remembered: the server sends no response to it."""
        opaque = self.next_opaque()
        command = RemotingCommand.request(
            code,
            ext_fields,
            body,
            opaque=opaque,
            oneway=oneway,
            language=self.language,
            version=self.version,
        )
        frame = command.encode()
        if not oneway:
            self._waiting.add(opaque)
        return opaque, frame

    def respond(
        self,
        request: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> bytes:
        """The frame answering a server's request."""
        response = RemotingCommand.response_to(
            request, code, remark, ext_fields, body, version=self.version
        )
        return response.encode()

    def forget(self, opaque: int) -> None:
        """Stop waiting for ``opaque`` (its caller gave up); a late response is then
        reported as :class:`Unmatched`."""
        self._waiting.discard(opaque)

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Event]:
        self._decoder.feed(data)
        events: list[Event] = []
        while (command := self._decoder.next_command()) is not None:
            if not command.is_response:
                events.append(ServerRequest(command))
            elif command.opaque in self._waiting:
                self._waiting.discard(command.opaque)
                events.append(Response(command))
            else:
                events.append(Unmatched(command))
        return events


# -- rebalance ------------------------------------------------------------------------------

T = TypeVar("T")


def allocate_averagely(queues: Sequence[T], client_ids: Sequence[str], client_id: str) -> list[T]:
    """The queues ``client_id`` consumes, by RocketMQ's average strategy.

    Both lists are taken in sorted order (every member of the group sorts the same way,
    so they agree without talking to each other). With Q queues and C clients the first
    ``Q % C`` clients get ``Q // C + 1`` consecutive queues and the rest ``Q // C``; a
    client beyond the Q-th gets none when there are more clients than queues. A client
    that is not in the list gets nothing (the server does not know it yet).
    """
    mqs = sorted(queues)  # type: ignore[type-var]
    cids = sorted(client_ids)
    if client_id not in cids or not mqs:
        return []
    index = cids.index(client_id)
    n_q, n_c = len(mqs), len(cids)
    mod = n_q % n_c
    if n_q <= n_c:
        size = 1
    elif mod > 0 and index < mod:
        size = n_q // n_c + 1
    else:
        size = n_q // n_c
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n_q - start)
    return [mqs[(start + i) % n_q] for i in range(max(0, count))]


# -- subscriptions --------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap): a tag's code in a
    subscription's ``codeSet``."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def parse_tag_expression(expression: str | None) -> list[str]:
    """The tags of a TAG expression (``"a || b"``); an empty list means every tag
    (``*``, empty or ``None``)."""
    if expression is None or expression.strip() in ("", "*"):
        return []
    return [t.strip() for t in expression.split("||") if t.strip()]


def subscription_data(topic: str, expression: str | None, sub_version: int) -> SubscriptionData:
    """One entry of a heartbeat's ``subscriptionDataSet`` as the Java client fills it."""
    tags = parse_tag_expression(expression)
    return SubscriptionData(
        topic=topic,
        sub_string="*" if not tags else " || ".join(tags),
        tags_set=tuple(tags),
        code_set=tuple(java_string_hash(t) for t in tags),
        sub_version=sub_version,
    )


def tag_matches(tags: Sequence[str], message_tag: str | None) -> bool:
    """Whether a message with ``message_tag`` passes a subscription to ``tags``."""
    return not tags or (message_tag is not None and message_tag in tags)


# --- transactions ----------------------------------------------------------------------

#: END_TRANSACTION's ``commitOrRollback`` (``MessageSysFlag``'s transaction types).
COMMIT = 8
ROLLBACK = 12
UNKNOWN = 0


def end_transaction_fields(
    *,
    producer_group: str,
    topic: str,
    commit_log_offset: int,
    queue_offset: int,
    msg_id: str,
    transaction_id: str,
    commit: bool | None,
    from_check: bool,
    broker_name: str | None = None,
) -> dict[str, object]:
    """END_TRANSACTION's header as the Java producer fills it
    (``DefaultMQProducerImpl.endTransaction`` and, from a check, ``processTransactionState``):
    ``commitLogOffset`` the half's log position (from its offsetMsgId:
    :func:`~protocol.remoting.messages.parse_offset_msg_id`, or a check's header),
    ``tranStateTableOffset`` its queue offset, ``commitOrRollback`` 8 / 12 / 0 for
    ``commit`` True / False / None."""
    return {
        "producerGroup": producer_group,
        "topic": topic,
        "tranStateTableOffset": queue_offset,
        "commitLogOffset": commit_log_offset,
        "commitOrRollback": UNKNOWN if commit is None else COMMIT if commit else ROLLBACK,
        "fromTransactionCheck": from_check,
        "msgId": msg_id,
        "transactionId": transaction_id,
        "brokerName": broker_name,
    }


@dataclass(frozen=True, slots=True)
class TransactionCheck:
    """A CHECK_TRANSACTION_STATE header: which half message the server asks about."""

    topic: str
    commit_log_offset: int
    tran_state_table_offset: int
    msg_id: str
    transaction_id: str
    offset_msg_id: str
    broker_name: str

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> TransactionCheck:
        return cls(
            topic=fields.get("topic", ""),
            commit_log_offset=int(fields.get("commitLogOffset", "0") or 0),
            tran_state_table_offset=int(fields.get("tranStateTableOffset", "0") or 0),
            msg_id=fields.get("msgId", ""),
            transaction_id=fields.get("transactionId", ""),
            offset_msg_id=fields.get("offsetMsgId", ""),
            broker_name=fields.get("brokerName", ""),
        )
