"""``lmq queues``: AMQP queues and their depth, read from the store (read-only).

A queue is the LMQ ``amqp:<vhost>:<queue>``; its consumers pop it as the group
``amqp-q`` (see docs/amqp.md). Ready = entries past the group's offset plus requeued
ones; unacked = deliveries in flight. Live consumer counts are in the running
gateway's /metrics (``lmq_amqp_queue_consumers``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.context import data_dir_option, format_bytes, open_store

PREFIX = "amqp:"
GROUP = "amqp-q"


def queue_rows(store) -> list[dict]:  # type: ignore[no-untyped-def]
    durable = {key.split("/", 2)[2] for key, _ in store.iter_meta("amqp/q/")}
    rows = []
    for info in store.lmqs(PREFIX):
        vhost, _, name = info.name[len(PREFIX):].partition(":")
        offset = store.get_offset(GROUP, info.name) or 0
        ready = max(0, info.max_offset - max(offset, info.min_offset))
        ready += store.pop.count_retries(GROUP, info.name)
        rows.append({
            "vhost": vhost, "queue": name, "durable": f"{vhost}\x00{name}" in durable,
            "ready": ready, "unacked": store.pop.inflight_count(GROUP, info.name),
            "bytes": info.bytes, "lmq": info.name,
        })
    return _fold_priority_levels(rows)


def _fold_priority_levels(rows: list[dict]) -> list[dict]:
    """A priority queue's levels are LMQs ``<queue>#p<n>``: count them in the queue."""
    by_name = {(r["vhost"], r["queue"]): r for r in rows}
    out = []
    for row in rows:
        base, sep, level = row["queue"].rpartition("#p")
        parent = by_name.get((row["vhost"], base)) if sep and level.isdigit() else None
        if parent is None:
            out.append(row)
            continue
        for key in ("ready", "unacked", "bytes"):
            parent[key] += row[key]
    return out


@click.group()
def queues() -> None:
    """AMQP queues."""


@queues.command("list")
@data_dir_option
@click.option("--vhost", help="Only queues of this vhost.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(data_dir: Path, vhost: str | None, as_json: bool) -> None:
    """List AMQP queues with their ready and unacknowledged messages."""
    with open_store(data_dir, read_only=True) as store:
        rows = [r for r in queue_rows(store) if vhost is None or r["vhost"] == vhost]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    click.echo(f"{'VHOST':12} {'QUEUE':32} {'DURABLE':8} {'READY':>8} {'UNACKED':>8} "
               f"{'BYTES':>10}")
    for r in rows:
        click.echo(f"{r['vhost']:12} {r['queue']:32} {'yes' if r['durable'] else 'no':8} "
                   f"{r['ready']:>8} {r['unacked']:>8} {format_bytes(r['bytes']):>10}")
    click.echo(f"{len(rows)} queue(s)")
