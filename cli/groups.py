"""``lmq groups``: RocketMQ consumer groups (:mod:`gateway.rocketmq.groups`) and their
progress: per topic and queue, the committed offset, the queue's max offset and the lag.

A group is listed when it has a configuration (created on first use or by hand) or a
committed offset on a RocketMQ queue LMQ (``rmq:<topic>:<queue>``)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from broker_core import MessageStore
from cli.context import data_dir_option, open_store
from gateway.rocketmq.groups import GroupRegistry
from lmq.rocketmq import LMQ_PREFIX, parse_queue_lmq


@click.group()
def groups() -> None:
    """RocketMQ consumer groups and their lag."""


def _progress(store: MessageStore) -> dict[str, list[dict[str, Any]]]:
    """group -> one row per RocketMQ queue it committed an offset on, by topic and queue."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    maxes: dict[str, int] = {}
    for lmq, group, offset in store.offsets():
        parsed = parse_queue_lmq(lmq) if lmq.startswith(LMQ_PREFIX) else None
        if parsed is None:
            continue
        if lmq not in maxes:
            info = store.lmq(lmq)
            maxes[lmq] = info.max_offset if info else 0
        rows[group].append({
            "topic": parsed[0],
            "queue_id": parsed[1],
            "offset": offset,
            "max_offset": maxes[lmq],
            "lag": max(0, maxes[lmq] - offset),
        })
    for group_rows in rows.values():
        group_rows.sort(key=lambda r: (r["topic"], r["queue_id"]))
    return rows


@groups.command("list")
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(data_dir: Path, as_json: bool) -> None:
    """List consumer groups with their total lag."""
    with open_store(data_dir, read_only=True) as store:
        registry = GroupRegistry(store, auto_create=False)
        progress = _progress(store)
        names = sorted(set(registry.names()) | set(progress))
        if not as_json:
            click.echo(f"{'GROUP':40} {'CONFIGURED':>10} {'RETRIES':>7} {'QUEUES':>6} {'LAG':>9}")
        for name in names:
            config = registry.get(name)
            rows = progress.get(name, [])
            data = {
                "group": name,
                "configured": config is not None,
                "retry_max_times": config.retry_max_times if config else None,
                "consume_enable": config.consume_enable if config else None,
                "topics": sorted({r["topic"] for r in rows}),
                "queues": len(rows),
                "lag": sum(r["lag"] for r in rows),
            }
            if as_json:
                click.echo(json.dumps(data))
            else:
                retries = "-" if config is None else str(config.retry_max_times)
                click.echo(
                    f"{name:40} {'yes' if config else 'no':>10} {retries:>7}"
                    f" {data['queues']:>6} {data['lag']:>9}"
                )
        if not as_json:
            click.echo(f"{len(names)} group(s)")


@groups.command("show")
@data_dir_option
@click.argument("group")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show(data_dir: Path, group: str, as_json: bool) -> None:
    """Show GROUP's committed offset, max offset and lag on each topic and queue."""
    with open_store(data_dir, read_only=True) as store:
        config = GroupRegistry(store, auto_create=False).get(group)
        rows = _progress(store).get(group, [])
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
