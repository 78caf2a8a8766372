"""Password hashes: format, round trip, wrong passwords, malformed and hostile hashes."""

from __future__ import annotations

import statistics
import time

import pytest

from gateway.auth import passwords
from gateway.auth.passwords import (
    InvalidHash,
    PasswordHash,
    dummy_hash,
    hash_password,
    needs_rehash,
    verify_dummy,
    verify_password,
)

FAST = {"n": 16, "r": 1, "p": 1}


def test_default_hash_round_trip_and_format():
    stored = hash_password("correct horse")
    assert stored.startswith("$scrypt$n=16384,r=8,p=1$")
    _, scheme, params, salt, digest = stored.split("$")
    assert scheme == "scrypt" and "=" not in salt + digest
    assert verify_password("correct horse", stored)
    assert not verify_password("correct horsE", stored)
    assert not needs_rehash(stored)


def test_salted_so_equal_passwords_hash_differently():
    a, b = hash_password("pw", **FAST), hash_password("pw", **FAST)
    assert a != b and verify_password("pw", a) and verify_password("pw", b)


@pytest.mark.parametrize("password", ["", "ünïcødé 🔑", "x" * 5000])
def test_str_and_bytes(password):
    stored = hash_password(password, **FAST)
    assert verify_password(password, stored)
    assert verify_password(password.encode(), stored)
    assert not verify_password(password + "x", stored)


def test_binary_mqtt_password():
    stored = hash_password(b"\x00\xff\x10", **FAST)
    assert verify_password(b"\x00\xff\x10", stored)
    assert not verify_password(b"\x00\xff", stored)


def test_parse_format_round_trip():
    stored = hash_password("pw", **FAST)
    parsed = PasswordHash.parse(stored)
    assert parsed.params == (16, 1, 1) and len(parsed.salt) == 16 and len(parsed.digest) == 32
    assert parsed.format() == stored
    assert needs_rehash(stored)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "plaintext",
        "$pbkdf2$n=16,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
        "$scrypt$n=15,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",  # not 2**k
        "$scrypt$n=1073741824,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",  # 128 GiB
        "$scrypt$n=1048576,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",  # 1 GiB
        "$scrypt$n=16,r=0,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
        "$scrypt$n=16,r=1,p=1$AAAA$AAAAAAAAAAAAAAAAAAAAAA",  # short salt
        "$scrypt$n=16,r=1,p=1$A$AAAAAAAAAAAAAAAAAAAAAA",  # bad base64
    ],
)
def test_malformed_or_hostile_hashes_are_refused(bad):
    with pytest.raises(InvalidHash):
        PasswordHash.parse(bad)
    assert verify_password("anything", bad) is False


def test_dummy_never_matches_and_costs_a_verification(monkeypatch):
    calls = []
    real = passwords._scrypt
    monkeypatch.setattr(passwords, "_scrypt", lambda *a: calls.append(a[2:5]) or real(*a))
    dummy = dummy_hash(16, 1, 1)
    assert verify_dummy("", dummy) is False
    assert verify_dummy(dummy.format(), dummy) is False
    assert calls == [(16, 1, 1), (16, 1, 1)]


def test_defaults_can_be_lowered_for_tests(monkeypatch):
    monkeypatch.setattr(passwords, "DEFAULT_N", 32)
    monkeypatch.setattr(passwords, "DEFAULT_R", 2)
    assert PasswordHash.parse(hash_password("pw")).params == (32, 2, 1)


def test_wrong_password_and_dummy_take_about_as_long():
    stored = PasswordHash.parse(hash_password("pw", n=2**11, r=8, p=1))
    dummy = dummy_hash(2**11, 8, 1)

    def timed(fn):
        samples = []
        for _ in range(7):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    wrong = timed(lambda: stored.matches("nope"))
    unknown = timed(lambda: verify_dummy("nope", dummy))
    assert 1 / 3 < unknown / wrong < 3
