"""``lmq groups``: RocketMQ consumer groups (:mod:`gateway.rocketmq.groups`) and their
progress: per topic and queue, the committed offset, the queue's max offset and the lag.

A group is listed when it has a configuration (created on first use or by hand) or a
committed offset on a RocketMQ queue LMQ (``rmq:<topic>:<queue>``).

FIFO: ``show`` lists the group's blocked message groups (a head delivered more than
once or waiting for its retry: since when, how often, how many messages wait behind
it), read from the state records, so it works beside a running gateway. ``release``
moves a message group on: its head goes to the group's dead-letter topic
(``%DLQ%<group>``). With ``--gateway HOST:PORT`` it asks a running gateway over its
gRPC port (:mod:`gateway.grpc.admin`; ``--access-key``/``--secret-key`` sign it when
the gateway has users, and the key needs to consume the topic as the group); without,
it writes the store itself, so the gateway must be stopped (the store's directory lock
refuses otherwise)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from broker_core import MessageStore
from cli.context import data_dir_option, open_store
from cli.remote import find_remote, seg, server_option
from gateway.rocketmq.groups import (
    GroupRegistry,
    blocked_row,
    group_progress,
    group_summaries,
    in_flight_rows,
    release_message_group,
)
from gateway.rocketmq.offsets import reset_targets
from gateway.rocketmq.topics import TopicRegistry


@click.group()
def groups() -> None:
    """RocketMQ consumer groups and their lag."""


def _progress(store: MessageStore) -> dict[str, list[dict[str, Any]]]:
    """group -> one row per RocketMQ queue it committed an offset on."""
    return group_progress(store)


@groups.command("list")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(data_dir: Path, as_json: bool) -> None:
    """List consumer groups with their total lag."""
    with open_store(data_dir, read_only=True) as store:
        registry = GroupRegistry(store, auto_create=False)
        progress = _progress(store)
        summaries = group_summaries(registry, progress)
        if not as_json:
            click.echo(f"{'GROUP':40} {'CONFIGURED':>10} {'RETRIES':>7} {'QUEUES':>6} {'LAG':>9}")
        for data in summaries:
            if as_json:
                click.echo(json.dumps(data))
            else:
                retries = "-" if not data["configured"] else str(data["retry_max_times"])
                click.echo(
                    f"{data['group']:40} {'yes' if data['configured'] else 'no':>10}"
                    f" {retries:>7} {data['queues']:>6} {data['lag']:>9}"
                )
        if not as_json:
            click.echo(f"{len(summaries)} group(s)")


@groups.command("show")
@data_dir_option
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option(
    "--in-flight",
    "in_flight",
    type=click.IntRange(1, 1000),
    default=None,
    metavar="N",
    help="Also list up to N messages in flight (popped, not acked) on each queue:"
    " offset, message id, deliveries, invisible until.",
)
def show(data_dir: Path, group: str, as_json: bool, in_flight: int | None) -> None:
    """Show GROUP's committed offset, max offset and lag on each topic and queue (and,
    with --in-flight, its messages in flight). Read-only: beside a running gateway too."""
    with open_store(data_dir, read_only=True) as store:
        config = GroupRegistry(store, auto_create=False).get(group)
        rows = _progress(store).get(group, [])
        blocked = [blocked_row(b) for b in store.pop.blocked_groups(group)]
        if in_flight is not None:
            for r in rows:
                r["in_flight_messages"], r["in_flight_more"] = in_flight_rows(
                    store, group, r["lmq"], limit=in_flight
                )
    if config is None and not rows:
        raise click.ClickException(f"no consumer group named {group!r}")
    if as_json:
        click.echo(json.dumps({
            "group": group,
            "config": None if config is None else {
                "retry_max_times": config.retry_max_times,
                "consume_enable": config.consume_enable,
                "consume_from_min_enable": config.consume_from_min_enable,
            },
            "queues": rows,
            "lag": sum(r["lag"] for r in rows),
            "blocked_message_groups": blocked,
        }))
        return
    click.echo(f"group:   {group}")
    if config is None:
        click.echo("config:  none (offsets only)")
    else:
        click.echo(f"config:  retry max {config.retry_max_times},"
                   f" consume {'on' if config.consume_enable else 'off'}")
    click.echo(f"{'TOPIC':40} {'QUEUE':>5} {'OFFSET':>9} {'MAX':>9} {'LAG':>9}")
    for r in rows:
        click.echo(f"{r['topic']:40} {r['queue_id']:>5} {r['offset']:>9}"
                   f" {r['max_offset']:>9} {r['lag']:>9}")
    click.echo(f"total lag: {sum(r['lag'] for r in rows)}")
    flying = [r for r in rows if r.get("in_flight_messages")]
    if in_flight is not None and not flying:
        click.echo("in flight: none")
    for r in flying:
        more = " (more not shown)" if r["in_flight_more"] else ""
        click.echo(f"{r['topic']} queue {r['queue_id']}{more}:")
        click.echo(f"  {'OFFSET':>9} {'MESSAGE ID':32} {'DELIVERIES':>10} {'INVISIBLE UNTIL':>24}")
        for m in r["in_flight_messages"]:
            until = time.gmtime(m["invisible_until_ms"] / 1000)
            click.echo(
                f"  {m['offset']:>9} {m['message_id'] or '-':32} {m['deliveries']:>10}"
                f" {time.strftime('%Y-%m-%d %H:%M:%SZ', until):>24}"
            )
    if blocked:
        click.echo(f"blocked message groups (FIFO): {len(blocked)}")
        click.echo(f"{'MESSAGE GROUP':24} {'TOPIC':24} {'QUEUE':>5} {'HEAD':>9}"
                   f" {'DELIVERED':>9} {'WAITING':>7} {'BLOCKED FOR':>11}")
        for b in blocked:
            click.echo(f"{b['message_group']:24} {b['topic']:24} {b['queue_id']:>5}"
                       f" {b['offset']:>9} {b['deliveries']:>9} {b['waiting']:>7}"
                       f" {b['blocked_for_ms'] / 1000:>10.1f}s")


@groups.command("release")
@data_dir_option
@server_option
@click.argument("group")
@click.argument("topic")
@click.argument("message_group")
@click.option("--gateway", metavar="HOST:PORT",
              help="Ask this running gateway (its gRPC port) instead of opening the store.")
@click.option("--access-key", default="", help="With --gateway: sign with this access key.")
@click.option("--secret-key", default="", help="With --gateway: the access key's secret.")
@click.option("--json", "as_json", is_flag=True, help="What was released, as JSON.")
def release(data_dir: Path, server: str | None, group: str, topic: str, message_group: str,
            gateway: str | None, access_key: str, secret_key: str, as_json: bool) -> None:
    """Release MESSAGE_GROUP of GROUP on FIFO topic TOPIC: its head message goes to
    %DLQ%GROUP and the group moves on. Through the admin API of the running gateway
    (on the data directory, or --server), over a gateway's gRPC port with --gateway, or
    offline."""
    if gateway:
        doc = _release_remote(gateway, access_key, secret_key, group, topic, message_group)
    elif (remote := find_remote(data_dir, server)) is not None:
        doc = remote.call("POST", f"/groups/{seg(group)}/release",
                          {"topic": topic, "message_group": message_group})
    else:
        with open_store(data_dir) as store:
            topics = TopicRegistry(store, False, 1)
            released = release_message_group(store, topics.ensure, group, topic,
                                              message_group)
        if released is None:
            raise click.ClickException(
                f"message group {message_group!r} of {group!r} has no message out on {topic}")
        doc = {"group": group, "topic": topic, "message_group": message_group,
               **released._asdict()}
    if as_json:
        click.echo(json.dumps(doc))
        return
    click.echo(f"released {message_group!r} of {group!r} on {topic} queue"
               f" {doc['queue_id']}: offset {doc['offset']} moved to"
               f" {doc['dead_letter_topic']}")


def _release_remote(address: str, access_key: str, secret_key: str, group: str,
                    topic: str, message_group: str) -> dict[str, Any]:
    import grpc

    from gateway.grpc.admin import RELEASE
    from protocol.grpc import Code
    from protocol.grpc.signature import DATE_TIME, sign

    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    metadata = [(DATE_TIME, date_time)]
    if access_key:
        metadata.append((
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders={DATE_TIME},"
            f" Signature={sign(secret_key, date_time)}"))
    request = json.dumps({"group": group, "topic": topic, "message_group": message_group})
    try:
        with grpc.insecure_channel(address) as channel:
            raw = channel.unary_unary(RELEASE)(request.encode(), metadata=metadata,
                                                timeout=10)
    except grpc.RpcError as exc:
        raise click.ClickException(f"{address}: {exc.code().name} {exc.details()}") from None
    answer = json.loads(raw)
    if answer.get("code") != Code.OK:
        raise click.ClickException(f"{address}: {answer.get('message')}")
    return {"group": group, "topic": topic, "message_group": message_group,
            **{k: answer[k] for k in ("queue_id", "offset", "dead_letter_topic")}}


@groups.command("reset")
@data_dir_option
@server_option
@click.argument("group")
@click.argument("topic")
@click.option("--earliest", is_flag=True, help="The oldest message held.")
@click.option("--latest", is_flag=True, help="After the newest (skip everything).")
@click.option("--time", "at", type=click.DateTime(), help="The first message stored at or"
              " after this local time (e.g. 2026-12-07T20:00:00).")
@click.option("--json", "as_json", is_flag=True, help="The new offsets as JSON.")
def reset(data_dir: Path, server: str | None, group: str, topic: str, earliest: bool,
          latest: bool, at: Any, as_json: bool) -> None:
    """Set GROUP's next offset on every queue of TOPIC: --earliest, --latest or --time.
    Through the running gateway (its pop consumers see it at once; stop remoting
    consumers first, they keep their own offsets), or in the store."""
    if sum((earliest, latest, at is not None)) != 1:
        raise click.UsageError("give exactly one of --earliest, --latest, --time")
    position = "earliest" if earliest else "latest" if latest else None
    stamp = int(at.timestamp() * 1000) if at is not None else None
    remote = find_remote(data_dir, server)
    if remote is not None:
        body: dict[str, Any] = {"topic": topic}
        body.update({"position": position} if position else {"timestamp_ms": stamp})
        doc = remote.call("POST", f"/groups/{seg(group)}/reset", body)
        queues = doc["queues"]
    else:
        with open_store(data_dir) as store:
            config = TopicRegistry(store, False, 1).get(topic)
            if config is None:
                raise click.ClickException(f"no RocketMQ topic named {topic!r}")
            offsets = reset_targets(store, config, position, stamp)
            queues = [{"queue_id": int(lmq.rsplit(":", 1)[1]),
                       "old_offset": store.get_offset(group, lmq), "offset": offset}
                      for lmq, offset in offsets.items()]
            if offsets:
                store.commit_offsets(group, offsets)
    if as_json:
        click.echo(json.dumps({"group": group, "topic": topic, "queues": queues}))
        return
    for q in queues:
        old = "-" if q["old_offset"] is None else q["old_offset"]
        click.echo(f"{group} on {topic} queue {q['queue_id']}: {old} -> {q['offset']}")


@groups.command("delete")
@data_dir_option
@server_option
@click.argument("group")
@click.option("--keep-offsets", is_flag=True, help="Keep its committed offsets.")
@click.option("--json", "as_json", is_flag=True, help="What was deleted, as JSON.")
def delete(data_dir: Path, server: str | None, group: str, keep_offsets: bool,
           as_json: bool) -> None:
    """Delete GROUP's configuration and (unless --keep-offsets) its committed offsets."""
    remote = find_remote(data_dir, server)
    if remote is not None:
        doc = remote.call("DELETE", f"/groups/{seg(group)}",
                          keep_offsets="true" if keep_offsets else None)
        removed = doc["offsets_removed"]
    else:
        with open_store(data_dir) as store:
            rows = group_progress(store, group).get(group, [])
            existed = GroupRegistry(store, auto_create=False).delete(group)
            if not existed and not rows:
                raise click.ClickException(f"no consumer group named {group!r}")
            removed = 0 if keep_offsets else len(rows)
            if rows and not keep_offsets:
                store.delete_offsets(group, [r["lmq"] for r in rows])
    if as_json:
        click.echo(json.dumps({"name": group, "deleted": True, "offsets_removed": removed}))
        return
    click.echo(f"deleted group {group}: {removed} committed offset(s) removed")
