"""The MQTT front end's views for the admin API (:mod:`gateway.admin.views`): sessions
with their subscriptions and offline backlog, and kicking a session."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from gateway.topic_space import mqtt_lmq

if TYPE_CHECKING:
    from gateway.mqtt.frontend import MqttFrontEnd
    from gateway.mqtt.sessions import Session

__all__ = ["register"]


def register(front: MqttFrontEnd) -> None:
    views = front.ctx.views
    views.provide("mqtt.sessions", lambda **kw: _rows(front, **kw))
    views.provide("mqtt.session.keys", lambda **kw: _keys(front, **kw))
    views.provide(
        "mqtt.session", lambda client_id: _row(front, _find(front, client_id), detail=True)
    )
    views.provide("mqtt.kick", lambda client_id: _kick(front, _find(front, client_id)))


def _find(front: MqttFrontEnd, client_id: str) -> Session:
    session = front.sessions.get(client_id)
    if session is None:
        raise LookupError(f"no MQTT session {client_id!r}")
    return session


def _subscriptions(session: Session) -> int:
    return len(session.state.subscriptions)


def _user(session: Session) -> str:
    return session.state.username or ""


#: How a session's value of each sort field (but the backlog) is read.
_SORT_FIELDS: dict[str, Callable[[Session], Any]] = {
    "name": attrgetter("client_id"),
    "connected": lambda s: s.handler is not None,
    "subscriptions": _subscriptions,
    "inflight": lambda s: s.qos_inflight(),
    "user": _user,
}


def _keys(front: MqttFrontEnd, sort: str, connected: bool | None = None) -> list[tuple[Any, str]]:
    """``(value of sort, client id)`` of every session (those with or without a
    connection when ``connected`` is given): a list call selects its page on these,
    then asks for the page's rows by name; no row (nor backlog: a store lookup per
    subscription) is made for the sessions off the page."""
    value = _SORT_FIELDS.get(sort)
    if value is None:
        raise ValueError(f"sessions are not sorted by {sort} here")
    sessions: Iterable[Session] = front.sessions.values()
    if connected is not None:
        sessions = (s for s in sessions if (s.handler is not None) == connected)
    return [(value(s), s.client_id) for s in sessions]


def _rows(
    front: MqttFrontEnd, names: list[str] | None = None, backlog: bool = True
) -> list[dict[str, Any]]:
    """The sessions' rows (only those ``names`` names, in that order, when given)."""
    sessions = front.sessions
    if names is None:
        return [_row(front, s, backlog=backlog) for s in sessions.values()]
    found = (sessions.get(name) for name in names)
    return [_row(front, s, backlog=backlog) for s in found if s is not None]


def _row(
    front: MqttFrontEnd, session: Session, detail: bool = False, backlog: bool = True
) -> dict[str, Any]:
    state = session.state
    handler = session.handler
    row: dict[str, Any] = {
        "name": state.client_id,
        "client_id": state.client_id,
        "connected": handler is not None,
        "connection": handler.conn.id if handler is not None else None,
        "user": state.username or "",
        "persistent": state.persistent,
        "expiry_seconds": state.expiry,
        "disconnected_ms": state.disconnected_ms,
        "subscriptions": len(state.subscriptions),
        "inflight": session.qos_inflight(),
    }
    if not (backlog or detail):
        return row
    store = front.store
    subs = []
    waiting_all = 0
    for sub in state.subscriptions.values():
        lmq = mqtt_lmq(sub.topic_filter) if sub.share_group is None else None
        waiting = 0
        if lmq is not None:
            info = store.lmq(lmq)
            offset = store.get_offset(session.group, lmq)
            if info is not None:
                waiting = max(
                    0, info.max_offset - (offset if offset is not None else info.max_offset)
                )
        waiting_all += waiting
        subs.append(
            {
                "filter": sub.topic_filter,
                "qos": sub.qos,
                "share_group": sub.share_group,
                "backlog": waiting,
            }
        )
    row["backlog"] = waiting_all
    if detail:
        row["subscription_list"] = subs
    return row


def _kick(front: MqttFrontEnd, session: Session) -> dict[str, Any]:
    """Disconnect the client (if connected) and discard the session: its subscriptions,
    offsets and stored state, as a clean start would."""
    handler = session.handler
    if handler is not None:
        session.state.expiry = 0  # ended when its connection goes (MqttFrontEnd.disconnected)
        session.state.will = None
        handler.close("kicked (admin API)")
    else:
        front.end_session(session)
    return {"client_id": session.client_id, "kicked": True, "was_connected": handler is not None}
