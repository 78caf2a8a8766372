"""The HTTP APIs' one login (gateway/http/auth.py) over a real authenticator: a
password is verified once (scrypt in a thread) and the verified login reused, a wrong
password is refused every time and never cached, a changed password is not served
from the cache of the old one, and the cache holds no password."""

from __future__ import annotations

from gateway.auth import UsersDatabase
from gateway.auth.authenticator import Authenticator, Principal, Refusal
from gateway.auth.passwords import hash_password
from gateway.http.auth import HttpLogin


def authenticator() -> Authenticator:
    db = UsersDatabase()
    db.add_user("app", hash_password("pw", n=16, r=1, p=1))
    return Authenticator(db)


async def test_verified_logins_are_reused() -> None:
    login = HttpLogin(authenticator())
    first = await login.password("app", "pw", client_id="http", peer="10.0.0.1")
    assert isinstance(first, Principal) and first.username == "app"
    again = await login.password("app", "pw", client_id="http", peer="10.0.0.1")
    assert again is first  # the cached login: no second scrypt
    for _ in range(2):
        wrong = await login.password("app", "nope", client_id="http", peer="10.0.0.1")
        assert isinstance(wrong, Refusal)
    assert all(b"pw" not in key[1] for key in login._verified)


async def test_no_cache_without_ttl_and_a_changed_password() -> None:
    auth = authenticator()
    login = HttpLogin(auth, ttl=0)
    first = await login.password("app", "pw")
    second = await login.password("app", "pw")
    assert isinstance(first, Principal) and isinstance(second, Principal)
    assert first is not second  # verified again
    cached = HttpLogin(auth)
    assert isinstance(await cached.password("app", "pw"), Principal)
    # another password is another key: verified, not served from the old login
    assert isinstance(await cached.password("app", "pw2"), Refusal)
