"""gateway.amqp.delayed: the plugin's x-delay reading and x-delayed-type checks, over
arbitrary values (Hypothesis)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.delayed import MAX_DELAY_MS, delay_ms, delayed_type
from protocol.amqp.errors import ChannelError, ConnectionLevelError


@given(st.integers(-(2**63), 2**63))
def test_integer_delays(d):
    assert delay_ms({"x-delay": d}) == (d if 0 < d <= MAX_DELAY_MS else 0)


@given(st.integers(-(2**40), 2**40))
def test_string_and_float_delays_are_converted(d):
    expected = d if 0 < d <= MAX_DELAY_MS else 0
    assert delay_ms({"x-delay": str(d)}) == expected
    assert delay_ms({"x-delay": str(d).encode()}) == expected
    # truncated toward zero, as the plugin's trunc/1
    assert delay_ms({"x-delay": Decimal(d) + Decimal("0.5")}) == (expected if d >= 0 else 0)
    assert delay_ms({"x-delay": float(d) + 0.5}) == (expected if d >= 0 else 0)


def _not_a_number(text: str) -> bool:
    return re.fullmatch(r"[+-]?[0-9]+", text) is None


@given(st.one_of(st.none(), st.booleans(), st.text().filter(_not_a_number),
                 st.lists(st.integers()), st.dictionaries(st.text(), st.integers())))
def test_other_values_are_no_delay(v):
    assert delay_ms({"x-delay": v}) == 0


@pytest.mark.parametrize("text", ["1_000", " 500", "500 ", "\u0665", "5.5", "", "+"])
def test_strings_erlang_would_not_read(text):
    assert delay_ms({"x-delay": text}) == 0


def test_no_headers():
    assert delay_ms(None) == 0 and delay_ms({}) == 0 and delay_ms({"other": 5}) == 0
    assert delay_ms({"x-delay": float("nan")}) == 0 and delay_ms({"x-delay": float("inf")}) == 0


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_delayed_types(kind):
    assert delayed_type({"x-delayed-type": kind}) == kind
    assert delayed_type({"x-delayed-type": kind.encode()}) == kind


@pytest.mark.parametrize("args", [{}, {"x-delayed-type": 5}, {"x-delayed-type": None},
                                  {"x-delayed-type": "x-delayed-message"}])
def test_missing_type_is_406(args):
    with pytest.raises(ChannelError) as info:
        delayed_type(args)
    assert info.value.reply_code == 406


def test_unknown_type_is_503():
    with pytest.raises(ConnectionLevelError) as info:
        delayed_type({"x-delayed-type": "x-consistent-hash"})
    assert info.value.reply_code == 503
