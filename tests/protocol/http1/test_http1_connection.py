"""protocol.http1's server connection without a socket: requests in and events out in
order (pipelined, in any chunks), the head bound also for a head arriving in pieces,
the refusals and their statuses, and the response framing (Content-Length, chunked,
close-delimited to HTTP/1.0, HEAD) with the keep-alive decision."""

from __future__ import annotations

import pytest

from protocol.http1 import (
    CLOSED,
    END_OF_MESSAGE,
    NEED_DATA,
    Body,
    LocalProtocolError,
    ProtocolError,
    RequestHead,
    ServerConnection,
)

PIPELINED = (
    b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\nX-Pad:  v \r\n\r\n"
    b"POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    b"POST /c HTTP/1.0\r\nContent-Length: 4\r\n\r\nwxyz"
)


def events(conn: ServerConnection) -> list[object]:
    out: list[object] = []
    while (event := conn.next_event()) is not NEED_DATA:
        out.append(event)
        if event is CLOSED:
            break
    return out


def summary(evs: list[object]) -> list[object]:
    out: list[object] = []
    for e in evs:
        if isinstance(e, RequestHead):
            out.append((e.method, e.target, e.http_version, dict(e.headers)))
        elif isinstance(e, Body):
            out.append(e.data)
        else:
            out.append(e)
    return out


EXPECTED = [
    (b"GET", b"/a?x=1", "1.1", {b"host": b"h", b"x-pad": b"v"}),
    END_OF_MESSAGE,
    (b"POST", b"/b", "1.1", {b"host": b"h", b"transfer-encoding": b"chunked"}),
    b"abc", b"de", END_OF_MESSAGE,
    (b"POST", b"/c", "1.0", {b"content-length": b"4"}),
    b"wxyz", END_OF_MESSAGE,
]


@pytest.mark.parametrize("size", [1, 2, 7, 64, len(PIPELINED)])
def test_pipelined_requests_in_any_chunks(size):
    conn = ServerConnection()
    got: list[object] = []
    for at in range(0, len(PIPELINED), size):
        conn.receive_data(PIPELINED[at:at + size])
        got += events(conn)
    merged: list[object] = []
    for e in summary(got):  # body pieces may be split differently per chunk size
        if isinstance(e, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += e
        else:
            merged.append(e)
    expected = [b"abcde" if e == b"abc" else e for e in EXPECTED if e != b"de"]
    assert merged == expected
    conn.receive_data(b"")
    assert conn.next_event() is CLOSED


def test_head_bound_whole_and_in_pieces():
    conn = ServerConnection(max_head=256)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 300 + b"\r\n\r\n")
    with pytest.raises(ProtocolError) as exc:
        conn.next_event()
    assert exc.value.status == 431
    # a header value trickling in, never complete: refused once past the bound
    conn = ServerConnection(max_head=256)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: ")
    for _ in range(40):
        conn.receive_data(b"a" * 10)
    with pytest.raises(ProtocolError) as exc:
        conn.next_event()
    assert exc.value.status == 431
    # a head under the bound, in pieces, after a pipelined request: fine
    conn = ServerConnection(max_head=256)
    data = b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\nX-A: " + b"b" * 150
    conn.receive_data(data)
    conn.receive_data(b"\r\n\r\n")
    assert [e.target for e in events(conn) if isinstance(e, RequestHead)] == [b"/1", b"/2"]


@pytest.mark.parametrize(("data", "status"), [
    (b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", 400),
    (b"GET /\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 501),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
])
def test_refusals(data, status):
    conn = ServerConnection()
    conn.receive_data(data)
    with pytest.raises(ProtocolError) as exc:
        conn.next_event()
    assert exc.value.status == status
    with pytest.raises(ProtocolError):  # and again: the connection is done
        conn.next_event()


def test_requests_before_an_error_come_first():
    conn = ServerConnection()
    conn.receive_data(b"GET /ok HTTP/1.1\r\nHost: h\r\n\r\nBAD\x00 / HTTP/1.1\r\n\r\n")
    assert isinstance(conn.next_event(), RequestHead)
    assert conn.next_event() is END_OF_MESSAGE
    with pytest.raises(ProtocolError):
        conn.next_event()


def test_eof_inside_a_request_is_an_error():
    conn = ServerConnection()
    conn.receive_data(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
    conn.receive_data(b"")
    assert isinstance(conn.next_event(), RequestHead)
    assert conn.next_event().data == b"abc"  # type: ignore[union-attr]
    with pytest.raises(ProtocolError) as exc:
        conn.next_event()
    assert exc.value.status == 400


def test_expect_100_continue():
    conn = ServerConnection()
    conn.receive_data(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\n"
                      b"Content-Length: 2\r\n\r\n")
    head = conn.next_event()
    assert isinstance(head, RequestHead) and head.expect_continue
    assert not conn.pending_body
    assert conn.continue_100() == b"HTTP/1.1 100 Continue\r\n\r\n"


def one(conn: ServerConnection, data: bytes) -> RequestHead:
    conn.receive_data(data)
    head = conn.next_event()
    assert isinstance(head, RequestHead)
    return head


def test_response_framing_and_keep_alive():
    conn = ServerConnection()
    head = one(conn, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    out = conn.response_head(head, 200, "OK", [("Content-Length", "2")], length_known=True)
    assert out == b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    assert conn.body(b"hi") == b"hi" and conn.end() == b"" and conn.keep_alive
    # a stream to HTTP/1.1: chunked
    out = conn.response_head(head, 200, "OK", [], length_known=False)
    assert out == b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert conn.body(b"hello") == b"5\r\nhello\r\n" and conn.body(b"") == b""
    assert conn.end() == b"0\r\n\r\n" and conn.keep_alive
    # the client says close
    conn = ServerConnection()
    head = one(conn, b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n")
    out = conn.response_head(head, 204, "No Content", [], length_known=True)
    assert out.endswith(b"Connection: close\r\n\r\n") and not conn.keep_alive
    # HTTP/1.0, even asking keep-alive: a stream is close-delimited, then closed
    conn = ServerConnection()
    head = one(conn, b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    out = conn.response_head(head, 200, "OK", [], length_known=False)
    assert b"Transfer-Encoding" not in out and b"Connection: close" in out
    assert conn.body(b"raw") == b"raw" and conn.end() == b"" and not conn.keep_alive
    # HEAD: the headers of the GET, no body bytes
    conn = ServerConnection()
    head = one(conn, b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n")
    conn.response_head(head, 200, "OK", [("Content-Length", "5")], length_known=True)
    assert conn.body(b"hello") == b"" and conn.end() == b"" and conn.keep_alive


def test_a_header_with_a_line_break_is_not_sent():
    conn = ServerConnection()
    head = one(conn, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    for bad in ("a\r\nSet-Cookie: x", "a\nb", "a\rb"):
        with pytest.raises(LocalProtocolError):
            conn.response_head(head, 200, "OK", [("Location", bad)], length_known=True)


def test_upgrade_is_answered_then_closed():
    conn = ServerConnection()
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                      b"Upgrade: websocket\r\n\r\n\x81\x05hello")
    head = conn.next_event()
    assert isinstance(head, RequestHead) and conn.next_event() is END_OF_MESSAGE
    assert conn.next_event() is CLOSED
    conn.response_head(head, 404, "Not Found", [("Content-Length", "0")], length_known=True)
    assert not conn.keep_alive
