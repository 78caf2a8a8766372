"""``lmq topics create|delete`` and the RocketMQ view of ``lmq topics show``: RocketMQ
topics (:mod:`gateway.rocketmq.topics`) on the store, with the gateway stopped.

These commands sit beside the LMQ commands of :mod:`cli.topics` (``list``, ``show``,
``clean``). ``show NAME`` shows the RocketMQ topic NAME when one exists and the LMQ
NAME otherwise (``--lmq`` forces the LMQ view): RocketMQ topic names contain no ``:``,
and every LMQ a front end makes does (``mqtt:``, ``amqp:``, ``rmq:``), so only a
hand-made LMQ can share a name with a topic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from broker_core import MessageStore
from cli.context import data_dir_option, format_bytes, open_store
from cli.remote import find_remote, seg, server_option
from gateway.rocketmq.topics import (
    QueueInUse,
    TopicOptionError,
    TopicRegistry,
    changed_topic,
    perm_text,
    topic_document,
)
from gateway.rocketmq.topics import parse_perm as _parse_perm
from lmq.rocketmq import DEFAULT_QUEUE_NUMS, MessageType, TopicConfig, queue_lmq


def parse_perm(text: str) -> int:
    """``rw``, ``r``, ``w``, ``-`` or RocketMQ's number (a click parameter error)."""
    try:
        return _parse_perm(text)
    except TopicOptionError as exc:
        raise click.BadParameter(str(exc)) from None


def registry(store: MessageStore) -> TopicRegistry:
    """The registry of the store, as the CLI uses it: never auto-creating."""
    return TopicRegistry(store, auto_create=False, default_queues=DEFAULT_QUEUE_NUMS)


def topic_dict(store: MessageStore, config: TopicConfig) -> dict[str, Any]:
    """A topic's configuration and each queue's min/max offsets (``show --json``)."""
    return topic_document(store, config)


def echo_topic(data: dict[str, Any]) -> None:
    click.echo(f"topic:        {data['name']}")
    click.echo(f"queues:       {data['read_queues']} read, {data['write_queues']} write")
    click.echo(f"perm:         {data['perm_text']} ({data['perm']})")
    click.echo(f"message type: {data['message_type']}")
    click.echo(f"{'QUEUE':>5} {'MIN':>9} {'MAX':>9} {'MESSAGES':>9} {'BYTES':>10}  LMQ")
    for q in data["queues"]:
        click.echo(
            f"{q['queue_id']:>5} {q['min_offset']:>9} {q['max_offset']:>9}"
            f" {q['messages']:>9} {format_bytes(q['bytes']):>10}  {q['lmq']}"
        )


@click.command("create")
@data_dir_option
@server_option
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), help="Read and write queues.")
@click.option("--read-queues", type=click.IntRange(1, 1024))
@click.option("--write-queues", type=click.IntRange(1, 1024))
@click.option(
    "--type", "message_type", type=click.Choice([t.value for t in MessageType],
                                                case_sensitive=False),
    default=None, help="Message type (default NORMAL, or the topic's current one).",
)
@click.option("--perm", help="rw (default), r, w, - or RocketMQ's number (6, 4, 2).")
@click.option("--json", "as_json", is_flag=True, help="Print the topic as JSON.")
def create(
    data_dir: Path, server: str | None, name: str, queues: int | None,
    read_queues: int | None, write_queues: int | None, message_type: str | None,
    perm: str | None, as_json: bool,
) -> None:
    """Create RocketMQ topic NAME, or change it if it exists: through the running
    gateway's admin API, or in the store when no gateway runs.

    Without queue options a new topic gets 8 read and 8 write queues and an existing one
    keeps its counts. Lowering the counts removes only empty queues."""
    if queues is not None and (read_queues is not None or write_queues is not None):
        raise click.UsageError("give --queues, or --read-queues and/or --write-queues")
    if perm is not None:
        parse_perm(perm)  # a usage error (exit 2), before the store is opened
    remote = find_remote(data_dir, server)
    if remote is not None:
        body = {"queues": queues, "read_queues": read_queues, "write_queues": write_queues,
                "perm": perm, "message_type": message_type}
        data = remote.call("PUT", f"/topics/{seg(name)}",
                           {k: v for k, v in body.items() if v is not None})
        created = data.pop("created")
        if as_json:
            click.echo(json.dumps(data))
        else:
            click.echo(_created_line(name, not created, data["read_queues"],
                                     data["write_queues"], data["perm"],
                                     data["message_type"]))
        return
    with open_store(data_dir, create=True) as store:
        reg = registry(store)
        old = reg.get(name)
        try:
            config = changed_topic(name, old, queues=queues, read_queues=read_queues,
                                   write_queues=write_queues, perm=perm,
                                   message_type=message_type)
            reg.create(config)
        except (QueueInUse, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        data = topic_dict(store, config)
    if as_json:
        click.echo(json.dumps(data))
    else:
        click.echo(_created_line(name, old is not None, config.read_queues,
                                 config.write_queues, config.perm,
                                 config.message_type.value))


def _created_line(name: str, changed: bool, read: int, write: int, perm: int,
                  kind: str) -> str:
    return (f"{'changed' if changed else 'created'} topic {name}: {read} read / {write}"
            f" write queues, perm {perm_text(perm)}, {kind}")


@click.command("delete")
@data_dir_option
@server_option
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="What was deleted, as JSON.")
def delete(data_dir: Path, server: str | None, name: str, as_json: bool) -> None:
    """Delete RocketMQ topic NAME: its configuration and its queues with their messages
    and committed offsets (through the running gateway, or in the store)."""
    remote = find_remote(data_dir, server)
    if remote is not None:
        doc = remote.call("DELETE", f"/topics/{seg(name)}")
    else:
        with open_store(data_dir) as store:
            reg = registry(store)
            lmqs = list(store.lmqs(queue_lmq(name, 0)[:-1]))
            messages = sum(i.messages for i in lmqs)
            if not reg.delete(name):
                raise click.ClickException(f"no RocketMQ topic named {name!r}")
        doc = {"name": name, "deleted": True, "queues": len(lmqs), "messages": messages}
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(f"deleted topic {name}: {doc['queues']} queue(s), {doc['messages']} message(s)")


def show_topic(store: MessageStore, name: str, as_json: bool) -> bool:
    """Show RocketMQ topic ``name`` if there is one; whether there was."""
    config = registry(store).get(name)
    if config is None:
        return False
    data = topic_dict(store, config)
    if as_json:
        click.echo(json.dumps(data))
    else:
        echo_topic(data)
    return True
