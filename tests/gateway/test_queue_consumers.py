"""The receipt handles of AMQP queue deliveries held for another front end
(gateway/queue_consumers.py): any vhost and queue name round-trips, and any other text
is refused with ValueError only (the JSON API answers it 400 per handle)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.queue_consumers import HANDLE_PREFIX, Handle

names = st.text(max_size=300)


@given(names, names, st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
       st.integers(min_value=0, max_value=2**63), st.text(max_size=32))
def test_any_handle_round_trips(vhost: str, queue: str, run: str, seq: int, token: str
                                ) -> None:
    handle = Handle(vhost, queue, run, seq, token)
    text = handle.encode()
    assert text.startswith(HANDLE_PREFIX) and text.isascii()
    assert Handle.decode(text) == handle


@given(st.one_of(st.text(), st.text().map(lambda t: HANDLE_PREFIX + t), st.integers(),
                 st.none(), st.binary().map(lambda b: HANDLE_PREFIX + b.hex())))
def test_anything_else_is_refused_with_value_error(text: object) -> None:
    try:
        Handle.decode(text)
    except ValueError:
        return
    # a random text that happens to decode must still be a well-formed handle
    assert isinstance(text, str) and text.startswith(HANDLE_PREFIX)


def test_a_forged_handle_with_wrong_types_is_refused() -> None:
    import base64
    import json

    for fields in ([1, "q", "r", 1, "t"], ["/", "q", "r", "1", "t"], ["/", "q", "r", True, "t"],
                   ["/", "q", "r", 1], {"a": 1}):
        raw = base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()
        try:
            Handle.decode(HANDLE_PREFIX + raw)
        except ValueError:
            continue
        raise AssertionError(f"accepted {fields}")
