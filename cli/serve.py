"""``lmq serve``: run the gateway until SIGINT or SIGTERM, then shut down gracefully.

Prints one ``listening NAME HOST:PORT`` line per bound listener, then ``ready``; logs go
to stderr. Options come from ``--config FILE`` (TOML, see docs/configuration.md) and the
flags below, flags winning. A port of 0 disables a listener; ``auto`` binds a free port.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from pathlib import Path
from typing import Any

import click

from broker_core import StoreError
from gateway.config import LOG_FORMATS, LOG_LEVELS, OPTIONS, ConfigError, GatewayConfig, load_config
from gateway.logs import configure_logging
from gateway.server import Gateway

log = logging.getLogger("gateway.serve")

#: Young-generation threshold once started (CPython default 700). Sessions, readers and
#: the hot tail made after start-up are not frozen, and every older-generation collection
#: walks them: at 20,000 the topic-scale benchmark (10,100 sessions) had p99 latencies of
#: 218-241 ms from those pauses, at 200,000 53-68 ms (three runs each, same RSS).
GC_THRESHOLD_0 = 200_000


def _checked(key: str) -> Any:
    """A click callback validating a flag with the config option's own checker."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return OPTIONS[key](value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


_FLAGS = {
    "data_dir": "data_dir",
    "bind": "bind",
    "mqtt_port": "mqtt_port",
    "amqp_port": "amqp_port",
    "unified_port": "unified_port",
    "max_connections": "max_connections",
    "connect_timeout": "connect_timeout",
    "durability": "store.durability",
    "log_format": "log_format",
    "log_level": "log_level",
    "mqtts_port": "mqtts_port",
    "amqps_port": "amqps_port",
    "unified_tls_port": "unified_tls_port",
    "remoting_port": "remoting_port",
    "remoting_tls_port": "remoting_tls_port",
    "grpc_port": "grpc_port",
    "grpc_tls_port": "grpc_tls_port",
    "http_port": "http_port",
    "admin_port": "admin_port",
    "advertised_address": "advertised_address",
    "proxy_protocol": "proxy_protocol",
    "proxy_protocol_networks": "proxy_protocol_networks",
    "tls_cert": "tls_cert",
    "tls_key": "tls_key",
    "tls_ca": "tls_ca",
    "tls_client_cert": "tls_client_cert",
    "users_file": "users_file",
    "allow_anonymous": "allow_anonymous",
    "replication_role": "replication_role",
    "replication_group": "replication_group",
    "replication_name": "replication_name",
    "replication_port": "replication_port",
    "replication_master": "replication_master",
    "replication_ack": "replication_ack",
    "replication_etcd": "replication_etcd",
    "replication_lease": "replication_lease",
    "replication_max_lag": "replication_max_lag",
    "replication_min_insync": "replication_min_insync",
}


@click.command("serve")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML configuration file; flags override it.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LMQ_DATA_DIR",
    help="Data directory of the store (env LMQ_DATA_DIR). [default: ./lmq-data]",
)
@click.option("--bind", help="Address every listener binds. [default: 127.0.0.1]")
@click.option(
    "--mqtt-port", callback=_checked("mqtt_port"),
    help="MQTT port; 0 disables, auto picks a free one. [default: 1883]",
)
@click.option(
    "--amqp-port", callback=_checked("amqp_port"),
    help="AMQP port; 0 disables, auto picks a free one. [default: 5672]",
)
@click.option(
    "--unified-port", callback=_checked("unified_port"),
    help="Unified port: MQTT, AMQP, HTTP, RocketMQ remoting and gRPC, told apart by"
    " their first bytes; 0 disables, auto picks a free one. [default: 8080]",
)
@click.option(
    "--max-connections", type=int, callback=_checked("max_connections"),
    help="Open connections allowed in total. [default: 10000]",
)
@click.option(
    "--connect-timeout", type=float, callback=_checked("connect_timeout"),
    help="Seconds a connection has to complete its handshake. [default: 10]",
)
@click.option(
    "--durability", type=click.Choice(["async", "sync"]),
    help="When appends are acknowledged (see docs/configuration.md). [default: async]",
)
@click.option(
    "--mqtts-port", callback=_checked("mqtts_port"),
    help="MQTT over TLS port (needs --tls-cert). [default: 8883]",
)
@click.option(
    "--amqps-port", callback=_checked("amqps_port"),
    help="AMQP over TLS port (needs --tls-cert). [default: 5671]",
)
@click.option(
    "--unified-tls-port", callback=_checked("unified_tls_port"),
    help="Unified port over TLS (needs --tls-cert). [default: 8443]",
)
@click.option(
    "--remoting-port", callback=_checked("remoting_port"),
    help="Dedicated RocketMQ remoting port (the unified port serves remoting too);"
    " e.g. 10911. [default: 0, disabled]",
)
@click.option(
    "--remoting-tls-port", callback=_checked("remoting_tls_port"),
    help="RocketMQ remoting over TLS (needs --tls-cert). [default: 0, disabled]",
)
@click.option(
    "--grpc-port", callback=_checked("grpc_port"),
    help="Dedicated RocketMQ gRPC port (the unified port serves gRPC too); 0 disables."
    " [default: 8081]",
)
@click.option(
    "--grpc-tls-port", callback=_checked("grpc_tls_port"),
    help="RocketMQ gRPC over TLS (needs --tls-cert). [default: 0, disabled]",
)
@click.option(
    "--http-port", callback=_checked("http_port"),
    help="A dedicated HTTP port (the unified ports serve HTTP too). [default: 0, disabled]",
)
@click.option(
    "--admin-port", callback=_checked("admin_port"),
    help="A port for the admin API alone (docs/operations.md; the unified ports serve it"
    " too). [default: 0, disabled]",
)
@click.option(
    "--advertised-address", callback=_checked("advertised_address"),
    help="host:port RocketMQ route replies name. [default: the address connected to]",
)
@click.option(
    "--proxy-protocol", type=click.Choice(["off", "v1", "v2", "any"]),
    help="Expect a PROXY protocol header from --proxy-protocol-networks. [default: off]",
)
@click.option(
    "--proxy-protocol-networks", callback=_checked("proxy_protocol_networks"),
    help="Comma-separated networks (CIDR) PROXY headers are accepted from.",
)
@click.option("--tls-cert", help="PEM certificate chain; enables the TLS listeners.")
@click.option("--tls-key", help="PEM private key (if not in --tls-cert).")
@click.option("--tls-ca", help="PEM CA bundle for client certificates.")
@click.option(
    "--tls-client-cert", type=click.Choice(["none", "optional", "required"]),
    help="Ask for client certificates. [default: none]",
)
@click.option("--users-file", help="Users file (lmq users). [default: DATA_DIR/users.json]")
@click.option(
    "--allow-anonymous", is_flag=True, default=None,
    help="Let clients in without credentials (needed to bind a non-loopback address"
    " without a users file).",
)
@click.option(
    "--replication-role", type=click.Choice(["none", "master", "slave", "auto"]),
    help="A broker group (docs/replication.md): a static pair's master or slave, or auto"
    " (etcd elects). [default: none, one node]",
)
@click.option("--replication-group", help="The broker group's name. [default: broker-a]")
@click.option("--replication-name", help="This member's name. [default: its host:port]")
@click.option(
    "--replication-port", callback=_checked("replication_port"),
    help="The replication listener (slaves connect here); auto picks a free one.",
)
@click.option(
    "--replication-master", callback=_checked("replication_master"),
    help="A static slave's master: host:port of its replication listener.",
)
@click.option(
    "--replication-ack", type=click.Choice(["async", "sync"]),
    help="sync: acknowledged once the in-sync replicas hold a record. [default: async]",
)
@click.option(
    "--replication-etcd", callback=_checked("replication_etcd"),
    help="etcd endpoints (host:port, comma-separated) for --replication-role auto.",
)
@click.option(
    "--replication-lease", type=float, callback=_checked("replication_lease"),
    help="Seconds of the master's lease in etcd. [default: 5]",
)
@click.option(
    "--replication-max-lag", type=float, callback=_checked("replication_max_lag"),
    help="Seconds a slave may lag (or be gone) before it leaves the in-sync set."
    " [default: 15]",
)
@click.option(
    "--replication-min-insync", type=int, callback=_checked("replication_min_insync"),
    help="sync mode: members (the master included) the in-sync set needs; writes are"
    " refused while it has fewer. [default: 1]",
)
@click.option("--log-format", type=click.Choice(LOG_FORMATS), help="[default: text]")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), help="[default: info]")
def serve(config_file: Path | None, **flags: Any) -> None:
    """Run the gateway until SIGINT or SIGTERM: MQTT 3.1, 3.1.1 and 5.0, AMQP 0-9-1,
    RocketMQ remoting and RocketMQ 5 gRPC, and HTTP (the JSON API, the Aliyun MQ HTTP
    API, RIP-17), each on its own port and all on the unified port."""
    try:
        config = load_config(config_file, {_FLAGS[k]: v for k, v in flags.items()})
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    handler = configure_logging(config.log_format, config.log_level)
    try:
        asyncio.run(_run(config))
    except StoreError as exc:
        hint = " (is another gateway running?)" if "in use" in str(exc) else ""
        raise click.ClickException(f"store: {exc}{hint}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        logging.getLogger().removeHandler(handler)


def _tune_gc() -> None:
    """After start-up: move what exists (modules, config, recovered state) out of the
    collector's sight, and collect the young generation less often. Every message makes
    short-lived objects and the gateway keeps many long-lived ones (sessions, the hot
    tail, LMQ metadata), so the default thresholds spend a measurable share of the CPU
    re-scanning the latter."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD_0, 50, 100)


async def _run(config: GatewayConfig) -> None:
    gateway = Gateway(config)
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal(sig: signal.Signals) -> None:
        log.info("signal received, stopping", extra={"signal": sig.name})
        gateway.request_stop()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)

    def on_promote() -> None:  # `lmq replication promote` (a static pair)
        if gateway.replication is None:
            log.warning("promote: this gateway is not in a broker group")
            return
        gateway.spawn(_promote(gateway), "replication-promote")

    loop.add_signal_handler(signal.SIGUSR2, on_promote)
    try:
        await gateway.start()
        if os.environ.get("LMQ_GC_TUNE", "1") != "0":
            _tune_gc()
        for bound in gateway.listeners:
            click.echo(f"listening {bound.name} {bound.address}")
        click.echo("ready")
        await gateway.wait_stopped()
        await gateway.stop()
    finally:
        for sig in (*signals, signal.SIGUSR2):
            loop.remove_signal_handler(sig)


async def _promote(gateway: Gateway) -> None:
    assert gateway.replication is not None
    try:
        epoch = await gateway.replication.promote()
    except Exception as exc:
        log.warning("promote refused: %s", exc)
        return
    log.info("promoted: master of epoch %d", epoch)


if __name__ == "__main__":
    serve(prog_name="lmq serve")
