"""A client and a server side of the codec back to back, without sockets."""

from __future__ import annotations

from protocol.remoting import (
    FrameDecoder,
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from protocol.remoting import headers as h
from protocol.remoting import messages as m
from protocol.remoting import signature as sig
from protocol.remoting.ids import UniqKey, UniqKeyFactory


def test_signed_batch_send_then_pull():
    client, server = FrameDecoder(), FrameDecoder()
    keys = UniqKeyFactory("10.0.0.5", pid=99)
    batch = [
        m.BatchMessage(b"one", {"UNIQ_KEY": keys.next(1_700_000_000_000), "TAGS": "eu"}),
        m.BatchMessage(b"two", {"UNIQ_KEY": keys.next(1_700_000_000_001), "TAGS": "eu"}),
    ]
    send_header = h.SendMessageRequestHeader(
        producer_group="pg",
        topic="orders",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        batch=True,
    )
    body = m.encode_batch(batch)
    fields = sig.sign(send_header.to_v2_fields(), body, "ak", "sk")
    request = RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE,
        fields,
        body,
        opaque=1,
        serialize_type=SerializeType.ROCKETMQ,
    )

    [got] = server.receive(request.encode())
    assert isinstance(got, RemotingCommand)
    assert sig.verify(got.ext_fields, got.body, "sk")
    parsed = h.SendMessageRequestHeader.for_request(got.code, got.ext_fields)
    assert parsed.batch and parsed.topic == "orders"
    received = m.decode_batch(got.body)
    assert received == batch

    stored = [
        m.StoredMessage(
            topic=parsed.topic,
            body=msg.body,
            properties=msg.properties,
            queue_id=parsed.queue_id,
            queue_offset=i,
            commit_log_offset=1000 + 100 * i,
            born_timestamp=parsed.born_timestamp,
            born_host=("10.0.0.5", 40000),
            store_timestamp=1_700_000_000_010,
            store_host=("127.0.0.1", 10911),
        )
        for i, msg in enumerate(received)
    ]
    send_response = RemotingCommand.response_to(
        got,
        ResponseCode.SUCCESS,
        ext_fields=h.SendMessageResponseHeader(
            msg_id=",".join(s.msg_id for s in stored), queue_id=1, queue_offset=0
        ).to_fields(),
    )
    [answer] = client.receive(send_response.encode())
    assert isinstance(answer, RemotingCommand) and answer.is_response and answer.opaque == 1
    assert answer.serialize_type == SerializeType.JSON

    pull = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        h.PullMessageRequestHeader(
            consumer_group="cg",
            topic="orders",
            queue_id=1,
            queue_offset=0,
            max_msg_nums=32,
            sys_flag=int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION),
            commit_offset=0,
            suspend_timeout_millis=15000,
            subscription="eu",
            sub_version=0,
        ).to_fields(),
        opaque=2,
    )
    [got_pull] = server.receive(pull.encode())
    assert isinstance(got_pull, RemotingCommand)
    pull_header = h.PullMessageRequestHeader.from_fields(got_pull.ext_fields)
    assert pull_header.suspend and not pull_header.lite_pull
    response = RemotingCommand.response_to(
        got_pull,
        ResponseCode.SUCCESS,
        ext_fields=h.PullMessageResponseHeader(0, 2, 0, 2).to_fields(),
        body=b"".join(m.encode_stored(s) for s in stored),
    )
    # A response and the start of another in one read: the client keeps the rest.
    raw = response.encode()
    client_decoded = _decode(raw)
    assert client.receive(raw + raw[:10]) == [client_decoded]
    assert client.buffered == 10
    pulled = m.decode_stored(client_decoded.body, check_crc=True)
    assert [p.body for p in pulled] == [b"one", b"two"]
    assert [p.properties["UNIQ_KEY"] for p in pulled] == [b.properties["UNIQ_KEY"] for b in batch]
    assert UniqKey.parse(pulled[1].properties["UNIQ_KEY"]).time_ms(1_700_000_100_000) == (
        1_700_000_000_001
    )
    assert h.PullMessageResponseHeader.from_fields(client_decoded.ext_fields).next_begin_offset == 2


def _decode(raw: bytes) -> RemotingCommand:
    [cmd] = FrameDecoder().receive(raw)
    assert isinstance(cmd, RemotingCommand)
    return cmd
