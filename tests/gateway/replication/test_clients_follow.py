"""Clients of a static pair's slave are sent to the master (docs/replication.md
"Clients follow"), and bad input on the master's replication port is refused with a
log line and damages nothing (real gateway processes, real clients)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pika
import pika.exceptions
import pytest
from click.testing import CliRunner

from cli.main import main
from protocol.remoting.codes import RequestCode
from protocol.replication import Ack, Data, EpochEntry, FrameDecoder, Hello, Refuse, encode
from tests.gateway.remoting.remoting_support import Client
from tests.grpc.grpc_core_support import channel, query_route, stub

from .group_support import Member, log_bytes, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("pair")
    a = Member(root / "a", "--replication-role", "master", "--remoting-port", "auto").start()
    b = Member(
        root / "b",
        "--replication-role",
        "slave",
        "--remoting-port",
        "auto",
        "--replication-master",
        a.replication_address,
    ).start()
    wait_for("b connected", lambda: b.replication().get("connected") is True)
    yield a, b
    b.stop()
    a.stop()


def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def test_health_for_a_load_balancer(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    assert _get(a.ports["unified"], "/health/master")[0] == 200
    status, _, body = _get(b.ports["unified"], "/health/master")
    assert status == 503 and json.loads(body) == {"role": "slave"}
    assert b.replication()["master"]["mqtt"] == f"127.0.0.1:{a.ports['mqtt']}"


def test_http_requests_to_a_slave_are_redirected(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    opener = urllib.request.build_opener(_NoRedirect)
    req = urllib.request.Request(
        f"http://127.0.0.1:{b.ports['unified']}/v1/topics/t/messages?x=1", data=b"{}", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(req, timeout=5)
    err.value.close()
    assert err.value.code == 307
    assert err.value.headers["Location"] == (
        f"http://127.0.0.1:{a.ports['unified']}/v1/topics/t/messages?x=1"
    )


def test_amqp_connection_to_a_slave_is_refused(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    params = pika.ConnectionParameters(
        "127.0.0.1", b.ports["amqp"], connection_attempts=1, socket_timeout=5
    )
    # pika reports a close at connection.open as "probable access denied"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as err:
        pika.BlockingConnection(params)
    assert "(320) 'CONNECTION_FORCED - a slave of its broker group" in str(err.value)
    assert f"the master is at 127.0.0.1:{a.ports['amqp']}" in str(err.value)


async def _broker_addrs(port: int, version: int = 479) -> object:
    client = await Client.connect(port)
    try:
        route = await client.ok(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "r1"}, version=version
        )
        return route.body
    finally:
        await client.close()


async def test_remoting_route_names_the_master_and_the_slave(pair) -> None:  # type: ignore[no-untyped-def]
    """Broker 0 the master, broker 1 the slave (RocketMQ's brokerAddrs of a
    master/slave group), from either member; fastjson's unquoted keys for old clients."""
    a, b = pair
    want = {"0": f"127.0.0.1:{a.ports['remoting']}", "1": f"127.0.0.1:{b.ports['remoting']}"}
    for member in (a, b):
        body = await _broker_addrs(member.ports["remoting"])
        assert json.loads(body)["brokerDatas"][0]["brokerAddrs"] == want
    old = await _broker_addrs(a.ports["remoting"], version=400)
    assert b'"brokerAddrs":{0:"%s",1:"%s"}' % (want["0"].encode(), want["1"].encode()) in old


def _exchange(port: int, *frames: bytes) -> list[object]:
    """Send ``frames`` to a replication port; what comes back until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for frame in frames:
            sock.sendall(frame)
        dec = FrameDecoder()
        out: list[object] = []
        while True:
            data = sock.recv(65536)
            if not data:
                return out
            dec.feed(data)
            while (got := dec.next()) is not None:
                out.append(got[1])


def test_bad_input_on_the_replication_port(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    port = a.ports["replication"]
    epoch = a.replication()["epoch"]
    end = a.replication()["log_end"]
    before = log_bytes(a.data_dir)
    hello = encode(epoch, Hello("broker-a", "intruder", 0, []))
    # foreign bytes
    assert _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 8)
    wait_for("the log line", lambda: a.says("bad frame: bad magic"))
    # a forged frame: the epoch changed, the CRC not
    forged = bytearray(hello)
    forged[15] ^= 1
    _exchange(port, bytes(forged))
    wait_for("the log line", lambda: a.says("fails its CRC"))
    # a HELLO from a newer epoch: this master would be stale
    got = _exchange(
        port, encode(epoch + 5, Hello("broker-a", "future", 0, [EpochEntry(epoch + 5, 0)]))
    )
    assert isinstance(got[-1], Refuse) and "stale" in got[-1].reason
    # a frame of another epoch after the handshake
    got = _exchange(port, hello, encode(epoch + 1, Ack(0)))
    assert isinstance(got[-1], Refuse) and "a frame of epoch" in got[-1].reason
    # a slave claiming a position beyond the master's log
    got = _exchange(port, hello, encode(epoch, Ack(end + 10_000)))
    assert isinstance(got[-1], Refuse) and "beyond" in got[-1].reason
    # a slave sending data to its master
    got = _exchange(port, hello, encode(epoch, Data(0, epoch, 0, b"x")))
    assert isinstance(got[-1], Refuse) and "expected ACK" in got[-1].reason
    # nothing damaged: the log is as it was, the real slave still follows
    assert log_bytes(a.data_dir)[: len(before)] == before
    assert b.replication()["connected"] is True
    wait_for("b caught up", lambda: b.replication()["log_end"] == a.replication()["log_end"])


async def test_grpc_route_names_the_master(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    async with channel(b.ports["grpc"]) as ch:
        route = await query_route(stub(ch), "g1", b.ports["grpc"])
    broker = route.message_queues[0].broker
    assert [(x.host, x.port) for x in broker.endpoints.addresses] == [
        ("127.0.0.1", a.ports["grpc"])
    ]


def test_the_users_file_is_replicated(pair) -> None:  # type: ignore[no-untyped-def]
    """Users and their permissions (`lmq users`, a file beside the store) reach the
    slave whole, each time they change."""
    a, b = pair
    a_users = a.data_dir / "users.json"
    users = CliRunner()
    for name in ("alice", "bob"):
        # the file named: edited beside the master (bob after alice needs no administrator)
        result = users.invoke(
            main,
            ["users", "add", name, "--password", "pw-" + name, "--users-file", str(a_users)],
        )
        assert result.exit_code == 0, result.output
        wait_for(
            f"{name} on the slave",
            lambda: (
                (b.data_dir / "users.json").read_bytes() == (a.data_dir / "users.json").read_bytes()
            ),
        )
    assert b"bob" in (b.data_dir / "users.json").read_bytes()
    # both started in open mode: the file's arrival turns logins on, on the slave too
    # (docs/security.md), so a promoted slave does not serve the group in open mode
    for member in (a, b):
        wait_for(
            f"authentication on at {member.name}",
            lambda m=member: m.says("authentication on"),
        )
