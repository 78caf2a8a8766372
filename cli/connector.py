"""``lmq connector``: run the message connector, show its status, check a rules file
(docs/connector.md).

- ``lmq connector run --rules connector.toml``: its own process until SIGINT/SIGTERM
  (graceful: each rule ends its batch in flight). Prints ``status HOST:PORT`` (when the
  status listener is on) and ``ready``. Exit status 0 after a signal, 1 when every rule
  stopped on an error, 2 for a bad rules file.
- ``lmq connector status [--url URL] [--json]``: one table (rule, state, lag, delay,
  TPS, last sync, last error) from a running connector's status listener.
- ``lmq connector validate FILE``: check a rules file; the error names the bad key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from gateway.connector.listener import StatusListener
from gateway.connector.rules import Rules, RulesError, load_rules
from gateway.connector.runner import Connector
from gateway.connector.status import register_metrics, render_table
from gateway.logs import configure_logging
from gateway.metrics import Registry

log = logging.getLogger("lmq.connector")

DEFAULT_URL = "http://127.0.0.1:9470"


class BadRules(click.ClickException):
    exit_code = 2


class AllRulesStopped(click.ClickException):
    exit_code = 1


def _load(path: Path) -> Rules:
    try:
        return load_rules(path)
    except RulesError as exc:
        raise BadRules(str(exc)) from None


@click.group()
def connector() -> None:
    """Copy messages between clusters by a rules file (RIP-12)."""


@connector.command()
@click.argument("rules_file", type=click.Path(path_type=Path))
def validate(rules_file: Path) -> None:
    """Check RULES_FILE and name the first bad key."""
    rules = _load(rules_file)
    click.echo(f"{rules_file}: {len(rules.clusters)} clusters, {len(rules.rules)} rules, OK")


@connector.command()
@click.option("--rules", "rules_file", required=True, type=click.Path(path_type=Path))
@click.option(
    "--status-address",
    help="host:port of the status listener, '' for none (overrides the rules file's "
    "status_address; port 0 picks a free one).",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info")  # fmt: skip
def run(rules_file: Path, status_address: str | None, log_format: str, log_level: str) -> None:
    """Run the rules of --rules until SIGINT or SIGTERM."""
    rules = _load(rules_file)
    address = rules.settings.status_address if status_address is None else status_address
    handler = configure_logging(log_format, log_level)
    try:
        stopped_by_signal = asyncio.run(_run(rules, address))
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    finally:
        logging.getLogger().removeHandler(handler)
    if not stopped_by_signal:
        raise AllRulesStopped("every rule stopped on an error (see the log)")


def _dump_tasks() -> None:
    tasks = asyncio.all_tasks()
    print(f"--- {len(tasks)} tasks", file=sys.stderr, flush=True)
    for task in tasks:
        print(f"task {task.get_name()}{' (cancelling)' if task.cancelling() else ''}:",
              file=sys.stderr)
        awaited: object = task.get_coro()
        while awaited is not None:  # the chain of awaits, outermost first
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                print(f"    awaiting {awaited!r}", file=sys.stderr)
                break
            code = frame.f_code
            print(f"    {code.co_filename}:{frame.f_lineno} {code.co_name}", file=sys.stderr)
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    sys.stderr.flush()


async def _run(rules: Rules, status_address: str) -> bool:
    """Run until a signal (True) or until every rule has stopped by itself (False)."""
    conn = Connector(rules)
    registry = Registry()
    register_metrics(registry, conn.stats)
    listener = None
    if status_address:
        host, _, port = status_address.rpartition(":")
        listener = StatusListener(host.strip("[]"), int(port), conn.snapshot, registry)
        bound_host, bound_port = await listener.start()
        click.echo(f"status {bound_host}:{bound_port}")
    loop = asyncio.get_running_loop()
    signalled = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, signalled.set)
    # SIGUSR1: every task's stack to stderr (where a rule is waiting, for a report)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    try:
        conn.start()
        click.echo("ready")
        waiter = asyncio.ensure_future(conn.wait())
        signal_wait = asyncio.ensure_future(signalled.wait())
        await asyncio.wait({waiter, signal_wait}, return_when=asyncio.FIRST_COMPLETED)
        by_signal = signalled.is_set()
        if by_signal:
            log.info("signal received, stopping")
        signal_wait.cancel()
        await conn.stop()
        waiter.cancel()
        # no rule left running by itself: an error, unless they were all disabled
        return by_signal or all(s.state == "disabled" for s in conn.stats)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if listener is not None:
            await listener.close()


def fetch_status(url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        base = "http://" + base
    try:
        with urllib.request.urlopen(base + "/status", timeout=timeout) as response:
            data = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read {base}/status: {exc}") from None
    rules = data.get("rules") if isinstance(data, dict) else None
    if not isinstance(rules, list):
        raise click.ClickException(f"{base}/status: not a connector status")
    return rules


@connector.command()
@click.option("--url", default=DEFAULT_URL, show_default=True,
              help="The connector's status listener.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(url: str, as_json: bool) -> None:
    """Each rule's state, lag, delay, TPS, last sync time and last error."""
    rules = fetch_status(url)
    if as_json:
        click.echo(json.dumps(rules, indent=2))
    else:
        click.echo(render_table(rules))


if __name__ == "__main__":
    connector(prog_name="lmq connector")
