"""``lmq offsets``: consumer offsets per (group or session, LMQ)."""

from __future__ import annotations

from pathlib import Path

import click

from cli.context import data_dir_option, open_store


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
@click.argument("group")
@click.argument("lmq")
@click.argument("offset", required=False, type=click.IntRange(min=0))
@click.option("--earliest", is_flag=True, help="The LMQ's lowest held offset.")
@click.option("--latest", is_flag=True, help="The LMQ's next offset (skip everything).")
def set_(
    data_dir: Path, group: str, lmq: str, offset: int | None, earliest: bool, latest: bool
) -> None:
    """Set GROUP's next offset on LMQ: a number, --earliest or --latest."""
    if sum((offset is not None, earliest, latest)) != 1:
        raise click.UsageError("give exactly one of OFFSET, --earliest, --latest")
    with open_store(data_dir) as store:
        info = store.lmq(lmq)
        if info is None:
            raise click.ClickException(f"no LMQ named {lmq!r}")
        target = info.min_offset if earliest else info.max_offset if latest else offset
        assert target is not None
        if target > info.max_offset:
            raise click.ClickException(
                f"offset {target} is past the end of {lmq!r} (next offset {info.max_offset})"
            )
        old = store.get_offset(group, lmq)
        store.commit_offset(group, lmq, target)
        click.echo(f"{group} on {lmq}: {old if old is not None else '-'} -> {target}")
