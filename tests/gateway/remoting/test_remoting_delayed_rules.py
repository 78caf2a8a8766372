"""When a remoting send is due (gateway.remoting.delayed.due_time), over generated
property sets: the broker's precedence (a positive DELAY level wins; then
TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS, __STARTDELIVERTIME), a due time is
always in the future and never past the maximum, unreadable values are refused."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker_core.config import StoreConfig
from gateway.remoting.delayed import DELAY_PROPERTIES, DelayError, due_time

NOW = 1_800_000_000_000
MAX = 3_600_000
LEVELS = StoreConfig().delay_levels
UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000}


def level_due(level: int, now: int) -> int:
    text = LEVELS[min(level, len(LEVELS)) - 1]
    return now + int(text[:-1]) * UNITS[text[-1]]


values = st.one_of(
    st.integers(-10_000, 10_000).map(str),
    st.integers(NOW - 10_000, NOW + 2 * MAX).map(str),
    st.sampled_from(["", "x", "1.5", " 7 "]),
)
props_strategy = st.dictionaries(st.sampled_from(DELAY_PROPERTIES), values, max_size=5)


def expected(props: dict[str, str]) -> int | None | type[DelayError]:
    """The rules, written out again independently."""
    def num(name: str) -> int | None:
        try:
            return int(props[name].strip())
        except ValueError:
            return None

    if "DELAY" in props:
        level = num("DELAY")
        if level is None:
            return DelayError
        if level > 0:
            return level_due(level, NOW)
    for name, scale, relative in (("TIMER_DELAY_SEC", 1000, True),
                                  ("TIMER_DELAY_MS", 1, True),
                                  ("TIMER_DELIVER_MS", 1, False),
                                  ("__STARTDELIVERTIME", 1, False)):
        if name in props:
            value = num(name)
            if value is None:
                return DelayError
            due = NOW + value * scale if relative else value
            if due <= NOW:
                return None
            return DelayError if due - NOW > MAX else due
    return None


@given(props_strategy)
def test_due_time_follows_the_brokers_rules(props: dict[str, str]) -> None:
    want = expected(props)
    if want is DelayError:
        try:
            due_time(props, NOW, level_due, MAX)
        except DelayError:
            return
        raise AssertionError(f"not refused: {props}")
    got = due_time(props, NOW, level_due, MAX)
    assert got == want
    if got is not None and "DELAY" not in props:
        assert NOW < got <= NOW + MAX


def test_a_level_wins_over_the_timer_properties() -> None:
    assert due_time({"DELAY": "2", "TIMER_DELIVER_MS": "5"}, NOW, level_due, MAX) == NOW + 5000
    assert due_time({"DELAY": "0", "TIMER_DELAY_MS": "5"}, NOW, level_due, MAX) == NOW + 5
    assert due_time({"DELAY": "99"}, NOW, level_due, MAX) == NOW + 7_200_000  # clamped
    assert due_time({}, NOW, level_due, MAX) is None
