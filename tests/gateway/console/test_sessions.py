"""The console's sessions (gateway/http/auth.py): the cookie names a live session;
idle and absolute expiry; at most MAX_SESSIONS; only a hash of the cookie is kept; the
CSRF check of state-changing calls."""

from __future__ import annotations

from gateway.auth.authenticator import Principal
from gateway.http.auth import MAX_SESSIONS, Sessions, csrf_refusal
from gateway.http.messages import Request

ROOT = Principal("root", "password", frozenset({"administrator"}))


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(method: str = "GET", token: str = "", **headers: str) -> Request:
    pairs = [("host", "gw:8080")] + [(k.replace("_", "-"), v) for k, v in headers.items()]
    if token:
        pairs.append(("cookie", f"other=1; lmq_session={token}"))
    return Request(method, "/v1/admin/topics", pairs)


def test_sessions_live_expire_and_are_bounded() -> None:
    clock = Clock()
    sessions = Sessions(idle=60, lifetime=300, clock=clock)
    token, session = sessions.create(ROOT)
    assert sessions.get(request(token=token)) is session
    assert sessions.get(request(token=token + "x")) is None
    assert all(token.encode() not in key for key in sessions._by_hash)
    for _ in range(4):  # used every 50 s: the idle time restarts...
        clock.now += 50
        assert sessions.get(request(token=token)) is session
    clock.now += 150  # ...but not past the lifetime
    assert sessions.get(request(token=token)) is None
    token, _ = sessions.create(ROOT)
    clock.now += 61
    assert sessions.get(request(token=token)) is None
    first, _ = sessions.create(ROOT)
    for _ in range(MAX_SESSIONS):
        sessions.create(ROOT)
    assert len(sessions) == MAX_SESSIONS and sessions.get(request(token=first)) is None


def test_csrf() -> None:
    sessions = Sessions()
    token, session = sessions.create(ROOT)
    assert csrf_refusal(request("GET", token), session) is None  # reads need no token
    assert csrf_refusal(request("POST", token), session) is not None
    ok = request(
        "POST",
        token,
        x_csrf_token=session.csrf,
        origin="http://gw:8080",
        sec_fetch_site="same-origin",
    )
    assert csrf_refusal(ok, session) is None
    # no cookie (the CLI, open mode): only where the request comes from counts
    assert csrf_refusal(request("DELETE"), None) is None
    assert csrf_refusal(request("DELETE", sec_fetch_site="cross-site"), None) is not None
    assert csrf_refusal(request("POST", origin="http://evil.example"), None) is not None
    assert csrf_refusal(request("POST", origin="null"), None) is not None
    # a browser's Sec-Fetch-Site is trusted as it is (a proxy may rewrite Host)
    proxied = request("POST", origin="https://console.example", sec_fetch_site="same-origin")
    assert csrf_refusal(proxied, None) is None
    assert csrf_refusal(request("POST", sec_fetch_site="same-site"), None) is not None
