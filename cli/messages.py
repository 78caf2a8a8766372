"""``lmq messages``: look RocketMQ messages up in the store (readable beside a running
gateway: the store is opened read-only).

- ``show MSGID``: MSGID is an ``offsetMsgId`` (the store address and the log position,
  :func:`protocol.remoting.messages.parse_offset_msg_id`) or a client message id (the ``UNIQ_KEY``
  property, found through the key index). Both are 32 hex digits for IPv4, so both are
  tried; a position only counts when a valid record starts there (CRC and stored
  position agree), so a UNIQ_KEY is never taken for a position by accident.
- ``find --topic T --key K``: the messages of topic T (and its MQTT subtopics) whose
  ``KEYS`` or ``UNIQ_KEY`` name K, newest last.
- ``send --topic T BODY``: send through a running gateway over RocketMQ remoting, with
  the project's client (``gateway.clients``); prints the UNIQ_KEY and offsetMsgId that
  ``show`` finds it by.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from cli.context import data_dir_option, open_store
from gateway.rocketmq.lookup import find_message, record_dict
from gateway.rocketmq.topics import TopicRegistry
from lmq.rocketmq import DEFAULT_QUEUE_NUMS

#: Bytes of a body shown in the text output.
PREVIEW = 200


@click.group()
def messages() -> None:
    """Find messages by message id or key; send one through a running gateway."""


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def echo_record(data: dict[str, Any]) -> None:
    click.echo(f"position:   {data['position']} ({data['found_by']})")
    click.echo(f"topic:      {data['topic']}" + (f"  tag {data['tag']}" if data["tag"] else ""))
    click.echo(f"stored:     {_time(data['store_ms'])}  born {_time(data['born_ms'])}"
               f"  from {data['origin'] or '-'} ({data['protocol']})")
    if data.get("delayed_until") is not None:
        click.echo(f"delayed:    until {_time(data['delayed_until'])}")
    for q in data["queues"]:
        click.echo(f"queue:      {q['topic']} #{q['queue_id']} offset {q['queue_offset']}")
    for other in data["other_lmqs"]:
        click.echo(f"lmq:        {other['lmq']} offset {other['offset']}")
    for key, value in sorted(data["properties"].items()):
        click.echo(f"property:   {key}={value}")
    if "body" in data:
        text = data["body"]
        shown = text if len(text) <= PREVIEW else text[:PREVIEW] + "..."
        click.echo(f"body:       {data['body_bytes']} bytes: {shown}")
    else:
        click.echo(f"body:       {data['body_bytes']} bytes (binary; --json shows it)")


def _echo_all(found: list[dict[str, Any]], as_json: bool) -> None:
    for i, data in enumerate(found):
        if as_json:
            click.echo(json.dumps(data))
        else:
            if i:
                click.echo("")
            echo_record(data)


@messages.command("show")
@data_dir_option
@click.argument("msgid")
@click.option("--topic", help="Look the UNIQ_KEY up in this topic only (default: every"
              " RocketMQ topic).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def show(data_dir: Path, msgid: str, topic: str | None, as_json: bool) -> None:
    """Show the message with offsetMsgId or UNIQ_KEY MSGID."""
    with open_store(data_dir, read_only=True) as store:
        topics = [topic] if topic is not None else TopicRegistry(
            store, auto_create=False, default_queues=DEFAULT_QUEUE_NUMS).names()
        found = find_message(store, msgid, topics)
    if not found:
        raise click.ClickException(f"no message with offsetMsgId or UNIQ_KEY {msgid!r}")
    _echo_all(found, as_json)


@messages.command("find")
@data_dir_option
@click.option("--topic", required=True, help="RocketMQ topic (or MQTT first level).")
@click.option("--key", required=True, help="A key of the KEYS property, or a UNIQ_KEY.")
@click.option("--max", "max_num", type=click.IntRange(1, 10_000), default=64,
              show_default=True, help="The newest this many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message.")
def find(data_dir: Path, topic: str, key: str, max_num: int, as_json: bool) -> None:
    """Find the messages of TOPIC whose KEYS or UNIQ_KEY name KEY, oldest first."""
    with open_store(data_dir, read_only=True) as store:
        records = store.find_by_key(topic, key, max_num=max_num)
        found = [record_dict(r, "key") for r in records]
    _echo_all(found, as_json)
    if not as_json:
        click.echo(f"{len(found)} message(s)")


@messages.command("send")
@click.option("--server", default="127.0.0.1:8080", show_default=True,
              help="A running gateway's remoting or unified port (host:port).")
@click.option("--topic", required=True, help="RocketMQ topic.")
@click.option("--tag", help="The message's tag (TAGS).")
@click.option("--key", "keys", multiple=True, help="A key (KEYS); repeatable.")
@click.option("--property", "props", multiple=True, metavar="NAME=VALUE",
              help="A user property; repeatable (mqttSecondTopic=/eu/42 reaches MQTT"
              " subscribers of TOPIC/eu/42).")
@click.option("--group", default="lmq-cli", show_default=True, help="Producer group.")
@click.option("--access-key", help="Sign the request with this access key.")
@click.option("--secret-key", envvar="LMQ_SECRET_KEY",
              help="The access key's secret (or LMQ_SECRET_KEY).")
@click.option("--timeout", type=click.FloatRange(0.1, 600), default=10.0, show_default=True,
              help="Seconds to wait for the gateway.")
@click.option("--json", "as_json", is_flag=True, help="The send result as JSON.")
@click.argument("body")
def send(
    server: str, topic: str, tag: str | None, keys: tuple[str, ...], props: tuple[str, ...],
    group: str, access_key: str | None, secret_key: str | None, timeout: float,
    as_json: bool, body: str,
) -> None:
    """Send BODY to TOPIC through a running gateway, over RocketMQ remoting (the
    project's client, gateway.clients), and print the ids it was stored under."""
    # Imported here: the store commands above must not pay for the client's imports.
    import asyncio

    from gateway.clients import Producer, RemotingClient, RemotingError

    properties: dict[str, str] = {}
    for item in props:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--property")
        properties[name] = value
    if access_key and not secret_key:
        raise click.BadParameter("needs --secret-key (or LMQ_SECRET_KEY)",
                                 param_hint="--access-key")

    async def run() -> dict[str, Any]:
        async with RemotingClient(server, access_key=access_key, secret_key=secret_key,
                                  timeout=timeout) as client:
            result = await Producer(client, group, timeout=timeout).send(
                topic, body.encode(), tags=tag, keys=keys, properties=properties
            )
        return {"msg_id": result.msg_id, "offset_msg_id": result.offset_msg_id,
                "topic": result.queue.topic, "queue_id": result.queue.queue_id,
                "queue_offset": result.queue_offset}

    try:
        sent = asyncio.run(run())
    except RemotingError as exc:
        if exc.code == -1:  # no connection, or no answer in time
            raise click.ClickException(
                f"cannot reach the gateway at {server}: {exc.remark}"
            ) from None
        raise click.ClickException(f"the gateway refused the send: {exc}") from None
    except (OSError, TimeoutError) as exc:
        raise click.ClickException(f"cannot reach the gateway at {server}: {exc}") from None
    if as_json:
        click.echo(json.dumps(sent))
    else:
        click.echo(f"sent {sent['topic']} queue {sent['queue_id']} offset {sent['queue_offset']}"
                   f" msgId {sent['msg_id']} offsetMsgId {sent['offset_msg_id']}")
