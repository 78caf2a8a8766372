"""``lmq transactions``: half messages of transactional sends not yet committed or rolled
back (:mod:`broker_core.transactions`), read from the store: for how long each has been
pending, its producer group, how many check-backs it had and when the next one is due.

Read-only: it opens the store beside a running gateway and shows the state as of the
index's last write (stop the gateway for an exact picture)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from broker_core import PendingTransaction
from broker_core.clock import now_ms
from cli.context import data_dir_option, open_store


@click.group()
def transactions() -> None:
    """Pending transactional (half) messages."""


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _age(ms: int) -> str:
    secs = max(0, ms // 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _row(txn: PendingTransaction, now: int) -> dict[str, Any]:
    return {
        "position": txn.position,
        "producer_group": txn.group,
        "topic": txn.topic,
        "lmqs": list(txn.lmqs),
        "born": _time(txn.born_ms),
        "stored": _time(txn.store_ms),
        "pending_ms": txn.age_ms(now),
        "checks": txn.checks,
        "next_check": _time(txn.next_check_ms),
        "next_check_in_ms": txn.next_check_ms - now,
        "body_bytes": txn.body_size,
    }


@transactions.command("list")
@data_dir_option
@click.option("--group", default=None, help="Only this producer group.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(data_dir: Path, group: str | None, as_json: bool) -> None:
    """List pending half messages, oldest first, with how long each has been pending."""
    now = now_ms()
    with open_store(data_dir, read_only=True) as store:
        rows = [_row(t, now) for t in store.txns.iter_pending()
                if group is None or t.group == group]
    if not as_json:
        click.echo(f"{'POSITION':>12} {'PRODUCER GROUP':24} {'TOPIC':24} {'PENDING':>8}"
                   f" {'CHECKS':>6} {'NEXT CHECK':>10}")
    for r in rows:
        if as_json:
            click.echo(json.dumps(r))
            continue
        nxt = r["next_check_in_ms"]
        due = "due" if nxt <= 0 else f"in {_age(nxt)}"
        click.echo(f"{r['position']:>12} {r['producer_group']:24} {r['topic']:24}"
                   f" {_age(r['pending_ms']):>8} {r['checks']:>6} {due:>10}")
    if not as_json:
        click.echo(f"{len(rows)} pending transaction(s)")


@transactions.command("show")
@data_dir_option
@click.argument("position", type=int)
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show(data_dir: Path, position: int, as_json: bool) -> None:
    """Show the half message at POSITION (its transaction id): pending, or how it ended."""
    now = now_ms()
    with open_store(data_dir, read_only=True) as store:
        txn = store.txns.pending.get(position)
        ended = None if txn is not None else store.transaction_outcome(position)
    if txn is None:
        if ended is None:
            raise click.ClickException(f"no transaction (half message) at position {position}")
        state = ended.value.removeprefix("already_")
        click.echo(json.dumps({"position": position, "state": state}) if as_json
                   else f"position: {position}\nstate:    {state}")
        return
    row = _row(txn, now)
    if as_json:
        click.echo(json.dumps({**row, "state": "pending"}))
        return
    click.echo(f"position:       {position}")
    click.echo("state:          pending")
    click.echo(f"producer group: {row['producer_group']}")
    click.echo(f"topic:          {row['topic']}")
    click.echo(f"lmqs:           {', '.join(row['lmqs'])}")
    click.echo(f"born:           {row['born']}")
    click.echo(f"stored:         {row['stored']} (pending for {_age(row['pending_ms'])})")
    click.echo(f"checks:         {row['checks']}")
    click.echo(f"next check:     {row['next_check']}")
    click.echo(f"body:           {row['body_bytes']} bytes")
