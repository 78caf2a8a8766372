"""TokenBucket.try_take (HTTP's max_publish_rate): takes all or nothing, never goes into
debt, and the wait it returns is exactly what refills the missing tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.token_bucket import TokenBucket


def test_try_take():
    bucket = TokenBucket(10, now=0.0)
    assert bucket.try_take(0.0, 8) == 0.0 and bucket.tokens == pytest.approx(2.0)
    assert bucket.try_take(0.0, 5) == pytest.approx(0.3)  # 3 missing at 10/s
    assert bucket.tokens == pytest.approx(2.0)  # nothing taken
    assert bucket.try_take(0.3, 5) == 0.0
    assert bucket.try_take(100.0, 11) == pytest.approx(0.1)  # more than a full bucket


@given(rate=st.integers(1, 1000), steps=st.lists(
    st.tuples(st.floats(0, 5), st.integers(1, 50)), max_size=30))
def test_never_in_debt_and_the_wait_suffices(rate, steps):
    bucket = TokenBucket(rate, now=0.0)
    now = 0.0
    for dt, count in steps:
        now += dt
        before = min(float(rate), bucket.tokens + (now - bucket.at) * rate)
        wait = bucket.try_take(now, count)
        assert bucket.tokens >= -1e-9
        if wait == 0.0:
            assert before >= count and bucket.tokens == pytest.approx(before - count)
        else:
            assert before < count and bucket.tokens == pytest.approx(before)
            if count <= rate:  # after the wait it fits
                probe = TokenBucket(rate, now=0.0)
                probe.tokens, probe.at = bucket.tokens, bucket.at
                assert probe.try_take(now + wait + 1e-9, count) == 0.0
