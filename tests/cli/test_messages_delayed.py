"""`lmq messages show` of a delayed message: its queues without offsets (assigned when
its timer fires) and the time it is due, not the due time shown as an offset."""

from __future__ import annotations

from pathlib import Path

from broker_core import Message, MessageStore
from broker_core.clock import now_ms
from cli.messages import record_dict
from gateway.remoting.query import queue_of
from lmq.rocketmq import queue_lmq


def test_a_delayed_record_shows_its_due_time_not_as_an_offset(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path) as store:
        due = now_ms() + 60_000
        res = store.append_delayed(Message("orders", b"x"), [queue_lmq("orders", 2), "m/x"], due)
        record = store.record_at(res.position)
        assert record is not None and record.delayed
        data = record_dict(record, "position")
        assert data["delayed_until"] == due
        assert data["queues"] == [{"topic": "orders", "queue_id": 2, "queue_offset": None}]
        assert data["other_lmqs"] == [{"lmq": "m/x", "offset": None}]
        assert queue_of(record) == ("orders", 2, 0)
        plain = store.record_at(store.append(Message("orders", b"y"), ["m/x"]).position)
        assert plain is not None and record_dict(plain, "position")["delayed_until"] is None
