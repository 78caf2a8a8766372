"""The ``lmq`` command: one click group, one module per command group."""

from __future__ import annotations

import importlib

import click

# (module, attribute) of each command group; imported lazily so that `lmq --help` and the
# storage commands do not pay for pyspark or the gateway.
_GROUPS: dict[str, tuple[str, str]] = {
    "topics": ("cli.topics", "topics"),
    "offsets": ("cli.offsets", "offsets"),
    "store": ("cli.store", "store"),
    "analyze": ("cli.analyze", "analyze"),
    "serve": ("cli.serve", "serve"),
    "queues": ("cli.queues", "queues"),
    "users": ("cli.users", "users"),
    "vhosts": ("cli.vhosts", "vhosts"),
    "groups": ("cli.groups", "groups"),
    "messages": ("cli.messages", "messages"),
    "transactions": ("cli.transactions", "transactions"),
    "connector": ("cli.connector", "connector"),
    "replication": ("cli.replication", "replication"),
    "connections": ("cli.connections", "connections"),
    "status": ("cli.connections", "status"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_GROUPS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _GROUPS:
            module, attr = _GROUPS[cmd_name]
            try:
                return getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if exc.name == module:
                    return None
                raise
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="lmq-gateway")
def main() -> None:
    """LMQ Gateway: MQTT, AMQP, RocketMQ (remoting, gRPC) and HTTP on a light-message-queue
    store."""
