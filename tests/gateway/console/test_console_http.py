"""The console's HTTP side (gateway/http/console/) on a real ``lmq serve`` with a users
file: the assets (content types, ETag revalidation, the security headers, nothing else
served), and the login: a gateway user tagged administrator gets a session cookie
(HttpOnly, SameSite=Strict) and a CSRF token; a wrong password, a user without the tag
and a form without a field are refused with a clear message; a change without the
session's token, or from another site, is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from cli.main import main

from ..gateway_process import GatewayProcess

BOUND = 10.0


def lmq(*args: str) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("console") / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "root", "--password", "pw", "--tag", "administrator", *d)
    lmq("users", "add", "app", "--password", "pw", *d)
    gw = GatewayProcess(data).start()
    try:
        yield f"http://127.0.0.1:{gw.ports['unified']}"
    finally:
        gw.stop()


def test_assets(base: str) -> None:
    r = requests.get(base + "/console", allow_redirects=False, timeout=BOUND)
    assert r.status_code == 301 and r.headers["Location"] == "/console/"
    index = requests.get(base + "/console/", timeout=BOUND)
    assert index.status_code == 200
    assert index.headers["Content-Type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="app.js">' in index.text
    csp = index.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert index.headers["X-Content-Type-Options"] == "nosniff"
    for name, kind in (
        ("app.js", "text/javascript"),
        ("console.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ):
        r = requests.get(f"{base}/console/{name}", timeout=BOUND)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(kind), name
        assert r.headers["Cache-Control"] == "no-cache"
        again = requests.get(
            f"{base}/console/{name}", timeout=BOUND, headers={"If-None-Match": r.headers["ETag"]}
        )
        assert again.status_code == 304 and again.content == b""
    for missing in ("/console/nope.js", "/console/..%2Fserver.py", "/console/static"):
        assert requests.get(base + missing, timeout=BOUND).status_code == 404, missing


def test_login_session_and_csrf(base: str) -> None:
    url = base + "/console/session"
    assert requests.get(url, timeout=BOUND).status_code == 401
    wrong = requests.post(url, json={"username": "root", "password": "nope"}, timeout=BOUND)
    assert wrong.status_code == 401 and wrong.json()["detail"] == "wrong user name or password"
    missing = requests.post(url, json={"username": "root"}, timeout=BOUND)
    assert missing.status_code == 400 and missing.json()["field"] == "password"
    not_admin = requests.post(url, json={"username": "app", "password": "pw"}, timeout=BOUND)
    assert not_admin.status_code == 403
    assert not_admin.json()["detail"] == "user 'app' is not tagged administrator"
    forged = requests.post(
        url,
        json={"username": "root", "password": "pw"},
        timeout=BOUND,
        headers={"Origin": "http://evil.example"},
    )
    assert forged.status_code == 403

    s = requests.Session()
    r = s.post(url, json={"username": "root", "password": "pw"}, timeout=BOUND)
    assert r.status_code == 200, r.text
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("lmq_session=") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie and "Path=/" in cookie
    token = r.json()["csrf_token"]
    assert token and token not in cookie
    again = s.get(url, timeout=BOUND)
    assert again.json() == {"mode": "users", "user": "root", "csrf_token": token}
    # a change with the cookie but without the session's token is refused
    assert s.delete(url, timeout=BOUND).status_code == 403
    assert s.delete(url, headers={"X-CSRF-Token": "x" + token}, timeout=BOUND).status_code == 403
    assert s.delete(url, headers={"X-CSRF-Token": token}, timeout=BOUND).status_code == 204
    assert s.get(url, timeout=BOUND).status_code == 401  # logged out


def test_open_mode_console_and_cross_site_changes(tmp_path: Path) -> None:
    """Open mode (no users file, loopback): the console needs no login, and the admin
    API still refuses a change a browser marks as sent by another site's page (any page
    the operator's browser visits could otherwise post to it); the CLI's calls, which
    carry neither header, pass."""
    gw = GatewayProcess(tmp_path / "data").start()
    try:
        base = f"http://127.0.0.1:{gw.ports['unified']}"
        doc = requests.get(base + "/console/session", timeout=BOUND).json()
        assert doc == {"mode": "open", "user": "anonymous", "csrf_token": ""}
        url = base + "/v1/admin/topics/from-evil"
        for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
            r = requests.put(url, json={"queues": 1}, headers=headers, timeout=BOUND)
            assert r.status_code == 403, (headers, r.text)
        assert requests.get(url, timeout=BOUND).status_code == 404  # nothing was made
        same = {"Origin": base, "Sec-Fetch-Site": "same-origin"}  # the console's own call
        assert requests.put(url, json={"queues": 1}, headers=same, timeout=BOUND).status_code == 201
    finally:
        gw.stop()
