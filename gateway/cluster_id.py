"""The gateway's cluster id: who it is to the message connector (issue 19).

Every copy a connector writes carries the ids of the clusters it passed through
(``__LMQ_PATH``); a gateway drops a copy whose path names itself (a loop, e.g. two rules
A -> B and B -> A). The id must therefore stay the same across restarts and differ
between gateways, whatever names a rules file gives them: it is generated once
(``lmq-`` and 16 random hex digits) and kept in the store's metadata (key
:data:`META_KEY`, as durable as consumer offsets), unless ``cluster_id`` in the
configuration sets it (the configured value wins and the stored one is left alone).
"""

from __future__ import annotations

import secrets

from broker_core import MessageStore

META_KEY = "cluster/id"
#: Longest id; ids go into every copy's properties.
MAX_LENGTH = 128


def check_cluster_id(value: str) -> str | None:
    """Why ``value`` cannot be a cluster id (None: it can)."""
    if not value or len(value) > MAX_LENGTH:
        return f"a cluster id has 1 to {MAX_LENGTH} characters"
    if any(c in value for c in ",\x00") or value != value.strip():
        return "a cluster id has no comma, NUL or surrounding space"
    return None


def cluster_id(store: MessageStore, configured: str = "") -> str:
    """``configured`` if set, else the id kept in ``store`` (generated and kept the first
    time)."""
    if configured:
        return configured
    raw = store.get_meta(META_KEY)
    if raw:
        return raw.decode()
    generated = f"lmq-{secrets.token_hex(8)}"
    if not store.read_only:
        store.put_meta(META_KEY, generated.encode())
    return generated


class ClusterId:
    """The id a front end answers with, kept at hand for the copies it stamps on every
    send. In a broker group it is the group's: the one its first master kept, replicated
    into every slave's metadata (a copy's origin and the connector's high-water marks
    name it, so a failover must not change it). A fenced store (a slave) reads it from
    the metadata at each use, since the replicated state replaces the id the slave
    generated at its own first start; once the fence is lifted (promoted) the first use
    reads it again and keeps it. Nothing has to be told of the promotion, so no request
    served between the fence's lift and the front ends' reload sees the slave's own id
    (a connector asking then marked its copies with it: a failure of the failover test
    under load)."""

    __slots__ = ("_store", "_configured", "_kept")

    def __init__(self, store: MessageStore, configured: str = "") -> None:
        self._store = store
        self._configured = configured
        self._kept: str | None = None

    @property
    def value(self) -> str:
        if self._store.log.fence is not None:
            self._kept = None
            return cluster_id(self._store, self._configured)
        kept = self._kept
        if kept is None:
            kept = self._kept = cluster_id(self._store, self._configured)
        return kept
