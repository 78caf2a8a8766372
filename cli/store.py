"""``lmq store``: verify, rebuild the index, statistics."""

from __future__ import annotations

import json
from pathlib import Path

import click

from broker_core import StoreConfig
from cli.context import data_dir_option, format_bytes, open_store


@click.group()
def store() -> None:
    """Check and repair the storage engine."""


@store.command("verify")
@data_dir_option
@click.option("--log-only", is_flag=True, help="Check the log's records, not the index.")
def verify_cmd(data_dir: Path, log_only: bool) -> None:
    """Check every record's CRC and position, and the index against the log."""
    with open_store(data_dir, read_only=True) as s:
        report = s.verify(check_index=not log_only)
    click.echo(
        f"{report.records} records, {format_bytes(report.bytes)},"
        f" {report.entries_checked} index entries checked"
    )
    for problem in report.problems:
        click.echo(f"problem: {problem}", err=True)
    if not report.ok:
        raise click.ClickException(
            f"{len(report.problems)} problem(s) found; `lmq store rebuild-index` repairs the"
            " index (not a damaged log)"
        )
    click.echo("ok")


@store.command("rebuild-index")
@data_dir_option
@click.option(
    "--on-corrupt",
    type=click.Choice(["refuse", "skip"]),
    default="refuse",
    show_default=True,
    help="Damaged records: stop, or step over them (reported) and index the rest.",
)
def rebuild_cmd(data_dir: Path, on_corrupt: str) -> None:
    """Drop the consume-queue index and rebuild it from the commit log alone. Offline
    only: with a gateway running on the data directory it says so and does nothing."""
    with open_store(data_dir, config=StoreConfig(on_corrupt=on_corrupt)) as s:
        report = s.rebuild_index()
    click.echo(f"rebuilt: {report.summary()}")


@store.command("stats")
@data_dir_option
@click.option("--json", "as_json", is_flag=True)
def stats_cmd(data_dir: Path, as_json: bool) -> None:
    """Sizes and counts of the log, the index and the LMQs."""
    with open_store(data_dir, read_only=True) as s:
        stats = s.stats()
    if as_json:
        click.echo(json.dumps(stats))
        return
    width = max(map(len, stats), default=0)
    for key, value in stats.items():
        click.echo(f"{key:{width}}  {value}")
