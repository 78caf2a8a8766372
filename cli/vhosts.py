"""``lmq vhosts``: AMQP virtual hosts in the users file. ``/`` always exists."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.users import editing, reading, users_file_options


@click.group()
def vhosts() -> None:
    """Manage AMQP virtual hosts."""


@vhosts.command("add")
@users_file_options
@click.argument("name")
@click.option("--description", default="", help="A note for people.")
def add(path: Path, name: str, description: str) -> None:
    """Add vhost NAME (grant access with 'lmq users set-permissions --vhost NAME')."""
    with editing(path) as db:
        db.add_vhost(name, description)
    click.echo(f"added vhost {name}")


@vhosts.command("delete")
@users_file_options
@click.argument("name")
def delete(path: Path, name: str) -> None:
    """Delete vhost NAME and every permission on it."""
    with editing(path) as db:
        db.delete_vhost(name)
    click.echo(f"deleted vhost {name}")


@vhosts.command("list")
@users_file_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(path: Path, as_json: bool) -> None:
    """List vhosts with the users that have permissions on them."""
    db = reading(path)
    if not as_json:
        click.echo(f"{'NAME':24} {'USERS':>5}  DESCRIPTION")
    for name, description in sorted(db.vhosts.items()):
        users = sorted(u for u, per_vhost in db.permissions.items() if name in per_vhost)
        if as_json:
            click.echo(json.dumps({"name": name, "description": description, "users": users}))
        else:
            click.echo(f"{name:24} {len(users):>5}  {description or '-'}")
