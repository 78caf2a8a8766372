"""Typed access to the RocksDB databases the store opens in raw mode.

``rocksdict`` types keys and values as any of ``str | int | float | bytes | bool``,
but a database opened with ``Options(raw_mode=True)`` (both of ours) holds and returns
bytes only. These accessors say so once, at no cost per item (``cast`` is applied to
the iterator, not to each element), so the modules that own the layouts need no
``type: ignore``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from rocksdict import Rdict, ReadOptions


def items(
    db: Rdict, from_key: bytes | None = None, read_opt: ReadOptions | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) pairs from ``from_key`` (the first key if None), in key order."""
    if from_key is None:
        return cast(Iterator[tuple[bytes, bytes]], iter(db.items(read_opt=read_opt)))
    return cast(
        Iterator[tuple[bytes, bytes]], iter(db.items(from_key=from_key, read_opt=read_opt))
    )


def keys(
    db: Rdict, from_key: bytes, read_opt: ReadOptions | None = None
) -> Iterator[bytes]:
    """Keys from ``from_key``, in key order."""
    return cast(Iterator[bytes], iter(db.keys(from_key=from_key, read_opt=read_opt)))

