"""A half message's keys are in the key index (put when it is stored, and again by a
replay of the log), so a committed transactional message is found by key; which halves
a reader may show is for the reader to decide (``transaction_outcome``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from broker_core import Message, MessageStore, Outcome

from .conftest import SMALL


def half(body: bytes, key: bytes) -> Message:
    return Message(topic="tx", body=body, properties={"KEYS": key, "UNIQ_KEY": b"U" + key})


def test_half_keys_indexed_live_and_by_replay(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, SMALL) as s:
        a = s.append_half(half(b"a", b"ka"), ["q"], "PG")
        b = s.append_half(half(b"b", b"kb"), ["q"], "PG")
        s.end_transaction(a.position, True)
        s.end_transaction(b.position, False)
        found = s.find_by_key("tx", "ka")
        assert [r.body for r in found] == [b"a"]
        assert s.transaction_outcome(found[0].position) == Outcome.ALREADY_COMMITTED
        assert [r.body for r in s.find_by_key("tx", "Ukb")] == [b"b"]
        assert s.transaction_outcome(b.position) == Outcome.ALREADY_ROLLED_BACK
        assert s.rebuild_index().index_rebuilt
        assert [r.body for r in s.find_by_key("tx", "ka")] == [b"a"]
    shutil.rmtree(tmp_path / "index")  # lost: rebuilt from the log at open
    with MessageStore.open(tmp_path, SMALL) as s:
        assert [r.body for r in s.find_by_key("tx", "Uka")] == [b"a"]
        assert [r.body for r in s.pull("q", 0).messages] == [b"a"]
