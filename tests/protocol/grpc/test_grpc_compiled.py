"""The compiled gRPC door's sans-IO modules (setup.py's COMPILED: ``server.py``,
``framing.py``, ``messages.py``) against their own Python sources, on the same input:
the same events and the same bytes out of the server connection (calls from a real
HTTP/2 client, cut anywhere, and random bytes), the same messages and refusals from the
message checks.

Skipped where the imported modules are the sources themselves (``LMQ_NO_EXTENSIONS=1``
or no build).
"""

from __future__ import annotations

import dataclasses

import ngh2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb

from lmq.rocketmq import SYSTEM_PROPERTIES
from protocol.grpc import framing as compiled_framing
from protocol.grpc import messages as compiled_messages
from protocol.grpc import server as compiled_server
from protocol.grpc.status import StatusError
from tests.protocol.compiled_sources import is_compiled, source_of

pytestmark = pytest.mark.skipif(
    not is_compiled(compiled_server),
    reason="protocol.grpc.server is its Python source here (not compiled)",
)
if is_compiled(compiled_server):
    source_server = source_of(compiled_server)
    source_messages = source_of(compiled_messages)
    source_framing = source_of(compiled_framing)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _event(e: object) -> tuple:
    return (type(e).__name__, *(getattr(e, f.name) for f in dataclasses.fields(e)))  # type: ignore[arg-type]


def _serve(module, pieces: list[bytes], answer: bool) -> tuple[list[tuple], bytes]:
    """Feed ``pieces`` to a server connection of ``module``; with ``answer``, reply to
    each message and end its call. The events (as tuples) and every byte written."""
    server = module.ServerConnection(1 << 16)
    out = server.data_to_send()
    events: list[tuple] = []
    for piece in pieces:
        server.receive_data(piece)
        for e in server.events():
            events.append(_event(e))
            if answer and type(e).__name__ == "MessageReceived":
                server.consumed(e.stream_id, e.size)
                server.send_message(e.stream_id, e.payload[::-1])
                server.end_call(e.stream_id, module.OK, "")
        out += server.data_to_send()
        events += [_event(e) for e in server.events()]
    return events, out


def _client_bytes(calls: list[tuple[bytes, str, bool]]) -> bytes:
    client = ngh2.Connection(ngh2.Role.CLIENT)
    client.initiate_connection()
    for payload, timeout, end in calls:
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/svc.S/M"),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"x-mq-client-id", b"c1"),
            (b"trace-bin", b"AAE"),
        ]
        if timeout:
            headers.append((b"grpc-timeout", timeout.encode()))
        sid = client.send_request(headers)
        client.send_data(sid, compiled_framing.prefix(len(payload)) + payload, end_stream=end)
    return client.data_to_send()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=40), st.sampled_from(["", "3S", "250m", "x"]), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 50),
    st.booleans(),
)
def test_calls_cut_anywhere_give_the_same_events_and_bytes(calls, split, answer):
    wire = _client_bytes(calls)
    pieces = [wire] if not split else [wire[i : i + split] for i in range(0, len(wire), split)]
    assert _serve(compiled_server, pieces, answer) == _serve(source_server, pieces, answer)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 40))
def test_random_bytes_give_the_same_events_and_bytes(junk, split):
    data = PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + junk
    pieces = [data] if not split else [data[i : i + split] for i in range(0, len(data), split)]
    assert _serve(compiled_server, pieces, False) == _serve(source_server, pieces, False)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=60), st.integers(1, 30))
def test_message_readers_agree(data, limit):
    outcomes = []
    for module in (compiled_framing, source_framing):
        reader = module.MessageReader(limit)
        try:
            outcomes.append(("ok", reader.feed(data)))
        except Exception as exc:  # the framing errors: compared by class name and text
            outcomes.append(("error", type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]


_text = st.text(max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    st.text(max_size=8),
    _text,
    st.lists(_text, max_size=3),
    st.dictionaries(_text, _text, max_size=3),
    _text,
    st.binary(max_size=12),
)
def test_messages_decode_and_refuse_the_same(message_id, tag, keys, users, group, body):
    sysp = pb.SystemProperties(message_id=message_id, tag=tag, keys=keys, message_group=group)
    msg = pb.Message(topic=pb.Resource(name="t"), body=body, system_properties=sysp)
    msg.user_properties.update(users)
    outcomes = []
    for module in (compiled_messages, source_messages):
        try:
            got = module.decode_message(
                msg, reserved=SYSTEM_PROPERTIES, max_body=10, peer_host="10.0.0.1"
            )
            outcomes.append(("ok", dataclasses.astuple(got)))
        except StatusError as exc:
            outcomes.append(("refused", exc.code, exc.message))
    assert outcomes[0] == outcomes[1]
