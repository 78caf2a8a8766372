"""Typed errors of the storage engine. Front ends map them to their protocol's codes."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class InsufficientData(StoreError):
    """A buffer holds only part of a record: more bytes are needed, nothing is wrong yet."""

    def __init__(self, missing: int) -> None:
        super().__init__(f"{missing} more bytes needed")
        self.missing = missing


class CorruptRecord(StoreError):
    """Bytes that cannot be a record: bad magic, size, CRC or field lengths."""


class MessageTooLarge(StoreError):
    """A message over the configured maximum size; refused before anything is written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message of {size} bytes exceeds the maximum of {limit} bytes")
        self.size = size
        self.limit = limit


class InvalidLmqName(StoreError, ValueError):
    """An LMQ name the store cannot hold (empty, too long, NUL, not UTF-8)."""


class UnknownLmq(StoreError, KeyError):
    """No LMQ of that name or id exists."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown LMQ"


class UnknownReceipt(StoreError):
    """A pop receipt handle that does not name an in-flight message (already acked,
    revived, or never issued)."""


class StoreClosed(StoreError):
    """The store was closed; no further operations are accepted."""


class NotMaster(StoreError):
    """This member of a broker group is not its master (a slave, or a master that lost
    its lease): nothing is written; the client is told where the master is."""

    def __init__(self, reason: str, master: str = "") -> None:
        super().__init__(reason)
        #: The master's client address when known ("" if not).
        self.master = master


class InSyncTooSmall(StoreError):
    """A master in ``sync`` mode whose in-sync set (itself included) stayed smaller than
    ``replication_min_insync`` while the write waited (RocketMQ's
    IN_SYNC_REPLICAS_NOT_ENOUGH): the write is in the master's log but was not
    acknowledged."""


class StorageFull(StoreError):
    """The disk refused a write (ENOSPC/EDQUOT). Nothing was acknowledged."""


_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (an OSError, or RocksDB's plain ``Exception("IO error: ...")``)
    says the disk or a quota is full."""
    if isinstance(exc, OSError) and exc.errno in (28, 122, 27):  # ENOSPC, EDQUOT, EFBIG
        return True
    return any(text in str(exc) for text in _DISK_FULL_TEXTS)
