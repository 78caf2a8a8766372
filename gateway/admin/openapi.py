"""The admin API in the OpenAPI document the JSON API publishes (``/v1/openapi.json``,
:mod:`gateway.http.v1.openapi`): one entry per route of :mod:`gateway.admin`, checked
against the route table by the tests (a route without its entry fails them)."""

from __future__ import annotations

from typing import Any

from gateway.admin.core import MAX_LIMIT, PREFIX

__all__ = ["admin_paths"]

_PROBLEM = {
    "description": "An RFC 9457 problem; field names the input at fault",
    "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
}
_ERRORS = {str(s): _PROBLEM for s in (400, 401, 403, 404, 409, 429)}
_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}

_PAGING = [
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
    },
    {
        "name": "cursor",
        "in": "query",
        "schema": {"type": "string"},
        "description": "The next of the previous page",
    },
    {
        "name": "sort",
        "in": "query",
        "schema": {"type": "string"},
        "description": "A field; -field sorts descending",
    },
    {
        "name": "filter",
        "in": "query",
        "schema": {"type": "string"},
        "description": "A substring of the name",
    },
]


def _q(name: str, kind: str = "string", description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "in": "query", "schema": {"type": kind}}
    if description:
        out["description"] = description
    return out


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "additionalProperties": False}


_S = {"type": "string"}
_I = {"type": "integer"}
_B = {"type": "boolean"}
_STRINGS = {"type": "array", "items": _S}

#: (method, pattern after the prefix) -> (summary, query parameters, body schema).
DOCS: dict[tuple[str, str], tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = {
    ("GET", "/overview"): (
        "Version, uptime, listeners, connections, message rates per"
        " protocol, store, replication, memory and open files",
        [],
        None,
    ),
    ("GET", "/overview/history"): (
        "The gateway's samples of the last hour (every 5 s; gateway/history.py): messages"
        " in/out a second per protocol, stored a second, connections per protocol, store"
        " bytes and lag; those taken after since",
        [_q("since", "integer", "ms since the epoch")],
        None,
    ),
    ("GET", "/store"): ("The store's statistics", [], None),
    ("POST", "/store/verify"): (
        "Start a verify run (202; 409 while one runs)",
        [],
        _obj(check_index=_B),
    ),
    ("GET", "/store/verify"): ("The verify run: progress, then the result", [], None),
    ("GET", "/connections"): (
        "Connections (paged; sort by id, protocol, listener, peer,"
        " client_id, user, bytes_in, bytes_out, messages_in, messages_out, age_seconds)",
        [*_PAGING, _q("protocol")],
        None,
    ),
    ("GET", "/connections/{id}"): ("One connection", [], None),
    ("DELETE", "/connections/{id}"): ("Close a connection (202)", [], None),
    ("GET", "/topics"): ("RocketMQ topics (paged)", _PAGING, None),
    ("GET", "/topics/{topic}"): ("A topic with its queues' offsets", [], None),
    ("PUT", "/topics/{topic}"): (
        "Create (201) or change a RocketMQ topic: queue counts, perm, message type;"
        " lowering the counts removes only empty queues (409 otherwise)",
        [],
        _obj(
            queues=_I,
            read_queues=_I,
            write_queues=_I,
            perm={"oneOf": [_S, _I]},
            message_type={
                "enum": [
                    "NORMAL",
                    "FIFO",
                    "DELAY",
                    "TRANSACTION",
                    "MIXED",
                    "normal",
                    "fifo",
                    "delay",
                    "transaction",
                    "mixed",
                ]
            },
        ),
    ),
    ("DELETE", "/topics/{topic}"): (
        "Delete a topic with its queues, messages and offsets",
        [],
        None,
    ),
    ("GET", "/groups"): (
        "Consumer groups with their lag (paged; sort by name, lag, queues)",
        _PAGING,
        None,
    ),
    ("GET", "/groups/{group}"): (
        "A group: per-queue offsets and lag, in-flight messages, blocked FIFO message groups",
        [],
        None,
    ),
    ("GET", "/groups/{group}/inflight"): (
        "The group's messages in flight (popped, not acked) on one LMQ, by offset: offset,"
        " message id, deliveries, popped_ms, invisible_until_ms; next is the after of the"
        " next page (read-only)",
        [
            {**_q("lmq", description="The queue's LMQ, as the group lists it"), "required": True},
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 100},
            },
            _q("after", "integer", "Only offsets after this one (the next of the previous page)"),
        ],
        None,
    ),
    ("POST", "/groups/{group}/reset"): (
        "Set the group's next offset on every queue of a topic",
        [],
        {
            **_obj(
                topic=_S,
                position={"enum": ["earliest", "latest"]},
                timestamp_ms={"type": "integer", "minimum": 0},
            ),
            "required": ["topic"],
        },
    ),
    ("POST", "/groups/{group}/release"): (
        "Release a blocked FIFO message group: its head goes to %DLQ%<group>",
        [],
        {**_obj(topic=_S, message_group=_S), "required": ["topic", "message_group"]},
    ),
    ("DELETE", "/groups/{group}"): (
        "Delete a group (and its offsets unless keep_offsets)",
        [_q("keep_offsets", "boolean")],
        None,
    ),
    ("GET", "/lmqs"): (
        "LMQs in name order (paged; a million never listed whole)",
        [*_PAGING, _q("prefix")],
        None,
    ),
    ("GET", "/lmqs/{lmq}"): ("An LMQ with its consumers' offsets and lag", [], None),
    ("PUT", "/lmqs/{lmq}/offsets/{group}"): (
        "Set a consumer's next offset on an LMQ: an offset, or position earliest or latest",
        [],
        _obj(offset={"type": "integer", "minimum": 0}, position={"enum": ["earliest", "latest"]}),
    ),
    ("POST", "/lmqs/clean"): (
        "Remove LMQs by prefix and/or idleness (dry_run: only say)",
        [],
        _obj(prefix=_S, idle_ms={"type": "integer", "minimum": 0}, dry_run=_B),
    ),
    ("GET", "/lmqs/{lmq}/messages"): (
        "Peek an LMQ from an offset (read-only)",
        [_q("offset", "integer"), _q("limit", "integer")],
        None,
    ),
    ("GET", "/messages"): (
        "Messages of a topic by key (read-only)",
        [_q("topic"), _q("key"), _q("limit", "integer")],
        None,
    ),
    ("GET", "/messages/{msgid}"): ("A message by offsetMsgId or UNIQ_KEY", [_q("topic")], None),
    ("GET", "/users"): ("Users (no secrets; paged)", _PAGING, None),
    ("GET", "/users/{user}"): ("A user with ACL rules and AMQP permissions", [], None),
    ("PUT", "/users/{user}"): (
        "Create (201) or change a user: password, tags",
        [],
        _obj(password=_S, tags=_STRINGS, certificate_subjects=_STRINGS),
    ),
    ("DELETE", "/users/{user}"): ("Delete a user", [], None),
    ("POST", "/users/{user}/access-keys"): (
        "Add a RocketMQ access key (generated when not given; the secret shown once)",
        [],
        _obj(access_key=_S, secret_key=_S),
    ),
    ("DELETE", "/access-keys/{key}"): ("Delete an access key", [], None),
    ("POST", "/users/{user}/acl"): (
        "Add an MQTT/RocketMQ ACL rule (at position, from 1)",
        [],
        {
            **_obj(
                access={"enum": ["publish", "subscribe", "both", "deny"]},
                filter=_S,
                position={"type": "integer", "minimum": 1},
            ),
            "required": ["access", "filter"],
        },
    ),
    ("DELETE", "/users/{user}/acl/{position}"): ("Remove an ACL rule by position", [], None),
    ("PUT", "/users/{user}/permissions/{vhost}"): (
        "Set AMQP permissions (regular expressions) on a vhost",
        [],
        _obj(configure=_S, write=_S, read=_S),
    ),
    ("DELETE", "/users/{user}/permissions/{vhost}"): (
        "Clear AMQP permissions on a vhost",
        [],
        None,
    ),
    ("POST", "/users"): (
        "Add a user (409 if the name is taken), with an access key if given"
        " (a generated secret key shown once)",
        [],
        {
            **_obj(
                name=_S,
                password=_S,
                tags=_STRINGS,
                certificate_subjects=_STRINGS,
                access_key=_S,
                secret_key=_S,
            ),
            "required": ["name"],
        },
    ),
    ("PUT", "/users/{user}/password"): (
        "Change a user's password",
        [],
        {**_obj(password=_S), "required": ["password"]},
    ),
    ("DELETE", "/users/{user}/password"): (
        "Remove a user's password (certificate or access-key login only)",
        [],
        None,
    ),
    ("PUT", "/users/{user}/tags"): (
        "Replace a user's tags ([] removes all)",
        [],
        {**_obj(tags=_STRINGS), "required": ["tags"]},
    ),
    ("POST", "/users/{user}/certificates"): (
        "Let a client certificate subject (e.g. CN=dev-1,O=Acme) log in as the user",
        [],
        {**_obj(subject=_S), "required": ["subject"]},
    ),
    ("DELETE", "/certificates/{subject}"): (
        "Stop a certificate subject from logging in",
        [],
        None,
    ),
    ("GET", "/acl"): (
        "ACL rules in evaluation order, each with its position (of one name: user=)",
        [_q("user", description="A user, @default or @anonymous")],
        None,
    ),
    ("GET", "/permissions"): ("AMQP permissions by user and vhost", [_q("vhost")], None),
    ("GET", "/vhosts"): (
        "AMQP vhosts as configured in the users file, with the users permitted on them"
        " (the live ones: /amqp/vhosts)",
        [],
        None,
    ),
    ("PUT", "/vhosts/{vhost}"): (
        "Add an AMQP vhost (409 if it exists)",
        [],
        _obj(description=_S),
    ),
    ("DELETE", "/vhosts/{vhost}"): (
        "Delete an AMQP vhost and every permission on it",
        [],
        None,
    ),
    ("GET", "/mqtt/sessions"): (
        "MQTT sessions: connected, subscriptions, offline backlog"
        " (paged; sort by name, connected, subscriptions, backlog,"
        " inflight, user)",
        [*_PAGING, _q("connected", "boolean")],
        None,
    ),
    ("GET", "/mqtt/sessions/{client_id}"): ("A session with its subscriptions", [], None),
    ("DELETE", "/mqtt/sessions/{client_id}"): (
        "Kick: disconnect the client and discard its session",
        [],
        None,
    ),
    ("GET", "/amqp/vhosts"): ("AMQP vhosts (paged)", _PAGING, None),
    ("GET", "/amqp/exchanges"): ("AMQP exchanges (paged)", [*_PAGING, _q("vhost")], None),
    ("GET", "/amqp/queues"): (
        "AMQP queues: depth, unacked, consumers, rates (paged)",
        [*_PAGING, _q("vhost")],
        None,
    ),
    ("GET", "/amqp/bindings"): ("AMQP bindings (paged)", [*_PAGING, _q("vhost")], None),
    ("POST", "/amqp/queues/{vhost}/{queue}/purge"): ("Purge a queue's ready messages", [], None),
    ("DELETE", "/amqp/queues/{vhost}/{queue}"): ("Delete a queue", [], None),
    ("DELETE", "/amqp/exchanges/{vhost}/{exchange}"): ("Delete an exchange", [], None),
    ("POST", "/connector/rules/{rule}/enable"): (
        "Run a rule again (after disable; until the gateway restarts)",
        [],
        None,
    ),
    ("POST", "/connector/rules/{rule}/disable"): (
        "Stop a rule (its positions kept; until enable or the gateway's restart)",
        [],
        None,
    ),
    ("GET", "/connector/rules"): ("The connector's rules: state, lag, delay, errors", [], None),
}


def admin_paths() -> dict[str, Any]:
    """The ``paths`` entries of the admin API."""
    paths: dict[str, Any] = {}
    for (method, pattern), (summary, query, body) in DOCS.items():
        params = [
            {"name": part[1:-1], "in": "path", "required": True, "schema": _S}
            for part in pattern.split("/")
            if part.startswith("{")
        ]
        op: dict[str, Any] = {
            "summary": summary,
            "tags": ["admin"],
            "security": [{"basic": []}],
            "parameters": [*params, *query],
            "responses": {"200": _OK, **_ERRORS},
        }
        if method in ("PUT", "POST"):
            op["responses"]["201"] = _OK
        if method == "DELETE" and pattern.startswith("/connections"):
            op["responses"]["202"] = _OK
        if body is not None:
            op["requestBody"] = {
                "required": False,
                "content": {"application/json": {"schema": body}},
            }
        paths.setdefault(PREFIX + pattern, {})[method.lower()] = op
    return paths
