"""lmq.delayed: the $delayed topic forms, over arbitrary inputs (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmq.delayed import InvalidDelayedTopic, parse_delayed

NOW = 1_767_225_600_000
MAX = 40 * 86_400_000
topics = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                 min_size=1, max_size=30).filter(lambda t: not t.startswith("$delayed"))


@given(seconds=st.integers(0, MAX // 1000), topic=topics)
def test_relative(seconds, topic):
    assert parse_delayed(f"$delayed/{seconds}/{topic}", NOW, MAX) == (topic, NOW + seconds * 1000)


@given(ms=st.integers(0, NOW + MAX), topic=topics)
def test_absolute_ms_and_past_is_now(ms, topic):
    real, due = parse_delayed(f"$delayed/@{ms // 1000}.{ms % 1000:03d}/{topic}", NOW, MAX)
    assert real == topic and due == max(ms, NOW)


@given(seconds=st.integers(MAX // 1000 + 1, 10**11), topic=topics)
def test_too_long(seconds, topic):
    with pytest.raises(InvalidDelayedTopic):
        parse_delayed(f"$delayed/{seconds}/{topic}", NOW, MAX)


@given(delay=st.text(max_size=8).filter(
    lambda d: not d.isascii() or not (d.isdigit() or (d[:1] == "@" and d[1:].isdigit()))),
    topic=topics)
def test_malformed_delay(delay, topic):
    if "/" in delay:
        return  # the first level ends at the first '/'
    try:
        parse_delayed(f"$delayed/{delay}/{topic}", NOW, MAX)
    except InvalidDelayedTopic:
        return
    # the only other accepted form: @seconds.fraction
    assert delay.startswith("@") and "." in delay


@pytest.mark.parametrize("topic", ["$delayed/1", "$delayed/1/", "$delayed/1/$delayed/2/x",
                                   "$delayed/1/$delayed", "$delayed/@1.1234/x", "x/y"])
def test_refused(topic):
    with pytest.raises(InvalidDelayedTopic):
        parse_delayed(topic, NOW, MAX)
