"""``lmq vhosts``: AMQP virtual hosts in the users file. ``/`` always exists. Through
the running gateway's admin API when there is one, as ``lmq users`` (:mod:`cli.users`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.remote import Remote, seg
from cli.users import change, reading, users_file_options
from gateway.auth.users import vhost_rows


@click.group()
def vhosts() -> None:
    """Manage AMQP virtual hosts."""


@vhosts.command("add")
@users_file_options
@click.argument("name")
@click.option("--description", default="", help="A note for people.")
def add(path: Path, remote: Remote | None, name: str, description: str) -> None:
    """Add vhost NAME (grant access with 'lmq users set-permissions --vhost NAME')."""
    request = ("PUT", f"/vhosts/{seg(name)}", {"description": description})
    change(path, remote, request, lambda db: db.add_vhost(name, description))
    click.echo(f"added vhost {name}")


@vhosts.command("delete")
@users_file_options
@click.argument("name")
def delete(path: Path, remote: Remote | None, name: str) -> None:
    """Delete vhost NAME and every permission on it."""
    change(path, remote, ("DELETE", f"/vhosts/{seg(name)}", None), lambda db: db.delete_vhost(name))
    click.echo(f"deleted vhost {name}")


@vhosts.command("list")
@users_file_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(path: Path, remote: Remote | None, as_json: bool) -> None:
    """List vhosts with the users that have permissions on them."""
    rows = (
        remote.call("GET", "/vhosts")["items"] if remote is not None else vhost_rows(reading(path))
    )
    if not as_json:
        click.echo(f"{'NAME':24} {'USERS':>5}  DESCRIPTION")
    for row in rows:
        if as_json:
            click.echo(json.dumps(row))
        else:
            click.echo(f"{row['name']:24} {len(row['users']):>5}  {row['description'] or '-'}")
