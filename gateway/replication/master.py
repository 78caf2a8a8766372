"""The master's side of the replication port: one session per slave (docs/replication.md).

A session reads the slave's HELLO, answers WELCOME with where the slave cuts its log
(``protocol.replication.divergence``), then streams DATA chunks from there (whole
records, never across an epoch's start) and reads the slave's ACKs. Every frame the
slave sends must carry this master's epoch; a frame that fails its checks, an ACK of a
position beyond this master's log or behind the slave's last one, a HELLO of another
group or from a newer epoch is refused: a REFUSE frame, one WARNING log line naming the
peer and the reason, the connection closed; nothing in the store changes.

Consumer state (offsets, pop and FIFO state, front-end metadata) goes beside the log
in STATE frames: a snapshot when the slave joins, then every change the store's tap
queued, in write order, ahead of the next chunk of records. The users file goes whole
in a FILE frame when the slave joins and whenever it changes (a ``stat`` per look).
The master's log start goes in a TRIM frame when the slave joins and whenever retention
moves it: the slave removes its segments below it (``Replica.trim_to``).

New records wake the sessions: the store's log calls a hook after every write
(``Replica.on_log_write``), and in sync mode a wait on the ack gate does too; a caught-up
session looks at the log end at least every ``POLL_S`` anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from broker_core import MessageStore
from broker_core.replication import PUT, Replica, StateOp
from protocol.replication import (
    Ack,
    Data,
    EpochEntry,
    EpochError,
    File,
    FrameDecoder,
    FrameError,
    Hello,
    Message,
    Refuse,
    State,
    Trim,
    Welcome,
    divergence,
    encode,
)

if TYPE_CHECKING:
    from gateway.replication.service import ReplicationService

log = logging.getLogger(__name__)

#: The largest DATA chunk (whole records; one larger record goes alone).
CHUNK_BYTES = 1024 * 1024
#: While caught up, a session waits for the log's write hook (``Replica.on_log_write``)
#: or the sync gate to wake it; this is only the longest wait between two looks.
POLL_S = 0.5
#: Heartbeat (an empty DATA) when nothing was sent for this long.
HEARTBEAT_S = 1.0
HELLO_TIMEOUT_S = 10.0
#: Consumer-state changes per STATE frame (a batch is never split).
STATE_CHUNK = 4096


class Refused(Exception):
    """A peer's frame or claim that ends its session (the reason is logged and sent)."""


class SlaveSession:
    def __init__(
        self,
        service: ReplicationService,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.service = service
        self.store: MessageStore = service.store
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.member = ""
        self.epoch = service.epoch
        self.position = 0
        self.acked = 0
        #: master_end sent with each chunk, by the chunk's end (for "caught up").
        self._sent_ends: dict[int, int] = {}
        #: Consumer-state changes to ship (see ReplicationService.state_queues).
        self.state_queue: deque[list[StateOp]] = deque()

    async def run(self) -> None:
        decoder = FrameDecoder()
        sender: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                epoch, hello = await read_frame(self.reader, decoder)
            if not isinstance(hello, Hello):
                raise Refused(f"expected HELLO, got {type(hello).__name__}")
            await self._welcome(epoch, hello)
            sender = asyncio.get_running_loop().create_task(self._send())
            while True:
                epoch, message = await read_frame(self.reader, decoder)
                if epoch != self.epoch:
                    raise Refused(f"a frame of epoch {epoch} in a session of epoch {self.epoch}")
                if not isinstance(message, Ack):
                    raise Refused(f"expected ACK, got {type(message).__name__}")
                self._on_ack(message.position)
        except Refused as exc:
            self._refuse(str(exc))
        except FrameError as exc:
            self._refuse(f"bad frame: {exc}")
        except TimeoutError:
            self._refuse("no HELLO in time")
        except (ConnectionError, asyncio.IncompleteReadError):
            log.info("replication: slave %s (%s) disconnected", self.member or "?", self.peer)
        finally:
            self.service.state_queues.pop(id(self), None)
            if sender is not None:
                sender.cancel()
            if self.member:
                self.service.slave_gone(self.member)
            self.writer.close()

    def _refuse(self, reason: str) -> None:
        log.warning(
            "replication: refused %s from %s: %s", self.member or "a peer", self.peer, reason
        )
        try:
            self.writer.write(encode(self.epoch, Refuse(reason)))
        except Exception:  # the peer may be gone already
            pass

    async def _welcome(self, epoch: int, hello: Hello) -> None:
        service = self.service
        if not service.is_master:
            raise Refused(
                f"not the master of group {service.group}"
                f" (the master is {service.master_clients or 'unknown'})"
            )
        if hello.group != service.group:
            raise Refused(f"group {hello.group!r}, this master's is {service.group!r}")
        if epoch > self.epoch:
            raise Refused(
                f"the slave knows epoch {epoch}, newer than this master's"
                f" {self.epoch}: this master is stale"
            )
        replica = self.store.replica
        assert replica is not None
        master = [EpochEntry(*e) for e in replica.epochs]
        end = self.store.log_end
        try:
            cut = divergence(master, end, hello.history, hello.log_end)
        except EpochError as exc:
            raise Refused(str(exc)) from None
        if cut < self.store.log_start and hello.log_end == 0 and not hello.history:
            cut = self.store.log_start  # an empty slave starts at this log's start
        if cut < self.store.log_start:
            raise Refused(
                f"the slave's log would continue at {cut}, before this master's log start"
                f" {self.store.log_start} (retention removed it): start the slave on an"
                " empty data directory"
            )
        self.member = hello.member
        self.position = self.acked = cut
        self.writer.write(
            encode(self.epoch, Welcome(cut, self.store.log_start, end, service.client_addresses()))
        )
        await self.writer.drain()
        # the consumer state: changes from now on are queued, then the snapshot goes
        # first (a change queued meanwhile is applied after it again: the same result)
        service.state_queues[id(self)] = self.state_queue
        snapshot = await asyncio.to_thread(replica.state_snapshot)
        first = True
        for i in range(0, max(len(snapshot), 1), STATE_CHUNK):
            ops = [(PUT, k, v) for k, v in snapshot[i : i + STATE_CHUNK]]
            self.writer.write(encode(self.epoch, State(first, ops)))
            first = False
            await self.writer.drain()
        log.info(
            "replication: slave %s (%s) joined at %d (its log ended at %d)",
            self.member,
            self.peer,
            cut,
            hello.log_end,
        )
        service.slave_joined(self.member, hello.clients)

    def _on_ack(self, position: int) -> None:
        if position > self.store.log_end or position > self.position:
            raise Refused(
                f"ACK of position {position}, beyond what this master sent"
                f" ({self.position}; its log ends at {self.store.log_end})"
            )
        if position < self.acked:
            raise Refused(f"ACK of position {position}, behind its last ACK {self.acked}")
        self.acked = position
        sent_end = max((e for p, e in self._sent_ends.items() if p <= position), default=0)
        for p in [p for p in self._sent_ends if p <= position]:
            del self._sent_ends[p]
        self.service.insync.ack(self.member, position, sent_end)

    async def _send(self) -> None:
        replica = self.store.replica
        assert replica is not None
        wake = asyncio.Event()  # this session's own: set by every write, cleared here
        self.service.wakes.add(wake)
        try:
            await self._stream(replica, wake)
        finally:
            self.service.wakes.discard(wake)

    async def _stream(self, replica: Replica, wake: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        files: dict[str, tuple[int, int, int] | None] = {}
        trimmed = -1  # the log start the slave was last told (the first look tells it)
        while True:
            wake.clear()  # before looking: a write after the look sets it again
            await self._ship_files(files)
            if self.store.log_start > trimmed:  # retention moved this log's start
                trimmed = self.store.log_start
                self.writer.write(encode(self.epoch, Trim(trimmed)))
                await self.writer.drain()
            while self.state_queue:  # consumer state first: it is small and ordered
                ops: list[StateOp] = []
                while self.state_queue and len(ops) < STATE_CHUNK:
                    ops += self.state_queue.popleft()
                self.writer.write(encode(self.epoch, State(False, ops)))
                await self.writer.drain()
                idle_since = loop.time()
            end = self.store.log_end
            if self.position < end:
                epoch, data = await asyncio.to_thread(replica.chunk, self.position, CHUNK_BYTES)
                if data:
                    master_end = self.store.log_end
                    self.writer.write(
                        encode(self.epoch, Data(self.position, epoch, master_end, data))
                    )
                    self.position += len(data)
                    self._sent_ends[self.position] = master_end
                    await self.writer.drain()
                    idle_since = loop.time()
                    continue
            if loop.time() - idle_since >= HEARTBEAT_S:
                master_end = self.store.log_end
                if self.position >= master_end:  # its ACK says the slave is caught up
                    self._sent_ends[self.position] = master_end
                self.writer.write(
                    encode(self.epoch, Data(self.position, replica.epoch, master_end, b""))
                )
                await self.writer.drain()
                idle_since = loop.time()
            try:
                async with asyncio.timeout(POLL_S):
                    await wake.wait()
            except TimeoutError:
                pass

    async def _ship_files(self, sent: dict[str, tuple[int, int, int] | None]) -> None:
        """Send each replicated file (the users file) when it changed since last sent:
        one ``stat`` per look when nothing did."""
        for name, path in self.service.files.items():
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if sent.get(name) == stamp:
                continue
            content = await asyncio.to_thread(path.read_bytes)
            self.writer.write(encode(self.epoch, File(name, content)))
            await self.writer.drain()
            sent[name] = stamp


async def read_frame(reader: asyncio.StreamReader, decoder: FrameDecoder) -> tuple[int, Message]:
    """The next frame of the stream (FrameError for a bad one; IncompleteReadError at
    its end)."""
    while True:
        got = decoder.next()
        if got is not None:
            return got
        data = await reader.read(256 * 1024)
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
        decoder.feed(data)
