"""The compiled HTTP/1.1 server connection (setup.py's COMPILED: ``connection.py``)
against its own Python source, on the same bytes in the same chunks: the same events
out (heads, body pieces, ends, EOF), the same refusals (status and detail), and the
same response framing and keep-alive decision.

Skipped where the imported module is the source itself (``LMQ_NO_EXTENSIONS=1`` or no
build): there is nothing to compare.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.http1 import connection as compiled
from tests.protocol.compiled_sources import is_compiled, source_of

pytestmark = pytest.mark.skipif(
    not is_compiled(compiled), reason="protocol.http1.connection is its Python source here"
)
if is_compiled(compiled):
    source = source_of(compiled)


def _run(module, chunks: list[bytes], eof: bool, answers: list[tuple[int, list, bool]]):
    """Feed ``chunks`` (then EOF), take every event, answer each request head with the
    next of ``answers``; the whole transcript as plain values."""
    conn = module.ServerConnection(max_head=512)
    out: list[object] = []
    answer = iter(answers)

    def drain() -> bool:
        while True:
            try:
                event = conn.next_event()
            except module.ProtocolError as exc:
                out.append(("error", exc.status, exc.detail))
                return False
            if event is module.NEED_DATA:
                return True
            if event is module.CLOSED:
                out.append("closed")
                return False
            if isinstance(event, module.RequestHead):
                out.append(("head", event.method, event.target, event.http_version,
                            event.headers, event.size, event.expect_continue))
                status, headers, sized = next(answer, (200, [], True))
                try:
                    head = conn.response_head(event, status, "R", headers, length_known=sized)
                except module.LocalProtocolError as exc:
                    out.append(("local-error", str(exc)))
                    continue
                out.append(("response", head, conn.body(b"abc"), conn.end(), conn.keep_alive))
            elif isinstance(event, module.Body):
                out.append(("body", event.data))
            elif event is module.END_OF_MESSAGE:
                out.append("end")
            else:
                out.append(("other", repr(event)))

    for chunk in chunks:
        conn.receive_data(chunk)
        out.append(("pending", conn.pending, conn.pending_body))
        if not drain():
            return out
    if eof:
        conn.receive_data(b"")
        drain()
    return out


_header_names = st.sampled_from(
    ["Host", "Content-Length", "Transfer-Encoding", "Connection", "Expect", "X-A", "Upgrade"]
)
_header_values = st.sampled_from(
    ["h", "3", "chunked", "gzip", "close", "keep-alive", "100-continue", " v\t", "", "99999"]
)


@st.composite
def _requests(draw) -> bytes:
    method = draw(st.sampled_from(["GET", "POST", "HEAD", "PUT", "CONNECT", "G T", "PoST"]))
    target = draw(st.sampled_from(["/", "/v1/topics/t/messages?x=1", "*", "/a b", "/%41"]))
    version = draw(st.sampled_from(["1.1", "1.0", "2.0", "1.x"]))
    headers = draw(st.lists(st.tuples(_header_names, _header_values), max_size=5))
    head = f"{method} {target} HTTP/{version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    body = draw(st.sampled_from([b"", b"abc", b"3\r\nabc\r\n0\r\n\r\n", b"x" * 600]))
    return head.encode() + b"\r\n" + body


@settings(max_examples=300, deadline=None)
@given(
    requests=st.lists(_requests(), min_size=1, max_size=3),
    garbage=st.binary(max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=64), max_size=8),
    eof=st.booleans(),
    answers=st.lists(
        st.tuples(
            st.sampled_from([200, 201, 404]),
            st.lists(
                st.tuples(
                    st.sampled_from(["Content-Type", "Connection", "X-B"]),
                    st.sampled_from(["a", "close", "x\r\ny", "keep-alive"]),
                ),
                max_size=2,
            ),
            st.booleans(),
        ),
        max_size=3,
    ),
)
def test_compiled_matches_source(requests, garbage, cuts, eof, answers):
    data = b"".join(requests) + garbage
    chunks, at = [], 0
    for cut in cuts:
        if at >= len(data):
            break
        chunks.append(data[at : at + cut])
        at += cut
    if at < len(data):
        chunks.append(data[at:])
    assert _run(compiled, chunks, eof, answers) == _run(source, chunks, eof, answers)

