"""Receipt handles of popped messages: what a consumer gets back to ack with.

Two forms, told apart by the first character:

- **durable**: the in-flight key of the state RocksDB
  (:meth:`broker_core.consumer_state.InflightKey.encode`), base64url without padding,
  so an ack is a point delete with no search;
- **memory**: ``~<table id>.<offset>``, a message tracked by a memory in-flight table
  (:class:`broker_core.inflight.MemoryInflight`). Table ids start at a random value in
  each run, so a receipt of an earlier run never names a table of this one.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from broker_core.consumer_state import InflightKey
from broker_core.errors import UnknownReceipt

#: The first character of a memory receipt (never the first of a base64url key: an
#: in-flight key starts with b"P", whose encoding starts with "U").
MEMORY_MARK = "~"


def encode_receipt(key: InflightKey) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_receipt(receipt: str) -> InflightKey:
    try:
        raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
        return InflightKey.decode(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise UnknownReceipt(f"malformed receipt handle {receipt!r}") from None


def is_memory(receipt: str) -> bool:
    return receipt[:1] == MEMORY_MARK


def memory_prefix(table_id: int) -> str:
    """What every memory receipt of one table starts with; the offset follows."""
    return f"{MEMORY_MARK}{table_id}."


def parse_memory(receipt: str) -> tuple[int, int] | None:
    """(table id, offset) of a memory receipt, or None if it is malformed."""
    tid, _, off = receipt[1:].partition(".")
    try:
        return int(tid), int(off)
    except ValueError:
        return None


def split_receipts(receipts: Iterable[str]) -> tuple[list[InflightKey], list[str]]:
    """(durable in-flight keys, memory receipts); undecodable receipts dropped."""
    keys: list[InflightKey] = []
    memory: list[str] = []
    for receipt in receipts:
        if receipt[:1] == MEMORY_MARK:
            memory.append(receipt)
            continue
        try:
            keys.append(decode_receipt(receipt))
        except UnknownReceipt:
            continue
    return keys, memory
