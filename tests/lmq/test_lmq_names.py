"""lmq.names against MQTT 3.1.1/5.0 section 4.7 (and 1.5.4, 4.8.2), example by example."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lmq.names import (
    DEFAULT_MAX_LMQ_BYTES,
    MAX_TOPIC_BYTES,
    InvalidTopic,
    SharedSubscription,
    has_wildcards,
    is_system_topic,
    parse_shared_subscription,
    split_levels,
    validate_lmq_name,
    validate_topic_filter,
    validate_topic_name,
)

# Valid filters, most from the non-normative examples of 4.7.1.2, 4.7.1.3 and 4.7.3.
VALID_FILTERS = [
    "sport/tennis/player1",
    "sport/tennis/player1/#",
    "sport/#",
    "#",
    "+",
    "+/tennis/#",
    "sport/+/player1",
    "/+",
    "+/+",
    "/finance",
    "/",
    "//",
    "a//b",
    "sport/+",
    "$SYS/#",
    "$SYS/monitor/+",
    "+/monitor/Clients",
    "ACCOUNTS",
    "Accounts payable",
    "a b/ c ",
    "é/日本/🙂",
    "a*b/c.d",  # '*' and '.' are ordinary characters in MQTT
]

INVALID_FILTERS = {
    "": "at least one character",
    "sport/tennis#": "'#' must occupy a whole level, but level 2 is 'tennis#'",
    "sport/tennis/#/ranking": "'#' must be the last level in filter 'sport/tennis/#/ranking'",
    "a/#/b": "'#' must be the last level in filter 'a/#/b'",
    "#/": "'#' must be the last level",
    "##": "'#' must occupy a whole level, but level 1 is '##'",
    "sport+": "'+' must occupy a whole level, but level 1 is 'sport+'",
    "a/b+/c": "'+' must occupy a whole level, but level 2 is 'b+'",
    "++": "'+' must occupy a whole level",
    "+#": "must occupy a whole level",
    "a\x00b": "contains U+0000 at index 1",
    "a/\ud800": "unpaired surrogate U+D800 at index 2",
}

VALID_NAMES = ["a", "/", "a//b", "/a", "a/", "$SYS/uptime", " ", "é", "a\x01b", "x\uffff"]

INVALID_NAMES = {
    "": "at least one character",
    "a/+": "contains wildcard '+' at index 2",
    "a/#": "contains wildcard '#' at index 2",
    "a+b": "wildcard '+'",
    "#": "wildcard '#'",
    "\x00": "U+0000 at index 0",
    "ok\udfff": "unpaired surrogate U+DFFF at index 2",
}


@pytest.mark.parametrize("topic_filter", VALID_FILTERS)
def test_valid_filters_are_returned_unchanged(topic_filter: str) -> None:
    assert validate_topic_filter(topic_filter) is topic_filter


@pytest.mark.parametrize(("topic_filter", "message"), INVALID_FILTERS.items())
def test_invalid_filters_say_what_and_where(topic_filter: str, message: str) -> None:
    with pytest.raises(InvalidTopic, match=message.replace("+", r"\+")):
        validate_topic_filter(topic_filter)


@pytest.mark.parametrize("topic", VALID_NAMES)
def test_valid_topic_names(topic: str) -> None:
    assert validate_topic_name(topic) is topic


@pytest.mark.parametrize(("topic", "message"), INVALID_NAMES.items())
def test_invalid_topic_names(topic: str, message: str) -> None:
    with pytest.raises(InvalidTopic, match=message.replace("+", r"\+")):
        validate_topic_name(topic)


def test_invalid_topic_is_a_value_error() -> None:
    assert issubclass(InvalidTopic, ValueError)


@pytest.mark.parametrize(
    "validate", [validate_topic_name, validate_topic_filter, validate_lmq_name]
)
def test_non_str_is_a_type_error(validate) -> None:
    with pytest.raises(TypeError, match="must be str, not bytes"):
        validate(b"a/b")


def test_topic_length_limit_counts_utf8_bytes() -> None:
    assert validate_topic_name("a" * MAX_TOPIC_BYTES)
    with pytest.raises(InvalidTopic, match="is 65536 UTF-8 bytes; the maximum is 65535"):
        validate_topic_name("a" * (MAX_TOPIC_BYTES + 1))
    # 'é' is two bytes: 32767 of them plus one ASCII byte is exactly the limit.
    assert validate_topic_filter("é" * 32767 + "a")
    with pytest.raises(InvalidTopic, match="65536 UTF-8 bytes"):
        validate_topic_filter("é" * 32768)
    with pytest.raises(InvalidTopic, match="65536 UTF-8 bytes"):
        validate_topic_name("🙂" * 16384)  # four bytes each


def test_long_names_are_shortened_in_messages() -> None:
    with pytest.raises(InvalidTopic) as info:
        validate_topic_name("x" * 70_000)
    assert len(str(info.value)) < 200
    assert "(70000 characters)" in str(info.value)


@pytest.mark.parametrize(
    ("text", "code_point"),
    [
        ("a\x01", "U+0001"),
        ("a\x1f", "U+001F"),
        ("a\x7f", "U+007F"),
        ("a\x9f", "U+009F"),
        ("a\ufdd0", "U+FDD0"),
        ("a\ufdef", "U+FDEF"),
        ("a\ufffe", "U+FFFE"),
        ("a\uffff", "U+FFFF"),
        ("a\U0001fffe", "U+1FFFE"),
        ("a\U0010ffff", "U+10FFFF"),
    ],
)
def test_strict_rejects_control_and_non_characters(text: str, code_point: str) -> None:
    # SHOULD NOT (1.5.4): accepted by default, refused only when asked.
    assert validate_topic_name(text) == text
    assert validate_topic_filter(text) == text
    with pytest.raises(InvalidTopic, match=re.escape(f"contains {code_point} at index 1")):
        validate_topic_name(text, strict=True)
    with pytest.raises(InvalidTopic, match=re.escape(code_point)):
        validate_topic_filter(text, strict=True)


@pytest.mark.parametrize("text", ["a\x20b", "a\xa0b", "\ufdcf", "\ufdf0", "\ufffd", "\U0001fffd"])
def test_strict_accepts_neighbours_of_the_discouraged_ranges(text: str) -> None:
    assert validate_topic_name(text, strict=True) == text


def test_split_levels_keeps_empty_levels() -> None:
    assert split_levels("a//b") == ["a", "", "b"]
    assert split_levels("/a") == ["", "a"]
    assert split_levels("/") == ["", ""]
    assert split_levels("a") == ["a"]


def test_is_system_topic() -> None:
    assert is_system_topic("$SYS/broker/uptime")
    assert is_system_topic("$")
    assert is_system_topic("$share/g/a")
    assert not is_system_topic("SYS/$x")
    assert not is_system_topic("/$SYS")
    assert not is_system_topic("")


def test_has_wildcards() -> None:
    assert has_wildcards("a/+")
    assert has_wildcards("#")
    assert not has_wildcards("a/b")


# -- shared subscriptions (MQTT 5, 4.8.2) ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "group", "topic_filter"),
    [
        ("$share/consumer1/sport/tennis/+", "consumer1", "sport/tennis/+"),
        ("$share/consumer2/sport/tennis/+", "consumer2", "sport/tennis/+"),
        ("$share/consumer1//finance", "consumer1", "/finance"),
        ("$share/g/#", "g", "#"),
        ("$share/g/$SYS/#", "g", "$SYS/#"),
        ("$share/g//", "g", "/"),
        ("$share/$share/x", "$share", "x"),
        ("$share/grüppe/a", "grüppe", "a"),
    ],
)
def test_parse_shared_subscription(text: str, group: str, topic_filter: str) -> None:
    shared = parse_shared_subscription(text)
    assert shared == SharedSubscription(group=group, filter=topic_filter)


@pytest.mark.parametrize("text", ["sport/#", "$share", "$SHARE/g/a", "$shared/g/a", "share/g/a"])
def test_non_shared_filters_give_none(text: str) -> None:
    assert parse_shared_subscription(text) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("$share/", "share name must be at least one character"),
        ("$share//a", "share name must be at least one character"),
        ("$share/g", "needs '/' and a topic filter after the share name"),
        ("$share/g/", "topic filter after the share name must be at least one character"),
        ("$share/g+/a", r"share name 'g\+' must not contain '\+'"),
        ("$share/#/a", "share name '#' must not contain '#'"),
        ("$share/g/a/#/b", "'#' must be the last level in filter 'a/#/b'"),
        ("$share/g/a+", "'\\+' must occupy a whole level"),
        ("$share/g\x00/a", r"contains U\+0000 at index 8"),
    ],
)
def test_malformed_shared_subscriptions(text: str, message: str) -> None:
    with pytest.raises(InvalidTopic, match=message):
        parse_shared_subscription(text)


def test_shared_subscription_is_frozen_and_slotted() -> None:
    shared = SharedSubscription("g", "a/b")
    with pytest.raises(AttributeError):
        shared.group = "h"  # type: ignore[misc]
    assert not hasattr(shared, "__dict__")


def test_shared_subscription_strict_mode() -> None:
    assert parse_shared_subscription("$share/g/a\x01") == SharedSubscription("g", "a\x01")
    with pytest.raises(InvalidTopic, match="U\\+0001"):
        parse_shared_subscription("$share/g/a\x01", strict=True)


def test_shared_subscription_length_limit_is_on_the_whole_string() -> None:
    prefix = "$share/g/"
    assert parse_shared_subscription(prefix + "a" * (MAX_TOPIC_BYTES - len(prefix)))
    with pytest.raises(InvalidTopic, match="65536 UTF-8 bytes"):
        parse_shared_subscription(prefix + "a" * (MAX_TOPIC_BYTES - len(prefix) + 1))


# -- LMQ names ---------------------------------------------------------------------------


def test_lmq_names() -> None:
    assert validate_lmq_name("%LMQ%a/b/+") == "%LMQ%a/b/+"  # wildcards are fine here
    assert validate_lmq_name("x" * DEFAULT_MAX_LMQ_BYTES)
    with pytest.raises(InvalidTopic, match="LMQ name must be at least one character"):
        validate_lmq_name("")
    with pytest.raises(InvalidTopic, match="LMQ name 'a\\\\x00' contains U\\+0000 at index 1"):
        validate_lmq_name("a\x00")
    with pytest.raises(InvalidTopic, match="4097 UTF-8 bytes; the maximum is 4096"):
        validate_lmq_name("x" * 4097)
    with pytest.raises(InvalidTopic, match="unpaired surrogate"):
        validate_lmq_name("\udc80")


def test_lmq_name_limit_is_configurable_and_counts_bytes() -> None:
    assert validate_lmq_name("éé", max_bytes=4)
    with pytest.raises(InvalidTopic, match="6 UTF-8 bytes; the maximum is 5"):
        validate_lmq_name("ééé", max_bytes=5)
    with pytest.raises(ValueError, match="max_bytes must be positive"):
        validate_lmq_name("a", max_bytes=0)


# -- properties ----------------------------------------------------------------------------

plain_levels = st.text(
    alphabet=st.characters(exclude_characters="/+#\x00", exclude_categories=["Cs"]),
    max_size=5,
)


@given(st.lists(plain_levels, min_size=1, max_size=6).filter(lambda levels: "/".join(levels)))
def test_any_wildcard_free_topic_is_a_valid_name_and_filter(levels: list[str]) -> None:
    topic = "/".join(levels)
    assert validate_topic_name(topic) == topic
    assert validate_topic_filter(topic) == topic
    assert split_levels(topic) == levels


@given(
    st.lists(st.one_of(plain_levels, st.just("+")), max_size=6),
    st.booleans(),
)
def test_well_placed_wildcards_are_valid(levels: list[str], hash_last: bool) -> None:
    if hash_last:
        levels = [*levels, "#"]
    topic_filter = "/".join(levels)
    if topic_filter:
        assert validate_topic_filter(topic_filter) == topic_filter
        if has_wildcards(topic_filter):
            with pytest.raises(InvalidTopic, match="wildcard"):
                validate_topic_name(topic_filter)


@given(plain_levels, plain_levels, st.sampled_from("+#"))
def test_wildcard_glued_to_text_is_invalid(before: str, after: str, wildcard: str) -> None:
    level = before + wildcard + after
    if level == wildcard:
        return
    with pytest.raises(InvalidTopic, match="must occupy a whole level"):
        validate_topic_filter(f"x/{level}/y")


@given(st.lists(plain_levels, min_size=1, max_size=4), plain_levels)
def test_hash_before_the_last_level_is_invalid(levels: list[str], tail: str) -> None:
    with pytest.raises(InvalidTopic, match="'#' must be the last level"):
        validate_topic_filter("/".join([*levels, "#", tail]))
