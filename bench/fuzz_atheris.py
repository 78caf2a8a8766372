"""Coverage-guided fuzzing with atheris (libFuzzer) for long runs by hand.

atheris is not a project dependency; install it into the venv to use this::

    .venv/bin/pip install atheris
    .venv/bin/python bench/fuzz_atheris.py mqtt-decode -max_total_time=300
    .venv/bin/python bench/fuzz_atheris.py amqp-connection -max_total_time=300 /tmp/amqp-corpus

Targets (the same contracts as tests/fuzz/, which run them with Hypothesis in CI):

=================  =======================================================================
mqtt-decode        decode_packet on the input under each protocol version: a packet that
                   round-trips, InsufficientData only for a real prefix, or MQTTError
mqtt-server        a server Connection fed the input in 1..16-byte pieces: only
                   RemoteProtocolError, progress on every call, ERROR is final
amqp-connection    AMQPConnection (after the protocol header) driven like the gateway:
                   only AMQPError, progress on every call
amqp-method        framing.decode_method and the fast-path decoders on the payload
amqp-header        fastpath.ContentHeader (+ its headers table)
topics             the topic/filter/share/LMQ-name validators and both tries
config             load_config on the input as a TOML file: GatewayConfig or a one-line
                   ConfigError
record             decode_record / iter_records: no CRC-failing record returned
remoting-frames    FrameDecoder on the input in 1..16-byte pieces: only RemotingCommand or
                   FrameError; commands re-encode equal; every header class parses or
                   raises HeaderError
remoting-messages  decode_stored / decode_batch / the JSON body parsers / UNIQ_KEY and
                   ExtraInfo: only MessageError, BodyError, HeaderError; round trips
=================  =======================================================================

The seeds are the regression corpus in tests/fuzz/corpus/<area>/ (decoded from .hex);
libFuzzer arguments after the target name are passed through (a directory argument is
the working corpus: new inputs are written there). A crash is any exception outside the
contract; libFuzzer writes the input to ``crash-<sha1>``: add it to the corpus as hex.
"""

from __future__ import annotations

import os
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

try:
    import atheris
except ImportError:  # pragma: no cover
    sys.exit("atheris is not installed: .venv/bin/pip install atheris")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports(include=["protocol", "lmq", "gateway.config", "broker_core"]):
    from crc32c import crc32c

    from broker_core.errors import CorruptRecord, InsufficientData
    from broker_core.record import decode_record, iter_records
    from gateway.config import ConfigError, load_config
    from lmq.names import (
        InvalidTopic,
        parse_shared_subscription,
        validate_lmq_name,
        validate_topic_filter,
        validate_topic_name,
    )
    from lmq.topic_space import AmqpTopicTrie, binding_matches
    from lmq.topic_trie import TopicTrie, filter_matches
    from protocol import amqp, mqtt
    from protocol import remoting as rmt
    from protocol.amqp import fastpath
    from protocol.amqp.framing import PROTOCOL_HEADER, decode_method
    from protocol.remoting import bodies as rmt_bodies
    from protocol.remoting import headers as rmt_headers
    from protocol.remoting import messages as rmt_messages
    from protocol.remoting import pop as rmt_pop
    from protocol.remoting import route as rmt_route
    from protocol.remoting.errors import BodyError
    from protocol.remoting.ids import UniqKey

# The AMQP machine runs with pamqp configured as the gateway configures it.
amqp.relax_pamqp_name_validation()


# -- MQTT -----------------------------------------------------------------------------------


def mqtt_decode(data: bytes) -> None:
    for version in (None, mqtt.MQTTVersion.V3_1, mqtt.MQTTVersion.V3_1_1, mqtt.MQTTVersion.V5):
        try:
            packet, used = mqtt.decode_packet(data, version)
        except mqtt.InsufficientData:
            continue
        except mqtt.MQTTError as exc:
            assert isinstance(exc.reason_code, mqtt.ReasonCode)
            continue
        assert 2 <= used <= len(data)
        v = packet.protocol_version if isinstance(packet, mqtt.Connect) else version
        assert v is not None
        again, used2 = mqtt.decode_packet(mqtt.packet_bytes(packet, v), v)
        assert again == packet, (packet, again)


def mqtt_server(data: bytes) -> None:
    if len(data) < 2:
        return
    step = 1 + data[0] % 16
    data = data[1:]
    conn = mqtt.Connection(mqtt.Role.SERVER)
    calls = 0
    for i in range(0, len(data), step):
        conn.receive_data(data[i : i + step])
        while True:
            calls += 1
            assert calls <= len(data) + 4 * (len(data) // step + 2)
            try:
                event = conn.next_event()
            except mqtt.RemoteProtocolError:
                assert conn.state is mqtt.State.ERROR
                conn.error_response()
                try:
                    conn.next_event()
                except mqtt.RemoteProtocolError:
                    return
                raise AssertionError("ERROR state left") from None
            if event is mqtt.NEED_DATA:
                break
            if event is mqtt.PAUSED:
                try:
                    conn.send(mqtt.Connack())
                except mqtt.OutgoingPacketTooLarge:
                    return
            elif isinstance(event, mqtt.ConnectionClosed):
                return


# -- AMQP -----------------------------------------------------------------------------------


def amqp_connection(data: bytes) -> None:
    conn = amqp.AMQPConnection()
    conn.receive_data(PROTOCOL_HEADER + data)
    conn.receive_data(b"")
    ev = amqp.events
    for _ in range(len(data) + 16):
        try:
            event = conn.next_event()
        except amqp.AMQPError as exc:
            assert exc.reply_code >= 300
            conn.send_error(exc)
            continue
        if event is amqp.NEED_DATA:
            return
        if isinstance(event, ev.ProtocolHeaderReceived):
            conn.send_start()
        elif isinstance(event, ev.AuthenticationRequested):
            conn.accept_auth()
        elif isinstance(event, ev.OpenRequested):
            conn.accept_open()
        elif isinstance(event, ev.ChannelOpenRequested):
            conn.send_channel_open_ok(event.channel)
        elif isinstance(event, ev.ChannelCloseRequested):
            conn.send_channel_close_ok(event.channel)
        elif isinstance(event, ev.ConnectionCloseRequested):
            conn.send_close_ok()
        elif isinstance(event, ev.ContentReceived):
            try:
                event.header.headers  # noqa: B018
            except amqp.ConnectionLevelError:
                pass
    raise AssertionError("next_event makes no progress")


def amqp_method(data: bytes) -> None:
    try:
        decode_method(data)
    except amqp.ConnectionLevelError as exc:
        assert exc.reply_code in (501, 502, 540)
    for fast in (fastpath.decode_publish, fastpath.decode_ack, fastpath.decode_nack):
        try:
            fast(data)
        except amqp.ConnectionLevelError as exc:
            assert exc.reply_code == 502


def amqp_header(data: bytes) -> None:
    try:
        hdr = fastpath.ContentHeader(data)
        hdr.headers  # noqa: B018
    except amqp.ConnectionLevelError as exc:
        assert exc.reply_code == 502


# -- topics, config, records ----------------------------------------------------------------


def topics(data: bytes) -> None:
    # Invalid UTF-8 becomes lone surrogates, which the validators must refuse.
    text = data.decode("utf-8", "surrogateescape")
    for fn in (validate_topic_name, validate_topic_filter, parse_shared_subscription,
               validate_lmq_name):
        try:
            fn(text)
        except InvalidTopic as exc:
            assert "\n" not in str(exc)
    pattern, _, subject = text.partition("\udcff")  # a 0xFF byte splits, as in the corpus
    binding_matches(pattern, subject)
    trie: AmqpTopicTrie[int] = AmqpTopicTrie()
    trie.add(pattern, 1)
    assert (trie.matches(subject) == {1}) == binding_matches(pattern, subject)
    try:
        validate_topic_filter(pattern)
        validate_topic_name(subject)
    except InvalidTopic:
        return
    mtrie: TopicTrie[int] = TopicTrie()
    mtrie.add(pattern, 1)
    assert (mtrie.matches(subject) == {1}) == filter_matches(pattern, subject)


_CONFIG_DIR = tempfile.mkdtemp(prefix="fuzz-config-")


def config(data: bytes) -> None:
    path = Path(_CONFIG_DIR) / "gateway.toml"
    path.write_bytes(data)
    try:
        load_config(path)
    except ConfigError as exc:
        assert str(exc) and "\n" not in str(exc)


def record(data: bytes) -> None:
    try:
        rec = decode_record(data, None)
    except (InsufficientData, CorruptRecord):
        pass
    else:
        assert crc32c(data[12 : rec.size]) == struct.unpack_from(">I", data, 8)[0]
    walked = list(iter_records(data, 0))
    assert len(walked) <= len(data) // 60 + 1


# -- RocketMQ remoting -------------------------------------------------------------------

_RMT_HEADERS = [
    cls
    for module in (rmt_headers, rmt_pop)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, rmt_headers.Header)
    and cls is not rmt_headers.Header
]


def remoting_frames(data: bytes) -> None:
    if len(data) < 2:
        return
    step = 1 + data[0] % 16
    data = data[1:]
    decoder = rmt.FrameDecoder(max_frame_length=1 << 16)
    for i in range(0, len(data), step):
        for item in decoder.receive(data[i : i + step]):
            if isinstance(item, rmt.FrameError):
                if item.fatal:
                    return
                continue
            assert isinstance(item, rmt.RemotingCommand)
            json_frame = item.encode(rmt.SerializeType.JSON)
            again = rmt.decode_command(json_frame[4:])
            assert again.ext_fields == item.ext_fields and again.code == item.code
            for cls in _RMT_HEADERS:
                try:
                    cls.from_fields(item.ext_fields)
                except rmt.HeaderError:
                    pass


def remoting_messages(data: bytes) -> None:
    try:
        msgs = rmt_messages.decode_stored(data, check_crc=True)
    except rmt.MessageError:
        pass
    else:
        raw = b"".join(rmt_messages.encode_stored(m) for m in msgs)
        assert len(rmt_messages.decode_stored(raw, decompress=False)) == len(msgs)
    try:
        batch = rmt_messages.decode_batch(data)
    except rmt.MessageError as exc:
        assert exc.index is not None
    else:
        try:
            assert rmt_messages.decode_batch(rmt_messages.encode_batch(batch)) == batch
        except rmt.MessageError:
            pass
    for parse in (rmt_bodies.HeartbeatData.parse, rmt_bodies.LockBatchRequestBody.parse,
                  rmt_bodies.BatchAckMessageRequestBody.parse, rmt_route.TopicRouteData.parse):
        try:
            parse(data)
        except BodyError:
            pass
    text = data.decode("utf-8", "replace")
    try:
        UniqKey.parse(text)
    except rmt.MessageError:
        pass
    try:
        rmt_pop.ExtraInfo.parse(text)
    except rmt.HeaderError:
        pass


TARGETS: dict[str, tuple[Callable[[bytes], None], str]] = {
    "mqtt-decode": (mqtt_decode, "mqtt"), "mqtt-server": (mqtt_server, "mqtt"),
    "amqp-connection": (amqp_connection, "amqp"), "amqp-method": (amqp_method, "amqp"),
    "amqp-header": (amqp_header, "amqp"), "topics": (topics, "topics"),
    "config": (config, "config"), "record": (record, "record"),
    "remoting-frames": (remoting_frames, "remoting"),
    "remoting-messages": (remoting_messages, "remoting"),
}


def _seed_dir(area: str) -> str:
    """The regression corpus of ``area`` as raw files in a temporary directory."""
    out = Path(tempfile.mkdtemp(prefix=f"fuzz-seeds-{area}-"))
    for path in sorted((ROOT / "tests" / "fuzz" / "corpus" / area).glob("*.hex")):
        lines = path.read_text("ascii").splitlines()
        raw = bytes.fromhex("".join(ln for ln in lines if not ln.lstrip().startswith("#")))
        (out / path.stem).write_bytes(raw)
    return str(out)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer options] [dirs]")
    target, area = TARGETS[sys.argv[1]]
    args = [sys.argv[0], *sys.argv[2:]]
    if not any(os.path.isdir(a) for a in args[1:]):
        args.append(_seed_dir(area))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
