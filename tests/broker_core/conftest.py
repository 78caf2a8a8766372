from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core import MessageStore, StoreConfig

SMALL = StoreConfig(segment_bytes=256 * 1024, max_message_bytes=64 * 1024)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore.open(tmp_path / "data", SMALL)
    yield s
    s.close()
