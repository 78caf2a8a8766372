"""The cluster id a member answers with across its promotion (gateway.cluster_id.ClusterId):
a slave answers the group's id, replicated into its metadata over the one it generated
at its first start, and so does the promoted member from the moment its fence is lifted,
before any front end is told of the promotion."""

from __future__ import annotations

from pathlib import Path

from broker_core import MessageStore
from gateway.cluster_id import META_KEY, ClusterId, cluster_id


def test_the_group_id_from_the_slave_to_the_promoted_master(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path / "b")
    try:
        assert store.replica is not None
        own = cluster_id(store)  # generated and kept at the member's first start
        ids = ClusterId(store)
        assert ids.value == own
        store.replica.fence("a slave")
        # the master's snapshot replaces the metadata (replicated: a fenced store's own
        # writes are refused, the replicated state's are not)
        store.update_meta({META_KEY: b"lmq-group"})
        assert ids.value == "lmq-group"
        store.replica.become_master(2)  # the fence lifted; no front end told yet
        assert ids.value == "lmq-group"
        assert ClusterId(store, "configured").value == "configured"
    finally:
        store.close()
