"""The ``lmq`` CLI against a running gateway: its operator commands go through the admin
API (docs/operations.md) when a gateway serves the data directory, and open the store
themselves when none does.

Which gateway: ``--server URL`` (or ``LMQ_SERVER``), which must answer; else the address
the gateway recorded in ``<data_dir>/admin.json`` at start
(:mod:`gateway.admin.address`), if it answers (a file left by a gateway that died is
ignored: nothing listens there). Credentials: ``LMQ_ADMIN_USER`` and
``LMQ_ADMIN_PASSWORD`` (HTTP Basic, a user tagged administrator); none in open mode,
where the gateway answers loopback callers.

Errors are one line (the API's problem detail, with the field at fault), exit code 1,
as offline.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import click

from gateway.admin.address import read_address
from gateway.admin.core import PREFIX

__all__ = ["Remote", "find_remote", "seg", "server_option"]

#: Seconds a call may take.
TIMEOUT = 30.0
#: Seconds the probe of a recorded address may take.
PROBE = 1.0

server_option = click.option(
    "--server",
    envvar="LMQ_SERVER",
    metavar="URL",
    help="A running gateway's admin API (http://host:port; env LMQ_SERVER). Default: the"
    " gateway running on --data-dir, if any; else the store is opened directly.",
)


def seg(text: str) -> str:
    """``text`` as one path segment."""
    return quote(text, safe="")


class Remote:
    """The admin API of one running gateway."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        user = os.environ.get("LMQ_ADMIN_USER")
        password = os.environ.get("LMQ_ADMIN_PASSWORD", "")
        self._auth = None
        if user:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._auth = f"Basic {token}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, **query: Any) -> Any:
        """The answer's JSON; a refusal or an unreachable gateway is a one-line
        :class:`click.ClickException`."""
        params = {k: v for k, v in query.items() if v is not None}
        url = self.url + PREFIX + path + (f"?{urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        if self._auth:
            request.add_header("authorization", self._auth)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise click.ClickException(_problem(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise click.ClickException(f"{self.url}: {reason}") from None


def _problem(exc: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(exc.read())
    except ValueError:
        return f"{exc.code} {exc.reason}"
    detail = doc.get("detail") or doc.get("title") or str(exc.code)
    if exc.code == 401:
        detail += " (set LMQ_ADMIN_USER and LMQ_ADMIN_PASSWORD)"
    return str(detail)


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 80), timeout=PROBE
        ):
            return True
    except OSError:
        return False


def find_remote(data_dir: Path, server: str | None) -> Remote | None:
    """The running gateway to ask (``server``, or the one recorded in ``data_dir`` if
    it answers), or None: work offline."""
    if server:
        return Remote(server if "://" in server else f"http://{server}")
    url = read_address(data_dir)
    if url is not None and _answers(url):
        return Remote(url)
    return None


def online_only(data_dir: Path, server: str | None, what: str) -> Remote:
    """The running gateway, or a one-line error: ``what`` needs one."""
    remote = find_remote(data_dir, server)
    if remote is None:
        raise click.ClickException(
            f"{what} needs a running gateway (none runs on {data_dir}; give --server)"
        )
    return remote


Echo = Callable[[str], None]
