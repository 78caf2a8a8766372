"""Fuzzing the gateway's configuration loader.

Contract (gateway/config.py): ``load_config(path, overrides)`` on any file content —
TOML with any keys, types and values, TOML damaged byte by byte, bytes that are not
TOML or not even UTF-8 — and any overrides either returns a :class:`GatewayConfig` or
raises :class:`ConfigError` with a non-empty one-line message. Nothing else escapes
(no UnicodeDecodeError, RecursionError, TypeError, ValueError of another class).
A returned config holds values a gateway can use: ints within 64 bits, paths and
addresses without U+0000, and it can be printed.
"""

from __future__ import annotations

import datetime
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import OPTIONS, ConfigError, GatewayConfig, load_config

from ._support import corpus, examples, mutate

HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=HEALTH)

TOP_KEYS = sorted(k for k in OPTIONS if not k.startswith("store."))
STORE_KEYS = sorted(k[6:] for k in OPTIONS if k.startswith("store."))

# -- a small TOML writer --------------------------------------------------------------------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # close to a TOML basic string
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_text(top: dict[str, Any], store: dict[str, Any] | None) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in top.items()]
    if store is not None:
        lines.append("[store]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in store.items()]
    return "\n".join(lines) + "\n"


numbers = st.one_of(
    st.integers(-5, 70_000), st.integers(-(2**70), 2**70), st.sampled_from(
        [0, 1, 1023, 1024, 65535, 65536, 268_435_455, 268_435_456, 2**63 - 1, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
)
strings = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["auto", " AUTO ", "80", " 8080 ", "٣", "²", "0x10", "", "text", "JSON",
                     "refuse", "skip", "sync", "async", "none", "optional", "required",
                     "127.0.0.1", "a\x00b", "\x00"]),
)
scalars = numbers | strings | st.booleans() | st.datetimes(
    min_value=datetime.datetime(1, 1, 2)) | st.dates()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
top_keys = st.sampled_from(TOP_KEYS) | st.text(max_size=8)
store_keys = st.sampled_from(STORE_KEYS) | st.text(max_size=8)


@st.composite
def config_files(draw: st.DrawFn) -> str:
    top = draw(st.dictionaries(top_keys.filter(lambda k: k != "store"), values, max_size=6))
    store = draw(st.none() | st.dictionaries(store_keys, values, max_size=4))
    return toml_text(top, store)


# -- the contract ---------------------------------------------------------------------------


def check_config(cfg: GatewayConfig) -> None:
    assert isinstance(cfg, GatewayConfig)
    for holder in (cfg, cfg.store):
        for name in holder.__dataclass_fields__:
            value = getattr(holder, name)
            if isinstance(value, int) and not isinstance(value, bool):
                assert -(2**63) <= value < 2**63, f"{name} = an int of {value.bit_length()} bits"
            if isinstance(value, str | Path):
                assert "\x00" not in str(value), f"{name} contains U+0000"
    repr(cfg)  # loggable


def check_load(raw: bytes | None, overrides: dict[str, Any] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = None
        if raw is not None:
            path = Path(tmp) / "gateway.toml"
            path.write_bytes(raw)
        try:
            cfg = load_config(path, overrides)
        except ConfigError as exc:
            message = str(exc)
            assert message and "\n" not in message and "\r" not in message, repr(message)
            return
        check_config(cfg)


@FAST
@given(config_files())
def test_generated_toml(text: str) -> None:
    check_load(text.encode("utf-8", "surrogatepass"))


@FAST
@given(config_files(), st.data())
def test_damaged_toml(text: str, data: Any) -> None:
    check_load(data.draw(mutate(text.encode("utf-8", "surrogatepass"), max_mutations=6)))


@FAST
@given(st.binary(max_size=200))
def test_random_bytes(raw: bytes) -> None:
    check_load(raw)


@FAST
@given(st.dictionaries(st.sampled_from(sorted(OPTIONS)) | st.text(max_size=8),
                       values | st.none(), max_size=5))
def test_overrides(overrides: dict[str, Any]) -> None:
    check_load(None, overrides)


@pytest.mark.parametrize("depth", [10, 5000])
@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{a=", "}")])
def test_deep_nesting(depth: int, opening: str, closing: str) -> None:
    check_load(f"bind = {opening * depth}1{closing * depth}\n".encode())


@pytest.mark.parametrize("digits", [19, 4299, 4301, 10_000])
def test_huge_integers(digits: int) -> None:
    check_load(f"max_connections = {'9' * digits}\n".encode())
    check_load(f"max_connections = 0x{'f' * digits}\n".encode())
    check_load(f"[store]\nsegment_bytes = {'9' * digits}\n".encode())


# -- the corpus -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "data"), corpus("config"))
def test_corpus(kind: str, data: bytes) -> None:
    if kind == "file":
        check_load(data)
    else:  # pragma: no cover
        raise AssertionError(f"unknown corpus kind {kind!r}")
