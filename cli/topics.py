"""``lmq topics``: list, inspect and clean LMQs (topics, filters, queues), and create,
show and delete RocketMQ topics (:mod:`cli.rmq_topics`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from cli import rmq_topics
from cli.context import Duration, data_dir_option, format_age, format_bytes, open_store
from cli.remote import find_remote, server_option
from gateway.topic_space import mqtt_lmq


@click.group()
def topics() -> None:
    """List, inspect and clean up LMQs; create, show and delete RocketMQ topics."""


topics.add_command(rmq_topics.create)
topics.add_command(rmq_topics.delete)


def _select(store, prefix: str, idle_ms: int | None):  # type: ignore[no-untyped-def]
    now = int(time.time() * 1000)
    for info in store.lmqs(prefix):
        if idle_ms is not None:
            last = max(info.last_write_ms, info.touched_ms, info.created_ms)
            if last >= now - idle_ms:
                continue
        yield info


@topics.command("list")
@data_dir_option
@click.option("--prefix", default="", help="Only LMQs whose name starts with this.")
@click.option("--idle-longer-than", "idle", type=Duration(), help="e.g. 7d, 12h, 30m.")
@click.option("--limit", type=click.IntRange(min=1), help="Show at most this many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(data_dir: Path, prefix: str, idle: int | None, limit: int | None, as_json: bool) -> None:
    """List LMQs with their depth, offsets and last write."""
    with open_store(data_dir, read_only=True) as store:
        shown = 0
        if not as_json:
            click.echo(
                f"{'NAME':40} {'MESSAGES':>9} {'MIN':>9} {'MAX':>9} {'BYTES':>10}  LAST WRITE"
            )
        for info in _select(store, prefix, idle):
            if as_json:
                click.echo(json.dumps(_info_dict(info)))
            else:
                click.echo(
                    f"{info.name:40} {info.messages:>9} {info.min_offset:>9} {info.max_offset:>9}"
                    f" {format_bytes(info.bytes):>10}  {format_age(info.last_write_ms)}"
                )
            shown += 1
            if limit and shown >= limit:
                break
        if not as_json:
            click.echo(f"{shown} LMQ(s)")


def _info_dict(info) -> dict:  # type: ignore[no-untyped-def]
    return {
        "name": info.name,
        "id": info.id,
        "messages": info.messages,
        "min_offset": info.min_offset,
        "max_offset": info.max_offset,
        "bytes": info.bytes,
        "created_ms": info.created_ms,
        "last_write_ms": info.last_write_ms,
        "touched_ms": info.touched_ms,
    }


@topics.command("show")
@data_dir_option
@click.argument("name")
@click.option("--lmq", "as_lmq", is_flag=True, help="Show the LMQ NAME even if a RocketMQ"
              " topic has that name.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show(data_dir: Path, name: str, as_lmq: bool, as_json: bool) -> None:
    """Show RocketMQ topic NAME (configuration, each queue's offsets), or else the LMQ
    NAME and the offsets committed on it. An MQTT filter may be given as written
    ('sensors/#' for the LMQ mqtt:sensors/#)."""
    with open_store(data_dir, read_only=True) as store:
        if not as_lmq and rmq_topics.show_topic(store, name, as_json):
            return
        info = store.lmq(name)
        if info is None and store.lmq(mqtt_lmq(name)) is not None:
            name = mqtt_lmq(name)  # an MQTT filter as users write it: 'sensors/#'
            info = store.lmq(name)
        if info is None:
            raise click.ClickException(
                f"no LMQ named {name!r} or {mqtt_lmq(name)!r} (and no RocketMQ topic); LMQs"
                " are named mqtt:<filter>, amqp:<vhost>:<queue>, rmq:<topic>:<queue>"
                " (lmq topics list shows them)"
            )
        if as_json:
            data = _info_dict(info)
            data["consumers"] = [
                {"group": group, "offset": offset, "lag": max(0, info.max_offset - offset)}
                for _, group, offset in store.offsets(name)
            ]
            click.echo(json.dumps(data))
            return
        click.echo(f"name:        {info.name}")
        click.echo(f"id:          {info.id}")
        click.echo(f"messages:    {info.messages}")
        click.echo(f"offsets:     {info.min_offset} .. {info.max_offset} (min .. next)")
        click.echo(f"bytes:       {info.bytes} ({format_bytes(info.bytes)})")
        click.echo(f"created:     {format_age(info.created_ms)}")
        click.echo(f"last write:  {format_age(info.last_write_ms)}")
        click.echo(f"last commit: {format_age(info.touched_ms)}")
        consumers = list(store.offsets(name))
        click.echo(f"consumers:   {len(consumers)}")
        for _, group, offset in consumers:
            click.echo(f"  {group}: offset {offset}, lag {max(0, info.max_offset - offset)}")


@topics.command("clean")
@data_dir_option
@server_option
@click.option("--prefix", default="", help="Only LMQs whose name starts with this.")
@click.option("--idle-longer-than", "idle", type=Duration(), help="e.g. 7d, 12h, 30m.")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@click.option("--json", "as_json", is_flag=True, help="What was (or would be) removed, as JSON.")
def clean(data_dir: Path, server: str | None, prefix: str, idle: int | None,
          dry_run: bool, as_json: bool) -> None:
    """Remove LMQs (entries, offsets, pop state) by prefix and/or idleness.

    An LMQ is idle when nothing was written to it and no consumer committed an offset on
    it for the given time. At least one of --prefix and --idle-longer-than is required.
    """
    if not prefix and idle is None:
        raise click.UsageError("give --prefix and/or --idle-longer-than (refusing to remove all)")
    remote = find_remote(data_dir, server)
    if remote is not None:
        body: dict[str, object] = {"prefix": prefix, "dry_run": dry_run}
        if idle is not None:
            body["idle_ms"] = idle
        doc = remote.call("POST", "/lmqs/clean", body)
    else:
        with open_store(data_dir, read_only=dry_run) as store:
            doomed = list(_select(store, prefix, idle))
            doc = {
                "dry_run": dry_run,
                "lmqs": len(doomed),
                "messages": sum(i.messages for i in doomed),
                "bytes": sum(i.bytes for i in doomed),
                "items": [{"name": i.name, "messages": i.messages} for i in doomed],
            }
            if not dry_run and doomed:
                with click.progressbar(length=len(doomed), label="removing LMQs") as bar:
                    report = store.remove_lmqs([i.name for i in doomed], progress=bar.update)
                doc["removed"] = {"lmqs": report.lmqs, "messages": report.entries,
                                  "bytes": report.bytes, "offsets": report.offsets}
    if as_json:
        click.echo(json.dumps(doc))
    elif dry_run:
        for item in doc["items"]:
            click.echo(f"would remove {item['name']} ({item['messages']} messages)")
        click.echo(f"dry run: {doc['lmqs']} LMQ(s), {doc['messages']} messages,"
                   f" {format_bytes(doc['bytes'])} would be removed")
    else:
        done = doc.get("removed") or {"lmqs": 0, "messages": 0, "bytes": 0, "offsets": 0}
        click.echo(f"removed {done['lmqs']} LMQ(s): {done['messages']} messages,"
                   f" {format_bytes(done['bytes'])}, {done['offsets']} consumer offset(s)")
