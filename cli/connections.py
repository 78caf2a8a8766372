"""``lmq connections`` and ``lmq status``: views of a running gateway only (through its
admin API, :mod:`cli.remote`); with none running they say so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.context import data_dir_option, format_bytes
from cli.remote import online_only, server_option


@click.group()
def connections() -> None:
    """The running gateway's connections: list, close."""


@connections.command("list")
@data_dir_option
@server_option
@click.option("--protocol", help="Only this protocol (mqtt, amqp, http, remoting, grpc).")
@click.option("--filter", "wanted", help="A substring of the id, peer, client id or user.")
@click.option(
    "--sort",
    default="id",
    show_default=True,
    help="id, protocol, peer, client_id, user, bytes_in, bytes_out, messages_in,"
    " messages_out, age_seconds;"
    " -FIELD descending.",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(
    data_dir: Path,
    server: str | None,
    protocol: str | None,
    wanted: str | None,
    sort: str,
    limit: int,
    as_json: bool,
) -> None:
    """List connections (one page: --limit, sorted and filtered by the gateway)."""
    remote = online_only(data_dir, server, "lmq connections list")
    doc = remote.call(
        "GET", "/connections", protocol=protocol, filter=wanted, sort=sort, limit=limit
    )
    if not as_json:
        click.echo(
            f"{'ID':>7} {'PROTOCOL':9} {'PEER':22} {'CLIENT ID':24} {'USER':12}"
            f" {'IN':>10} {'OUT':>10} {'MSGS IN':>9} {'MSGS OUT':>9} {'AGE':>8}"
        )
    for c in doc["items"]:
        if as_json:
            click.echo(json.dumps(c))
        else:
            click.echo(
                f"{c['id']:>7} {c['protocol']:9} {c['peer']:22}"
                f" {c['client_id'] or '-':24} {c['user'] or '-':12}"
                f" {format_bytes(c['bytes_in']):>10} {format_bytes(c['bytes_out']):>10}"
                f" {c['messages_in']:>9} {c['messages_out']:>9}"
                f" {c['age_seconds']:>7.0f}s"
            )
    if not as_json:
        more = " (more: raise --limit or filter)" if doc["next"] else ""
        click.echo(f"{len(doc['items'])} of {doc['total']} connection(s){more}")


@connections.command("close")
@data_dir_option
@server_option
@click.argument("connection_id", type=int)
def close(data_dir: Path, server: str | None, connection_id: int) -> None:
    """Close connection CONNECTION_ID (as listed)."""
    remote = online_only(data_dir, server, "lmq connections close")
    remote.call("DELETE", f"/connections/{connection_id}")
    click.echo(f"closing connection {connection_id}")


@click.command("status")
@data_dir_option
@server_option
@click.option("--json", "as_json", is_flag=True, help="The overview as JSON.")
def status(data_dir: Path, server: str | None, as_json: bool) -> None:
    """The running gateway at a glance: version, uptime, connections, rates, store."""
    remote = online_only(data_dir, server, "lmq status")
    doc = remote.call("GET", "/overview")
    if as_json:
        click.echo(json.dumps(doc))
        return
    conns = doc["connections"]
    store = doc["store"]
    click.echo(
        f"gateway {doc['version']}: {doc['status']}, up {doc['uptime_seconds']:.0f} s,"
        f" authentication {doc['authentication']}"
    )
    by = ", ".join(f"{k} {v}" for k, v in sorted(conns["by_protocol"].items())) or "none"
    click.echo(f"connections: {conns['total']} ({by})")
    for side in ("in", "out"):
        rates = ", ".join(f"{k} {v:g}/s" for k, v in sorted(doc["rates"][side].items()))
        click.echo(f"messages {side}: {rates or 'no rate yet (one sample every 5 s)'}")
    click.echo(
        f"store: {format_bytes(store['bytes'] or 0)} in {store['segments']}"
        f" segment(s), {store['lmqs']} LMQ(s)"
    )
    proc = doc["process"]
    click.echo(
        f"process {proc['pid']}: {format_bytes(proc['rss_bytes'] or 0)} resident,"
        f" {proc['open_files']} open files"
    )
