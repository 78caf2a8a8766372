"""``lmq offsets``: consumer offsets per (group or session, LMQ). ``set`` goes through the
admin API of the gateway running on the data directory (or ``--server``), else opens
the store (docs/operations.md); the rules are :func:`gateway.admin.lmqs.set_offset`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.context import data_dir_option, open_store
from cli.remote import find_remote, seg, server_option
from gateway.admin.lmqs import OffsetError, set_offset


@click.group()
def offsets() -> None:
    """List and set consumer offsets."""


@offsets.command("list")
@data_dir_option
@click.option("--lmq", help="Only this LMQ.")
@click.option("--group", help="Only this consumer group or session.")
def list_(data_dir: Path, lmq: str | None, group: str | None) -> None:
    """List committed offsets with each consumer's lag."""
    with open_store(data_dir, read_only=True) as store:
        click.echo(f"{'GROUP':30} {'LMQ':40} {'OFFSET':>9} {'LAG':>9}")
        n = 0
        maxes: dict[str, int] = {}
        for name, grp, offset in store.offsets(lmq):
            if group is not None and grp != group:
                continue
            if name not in maxes:
                info = store.lmq(name)
                maxes[name] = info.max_offset if info else 0
            click.echo(f"{grp:30} {name:40} {offset:>9} {max(0, maxes[name] - offset):>9}")
            n += 1
        click.echo(f"{n} offset(s)")


@offsets.command("set")
@data_dir_option
@server_option
@click.argument("group")
@click.argument("lmq")
@click.argument("offset", required=False, type=click.IntRange(min=0))
@click.option("--earliest", is_flag=True, help="The LMQ's lowest held offset.")
@click.option("--latest", is_flag=True, help="The LMQ's next offset (skip everything).")
@click.option("--json", "as_json", is_flag=True, help="The old and new offsets as JSON.")
def set_(
    data_dir: Path,
    server: str | None,
    group: str,
    lmq: str,
    offset: int | None,
    earliest: bool,
    latest: bool,
    as_json: bool,
) -> None:
    """Set GROUP's next offset on LMQ: a number, --earliest or --latest. A consumer
    that keeps its position in memory (a connected MQTT session, a RocketMQ 4 remoting
    consumer) commits its own over it: set the offsets of a group that is not
    consuming."""
    if sum((offset is not None, earliest, latest)) != 1:
        raise click.UsageError("give exactly one of OFFSET, --earliest, --latest")
    position = "earliest" if earliest else "latest" if latest else None
    remote = find_remote(data_dir, server)
    if remote is not None:
        body = {"offset": offset} if offset is not None else {"position": position}
        doc = remote.call("PUT", f"/lmqs/{seg(lmq)}/offsets/{seg(group)}", body)
        old, target = doc["old_offset"], doc["offset"]
    else:
        with open_store(data_dir) as store:
            try:
                old, target = set_offset(store, group, lmq, offset, position)
            except OffsetError as exc:
                raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"group": group, "lmq": lmq, "old_offset": old, "offset": target}))
        return
    click.echo(f"{group} on {lmq}: {old if old is not None else '-'} -> {target}")
