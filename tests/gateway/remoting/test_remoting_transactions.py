"""Transactional messages over remoting against a real ``lmq serve`` subprocess, with the
project's remoting client (:class:`gateway.clients.TransactionProducer`): a half message
is not pulled until END_TRANSACTION commits it, never after a rollback; a repeated
commit stores and delivers once; a conflicting end, another producer group, or no half
at the offset is refused; a half left open is checked back (CHECK_TRANSACTION_STATE to
a producer of ITS group, with the broker's header and the message) and the checker's
answer commits it; a half still open is checked again after a gateway restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.clients import PullConsumer, RemotingClient, RemotingError, TransactionProducer
from gateway.clients.received import decode_messages
from gateway.clients.remoting import SendResult
from protocol.remoting import RequestCode, ResponseCode, SysFlag
from protocol.remoting.messages import parse_offset_msg_id
from tests.grpc.test_grpc_send import create_topic

from ..gateway_process import GatewayProcess

BOUND = 20.0


def namesrv(gw: GatewayProcess) -> str:
    return f"127.0.0.1:{gw.ports['unified']}"


async def pull_all(client: RemotingClient, topic: str, want: int = 0,
                   wait: float = 0.0) -> list[tuple[bytes, int]]:
    """Every message in queue 0 of ``topic`` (body, queue offset); with ``want``, polls
    until that many are there or ``wait`` seconds passed."""
    consumer = PullConsumer(client, "CG_tx")
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        mq = (await consumer.queues(topic))[0]
        result = await consumer.pull(mq, 0, max_nums=64)
        got = [(m.body, m.queue_offset) for m in result.messages]
        if len(got) >= want or asyncio.get_running_loop().time() >= deadline:
            return got
        await asyncio.sleep(0.2)


async def query(client: RemotingClient, topic: str, key: str,
                unique: bool = False) -> list[bytes]:
    """QUERY_MESSAGE by key: the bodies found (none: QUERY_NOT_FOUND)."""
    conn = await client.connection(client.namesrv)
    fields: dict[str, object] = {"topic": topic, "key": key, "maxNum": 32,
                                 "beginTimestamp": 0, "endTimestamp": 2**62}
    if unique:
        fields["_UNIQUE_KEY_QUERY"] = True
    answer = await conn.invoke(RequestCode.QUERY_MESSAGE, fields)
    if answer.code == ResponseCode.QUERY_NOT_FOUND:
        return []
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return [m.body for m in decode_messages(answer.body)]


def position(result: SendResult) -> int:
    return parse_offset_msg_id(result.offset_msg_id)[1]


async def test_commit_once_rollback_never_and_ends_are_idempotent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "rtx", "--type", "transaction", "--queues", "1")
    gw = GatewayProcess(data).start()
    try:
        async with RemotingClient(namesrv(gw)) as client:
            producer = TransactionProducer(client, "PG_tx")
            a = await producer.send_half("rtx", b"commit-me", keys=["ka"])
            b = await producer.send_half("rtx", b"roll-me-back", keys=["kb"])
            c = await producer.send_half("rtx", b"stay-open", keys=["kc"])
            assert await query(client, "rtx", "ka") == []  # not committed: not found
            assert a.transaction_id and a.transaction_id == a.msg_id  # the UNIQ_KEY
            assert a.queue_offset == 0
            assert await pull_all(client, "rtx") == []  # halves are not delivered
            await producer.end(a, True)
            await producer.end(b, False)
            unknown = await producer.end(c, None)  # stays pending
            assert unknown is not None and unknown.code == ResponseCode.SUCCESS
            got = await pull_all(client, "rtx", 1, 5)
            assert got == [(b"commit-me", 0)]
            # a repeated commit is SUCCESS and stores nothing again (RocketMQ #5574)
            again = await producer.end(a, True)
            assert again is not None and again.code == ResponseCode.SUCCESS
            await producer.end(a, True, oneway=True)
            await producer.end(b, False)  # a repeated rollback too
            # the reverse ends are refused, naming the outcome
            with pytest.raises(RemotingError) as refused:
                await producer.end(b, True)
            assert refused.value.code == ResponseCode.SYSTEM_ERROR
            assert "rolled_back" in (refused.value.remark or "")
            with pytest.raises(RemotingError) as refused:
                await producer.end(a, False)
            assert "committed" in (refused.value.remark or "")
            # another producer group cannot end the open one
            other = TransactionProducer(client, "PG_other")
            with pytest.raises(RemotingError) as refused:
                await other.end(c, True)
            assert "producer group" in (refused.value.remark or "")
            # no half message at that offset
            bogus = SendResult(c.msg_id, a.offset_msg_id[:-16] + f"{position(c) + 7:016X}",
                               c.queue, 0, 0, c.transaction_id)
            with pytest.raises(RemotingError) as refused:
                await producer.end(bogus, True)
            assert "Find prepared transaction message failed" in (refused.value.remark or "")
            await asyncio.sleep(0.5)
            assert await pull_all(client, "rtx") == [(b"commit-me", 0)]
            # what a consumer sees: the message as sent, committed
            consumer = PullConsumer(client, "CG_tx")
            mq = (await consumer.queues("rtx"))[0]
            (msg,) = (await consumer.pull(mq, 0)).messages
            assert msg.msg_id == a.msg_id and msg.keys == "ka" and msg.topic == "rtx"
            assert msg.sys_flag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT
            assert msg.commit_log_offset == position(a)
            assert msg.properties.get("PGROUP") == "PG_tx"
            # found by key once committed; the rolled back and the open one never
            assert await query(client, "rtx", "ka") == [b"commit-me"]
            assert await query(client, "rtx", a.msg_id, unique=True) == [b"commit-me"]
            assert await query(client, "rtx", "kb") == []
            assert await query(client, "rtx", "kc") == []
    finally:
        gw.stop()


async def test_refused_sends(tmp_path: Path) -> None:
    data = tmp_path / "data"
    create_topic(data, "rtx2", "--type", "transaction", "--queues", "1")
    create_topic(data, "plain", "--queues", "1")
    gw = GatewayProcess(data).start()
    try:
        async with RemotingClient(namesrv(gw)) as client:
            producer = TransactionProducer(client, "PG_tx")
            with pytest.raises(RemotingError) as refused:  # wrong topic type
                await producer.send_half("plain", b"x")
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "TRANSACTION" in (refused.value.remark or "")
            with pytest.raises(RemotingError) as refused:  # a delayed half
                await producer.send_half("rtx2", b"x", properties={"TIMER_DELAY_SEC": "5"})
            assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
            assert "delayed" in (refused.value.remark or "")
    finally:
        gw.stop()


async def _wait_checks(producer: TransactionProducer, n: int, seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while len(producer.checks) < n:
        assert asyncio.get_running_loop().time() < deadline, (
            f"{len(producer.checks)} check-backs in {seconds} s, wanted {n}")
        await asyncio.sleep(0.1)


async def test_check_back_to_the_group_answered_and_checked_again_after_restart(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    create_topic(data, "rtc", "--type", "transaction", "--queues", "1")
    config = tmp_path / "gateway.toml"
    config.write_text("[store]\ntxn_first_check_ms = 300\ntxn_check_interval_ms = 1000\n")
    gw = GatewayProcess(data, "--config", str(config)).start()
    try:
        async with RemotingClient(namesrv(gw)) as client, \
                RemotingClient(namesrv(gw)) as bystander_client:
            answers: list[bool | None] = [None]  # unknown: stays open
            producer = TransactionProducer(
                client, "PG_check", checker=lambda check, msg: answers[0])
            await producer.start("rtc")
            bystander = TransactionProducer(bystander_client, "PG_elsewhere",
                                            checker=lambda check, msg: True)
            await bystander.start("rtc")
            half = await producer.send_half("rtc", b"left-open", tags="T", keys=["k1"])
            await _wait_checks(producer, 1, BOUND)
            check, msg = producer.checks[0]
            # the broker's header, and the half message in the body
            assert check.topic == "rtc"
            assert check.commit_log_offset == position(half)
            assert check.msg_id == half.msg_id == check.transaction_id
            assert parse_offset_msg_id(check.offset_msg_id)[1] == position(half)
            assert msg.body == b"left-open" and msg.tags == "T" and msg.keys == "k1"
            assert msg.properties["PGROUP"] == "PG_check" and msg.msg_id == half.msg_id
            # unknown: it is checked again at the interval
            await _wait_checks(producer, 2, BOUND)
            assert bystander.checks == []  # only producers of the half's group
            assert await pull_all(client, "rtc") == []
        # a restart: the half is still pending, and checked again
        gw.restart()
        async with RemotingClient(namesrv(gw)) as client:
            producer = TransactionProducer(client, "PG_check", checker=lambda c, m: True)
            await producer.start("rtc")
            await _wait_checks(producer, 1, BOUND)
            assert producer.checks[0][0].commit_log_offset == position(half)
            # the checker's answer (END_TRANSACTION fromTransactionCheck, oneway) commits it
            got = await pull_all(client, "rtc", 1, BOUND)
            assert got == [(b"left-open", 0)]
            await asyncio.sleep(1.5)  # no further check, nothing twice
            assert await pull_all(client, "rtc") == [(b"left-open", 0)]
            assert len(producer.checks) == 1
    finally:
        gw.stop()
