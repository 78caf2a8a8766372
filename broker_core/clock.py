"""The store's clock and tag hash: a leaf module every other part may import.

``now_ms`` is wall-clock milliseconds (records carry it as ``store_ms``; pop's visible
times and the idle TTL compare against it). ``tag_hash`` is the stable 64-bit hash kept
in index entries for tag filtering; it must never change, since index entries written by
an earlier run are compared against it.
"""

from __future__ import annotations

import hashlib
import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def tag_hash(tag: str) -> int:
    """A stable 64-bit hash of a tag (0 = no tag), kept in index entries for filtering."""
    if not tag:
        return 0
    return int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "big") or 1
