"""``lmq replication``: a broker group's manual commands (docs/replication.md)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from broker_core.errors import StoreError
from broker_core.replication import load_epochs
from cli.context import data_dir_option


@click.group("replication")
def replication() -> None:
    """A broker group of a master and slaves (docs/replication.md)."""


@replication.command("promote")
@click.option(
    "--pid",
    type=int,
    required=True,
    help="The process id of the slave's `lmq serve` (its /health says it).",
)
def promote(pid: int) -> None:
    """Make a static pair's slave the master of a new epoch (RocketMQ's classic
    master/slave switch). Stop the old master first: without etcd nothing fences it.
    The gateway logs `promoted: master of epoch N`; its /health then says master."""
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        raise click.ClickException(f"no process {pid}") from None
    except PermissionError:
        raise click.ClickException(f"not allowed to signal process {pid}") from None
    click.echo(f"asked process {pid} to take over as master")


@replication.command("epochs")
@data_dir_option
def epochs(data_dir: Path) -> None:
    """The epoch history kept beside the commit log: one `epoch start` line per master
    epoch whose records the log holds."""
    try:
        entries = load_epochs(data_dir, 2**63)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if not entries:
        click.echo("no epoch history (never in a broker group)")
    for entry in entries:
        click.echo(f"epoch {entry.epoch} from position {entry.start}")
