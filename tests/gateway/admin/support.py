"""Helpers of the admin API tests: a running ``lmq serve`` (with its admin port) and
a small HTTP client for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests

from gateway.auth.passwords import hash_password
from gateway.auth.users import UsersDatabase

from ..gateway_process import GatewayProcess

TIMEOUT = 10.0


def admin_gateway(data_dir: Path, *extra: str) -> GatewayProcess:
    return GatewayProcess(data_dir, "--admin-port", "auto", *extra)


def write_users(path: Path, users: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    """A users file: name -> (password, tags) (a cheap scrypt, for tests)."""
    db = UsersDatabase()
    for name, (password, tags) in users.items():
        db.add_user(name, hash_password(password, n=16, r=1, p=1), tags)
    db.save(path)


class AdminClient:
    def __init__(self, port: int, auth: tuple[str, str] | None = None) -> None:
        self.base = f"http://127.0.0.1:{port}/v1/admin"
        self.session = requests.Session()
        self.session.auth = auth

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> requests.Response:
        return self.session.request(
            method,
            self.base + path,
            params=params or None,
            data=None if body is None else json.dumps(body),
            headers={"content-type": "application/json"} if body is not None else None,
            timeout=TIMEOUT,
        )

    def get(self, path: str, **params: Any) -> Any:
        response = self.call("GET", path, **params)
        assert response.status_code == 200, response.text
        return response.json()

    def close(self) -> None:
        self.session.close()


def audit_lines(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / "audit.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
