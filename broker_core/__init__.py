"""The storage engine: one commit log, atomic multi-dispatch into LMQs, a RocksDB
consume-queue index, consumer offsets, pull and pop. See docs/storage.md."""

from broker_core.config import Durability, StoreConfig
from broker_core.errors import (
    CorruptRecord,
    InvalidLmqName,
    MessageTooLarge,
    StorageFull,
    StoreClosed,
    StoreError,
    UnknownLmq,
    UnknownReceipt,
)
from broker_core.fifo import BlockedGroup
from broker_core.origins import OriginTable
from broker_core.pop import PopConsumer, PoppedMessage
from broker_core.record import Message, Protocol, Record, RecordType
from broker_core.recovery import VerifyReport
from broker_core.store import AppendResult, LmqInfo, MessageStore, PullResult, StoredMessage
from broker_core.timers import DelayTooLong, Timers
from broker_core.transactions import EndResult, Outcome, PendingTransaction, TransactionTable

__all__ = [
    "AppendResult",
    "BlockedGroup",
    "CorruptRecord",
    "DelayTooLong",
    "Durability",
    "EndResult",
    "InvalidLmqName",
    "LmqInfo",
    "Message",
    "MessageStore",
    "MessageTooLarge",
    "OriginTable",
    "Outcome",
    "PendingTransaction",
    "PopConsumer",
    "PoppedMessage",
    "Protocol",
    "PullResult",
    "Record",
    "RecordType",
    "StorageFull",
    "StoreClosed",
    "StoreConfig",
    "StoreError",
    "StoredMessage",
    "Timers",
    "TransactionTable",
    "UnknownLmq",
    "UnknownReceipt",
    "VerifyReport",
]
