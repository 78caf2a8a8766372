"""What every ``lmq`` command shares: the data-dir option, opening the store with
one-line errors, and parsing of durations and sizes."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from broker_core import MessageStore, StoreConfig, StoreError
from cli.remote import find_remote

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("./lmq-data"),
    show_default=True,
    envvar="LMQ_DATA_DIR",
    help="The gateway's data directory (env LMQ_DATA_DIR).",
)

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration_ms(text: str) -> int:
    """``7d``, ``12h``, ``30m``, ``45s``, ``250ms``, ``2w``; a bare number is seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (examples: 30s, 15m, 12h, 7d)")
    value, unit = match.groups()
    return int(float(value) * _UNITS_MS[unit or "s"])


class Duration(click.ParamType):
    """A click parameter holding a duration in milliseconds."""

    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def format_age(ms_then: int, now_ms: int | None = None) -> str:
    if not ms_then:
        return "-"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    secs = max(0, (now - ms_then) // 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return f"{secs}s ago"


def format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@contextmanager
def open_store(
    data_dir: Path, *, read_only: bool = False, config: StoreConfig | None = None,
    create: bool = False,
) -> Iterator[MessageStore]:
    """Open the store for a command; any store error becomes a one-line message.
    ``create``: a data directory the gateway never opened gets a new, empty store (a
    topic can be prepared before the first start); otherwise it is refused."""
    config = config or StoreConfig()
    if not create and not (data_dir / "commitlog").is_dir():
        raise click.ClickException(f"{data_dir} holds no LMQ store (no commitlog/ directory)")
    try:
        store = (
            MessageStore.open_read_only(data_dir, config)
            if read_only
            else MessageStore.open(data_dir, config)
        )
    except StoreError as exc:
        message = str(exc)
        if "in use" in message and not read_only:
            if find_remote(data_dir, None) is not None:  # it has an admin API: no online form
                # the store's own message ends "(stop the gateway first)": say why instead
                message = message.removesuffix(" (stop the gateway first)") + (
                    " (a gateway runs on it: this command works offline only;"
                    " stop the gateway first)")
        raise click.ClickException(message) from None
    try:
        yield store
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
