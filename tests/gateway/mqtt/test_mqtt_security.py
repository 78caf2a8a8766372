"""Authentication, ACLs, session ownership, exposure rules, TLS and limits on MQTT,
against a gateway process with a real users file and certificates made at test time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from click.testing import CliRunner
from paho.mqtt.enums import CallbackAPIVersion

from cli.main import main
from protocol.mqtt import (
    Connack,
    Connect,
    MQTTVersion,
    Puback,
    Publish,
    ReasonCode,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
)

from ..gateway_process import GatewayProcess
from ..mqtt_clients import OPEN, Paho, RawClient

V5, V311 = MQTTVersion.V5, MQTTVersion.V3_1_1


def lmq(*args: str) -> None:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture
def secured(tmp_path: Path):
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "alice", "--password", "wonderland", *d)
    lmq("users", "add", "bob", "--password", "builder", *d)
    lmq("users", "acl", "add", "alice", "--both", "devices/%c/#", *d)
    lmq("users", "acl", "add", "alice", "--subscribe", "public/#", *d)
    lmq("users", "acl", "add", "bob", "--both", "public/#", *d)
    gw = GatewayProcess(data).start()
    yield gw
    gw.stop()


def login(
    port: int, client_id: str, user: str | None, password: str | None, version=V5
) -> tuple[RawClient, Connack]:
    c = RawClient(port, version)
    c.send(
        Connect(
            client_id=client_id,
            protocol_version=version,
            username=user,
            password=password.encode() if password else None,
        )
    )
    return c, c.recv()


def test_logins(secured):
    port = secured.mqtt_port
    _, ack = login(port, "a1", "alice", "wonderland")
    assert ack.reason_code == 0
    c, ack = login(port, "a2", "alice", "wrong")
    assert ack.reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD and c.closed_by_server()
    c, ack = login(port, "a3", "alice", "wrong", V311)
    assert ack.reason_code == 4 and c.closed_by_server()  # 3.1.1: bad user name or password
    c, ack = login(port, "anon", None, None)
    assert ack.reason_code == ReasonCode.NOT_AUTHORIZED  # no anonymous with a users file


def test_acl_on_publish_and_subscribe(secured):
    port = secured.mqtt_port
    c, _ = login(port, "dev1", "alice", "wonderland")
    c.send(
        Subscribe(
            packet_id=1,
            subscriptions=(
                Subscription("devices/dev1/#", 1),
                Subscription("devices/dev2/#", 1),
                Subscription("public/#", 1),
                Subscription("$SYS/#", 1),
            ),
        )
    )
    ack = c.recv()
    assert isinstance(ack, Suback)
    assert ack.reason_codes == (1, ReasonCode.NOT_AUTHORIZED, 1, ReasonCode.NOT_AUTHORIZED)
    for pid, topic in enumerate(["devices/dev1/x", "devices/dev2/x", "public/x", "$SYS/x"], 1):
        c.send(Publish(topic=topic, payload=b"p", qos=1, packet_id=pid))
    packets = [c.recv() for _ in range(5)]
    acks = [p for p in packets if isinstance(p, Puback)]
    delivered = [p for p in packets if isinstance(p, Publish)]
    assert [a.reason_code for a in acks] == [
        0,
        ReasonCode.NOT_AUTHORIZED,
        ReasonCode.NOT_AUTHORIZED,
        ReasonCode.NOT_AUTHORIZED,
    ]
    assert [p.topic for p in delivered] == ["devices/dev1/x"]


def test_no_takeover_of_another_users_session(secured):
    port = secured.mqtt_port
    alice, ack = login(port, "shared-id", "alice", "wonderland")
    assert ack.reason_code == 0
    bob, ack = login(port, "shared-id", "bob", "builder")
    assert ack.reason_code == ReasonCode.NOT_AUTHORIZED
    alice.send(Publish(topic="devices/shared-id/ping", payload=b"", qos=1, packet_id=1))
    assert isinstance(alice.recv(), Puback)  # alice's connection was not taken over


def test_public_bind_needs_users_or_allow_anonymous(tmp_path):
    gw = GatewayProcess(tmp_path / "d", "--bind", "0.0.0.0", "--mqtt-port", "0")
    with pytest.raises(RuntimeError, match="refusing to listen on 0.0.0.0 without authentication"):
        gw.start()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    d = tmp_path / "pki"
    d.mkdir()
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=Test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=d,
    )
    for name, cn in (("server", "localhost"), ("client", "device-7")):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={cn}/O=Fleet",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        ext = d / f"{name}.ext"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            ext.name,
            "-out",
            f"{name}.pem",
            cwd=d,
        )
    return d


def _tls_client(port: int, pki: Path, client_id: str, cert: bool) -> tuple[mqtt.Client, int]:
    result: list[int] = []
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    c.tls_set(
        ca_certs=str(pki / "ca.pem"),
        certfile=str(pki / "client.pem") if cert else None,
        keyfile=str(pki / "client.key") if cert else None,
    )
    c.on_connect = lambda cl, u, f, rc, p=None: result.append(rc.value)
    c.connect("127.0.0.1", port)
    c.loop_start()
    OPEN.append(c.socket())
    import time

    deadline = time.monotonic() + 5
    while not result and time.monotonic() < deadline:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return c, result[0] if result else -1


def test_tls_listener_and_client_certificate_login(tmp_path, certs):
    data = tmp_path / "data"
    lmq("users", "add", "device7", "--no-password", "--data-dir", str(data))
    # the subject as an operator reads it off the certificate (RFC 2253 / 4514 order)
    subject = (
        subprocess.run(
            [
                "openssl",
                "x509",
                "-in",
                str(certs / "client.pem"),
                "-noout",
                "-subject",
                "-nameopt",
                "RFC2253",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .removeprefix("subject=")
    )
    lmq("users", "map-cert", "device7", subject, "--data-dir", str(data))
    gw = GatewayProcess(
        data,
        "--tls-cert",
        str(certs / "server.pem"),
        "--tls-key",
        str(certs / "server.key"),
        "--tls-ca",
        str(certs / "ca.pem"),
        "--tls-client-cert",
        "optional",
        "--mqtts-port",
        "auto",
        "--amqps-port",
        "0",
        "--unified-tls-port",
        "auto",
    ).start()
    try:
        port = gw.ports["mqtts"]
        _, rc = _tls_client(port, certs, "dev-7", cert=True)
        assert rc == 0  # logged in by its certificate's subject, no password
        _, rc = _tls_client(port, certs, "nobody", cert=False)
        assert rc == ReasonCode.NOT_AUTHORIZED  # no certificate, no credentials
        # plain MQTT to a TLS port gets no CONNACK: the TLS layer refuses the bytes
        import socket

        from protocol.mqtt import packet_bytes

        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.sendall(packet_bytes(Connect(client_id="plain", protocol_version=V5), V5))
            try:
                reply = raw.recv(64)
            except ConnectionResetError:
                reply = b""
            assert not reply.startswith(b"\x20")
    finally:
        gw.stop()


def test_subscription_limit(tmp_path):
    config = tmp_path / "gw.toml"
    config.write_text("max_subscriptions_per_session = 2\n")
    gw = GatewayProcess(tmp_path / "d", "--config", str(config)).start()
    try:
        c = RawClient(gw.mqtt_port, V5)
        c.send(Connect(client_id="many", protocol_version=V5))
        assert isinstance(c.recv(), Connack)
        c.send(
            Subscribe(packet_id=1, subscriptions=tuple(Subscription(f"t/{i}", 0) for i in range(3)))
        )
        assert c.recv().reason_codes == (0, 0, ReasonCode.QUOTA_EXCEEDED)
    finally:
        gw.stop()


def _gateway_with(tmp_path: Path, **options: int) -> GatewayProcess:
    config = tmp_path / "limits.toml"
    config.write_text("".join(f"{k} = {v}\n" for k, v in options.items()))
    return GatewayProcess(tmp_path / "d", "--config", str(config)).start()


def test_publish_rate_limit_slows_a_publisher_down(tmp_path):
    gw = _gateway_with(tmp_path, max_publish_rate=50)
    try:
        sub = Paho(gw.mqtt_port, "sub")
        sub.subscribe("rate/#", qos=0)
        c = RawClient(gw.mqtt_port, V311)
        c.send(Connect(client_id="fast", protocol_version=V311))
        assert isinstance(c.recv(), Connack)
        import time

        started = time.monotonic()
        for i in range(150):
            c.send(Publish(topic="rate/x", payload=b"%d" % i, qos=1, packet_id=i + 1))
        acks = [c.recv(timeout=10) for _ in range(150)]
        elapsed = time.monotonic() - started
        assert all(isinstance(a, Puback) for a in acks)
        assert elapsed >= 1.5  # 150 messages at 50/s with a burst of 50: about 2 s
        assert len(sub.get_n(150, timeout=10)) == 150  # slowed down, nothing lost
    finally:
        gw.stop()


def test_max_queued_messages_skips_the_oldest(tmp_path):
    gw = _gateway_with(tmp_path, max_queued_messages=5)
    try:
        sub = Paho(gw.mqtt_port, "behind", clean=False)
        sub.subscribe("q/#", qos=1)
        sub.disconnect()
        pub = Paho(gw.mqtt_port, "pub")
        for i in range(20):
            pub.publish("q/x", b"%d" % i, qos=1)
        sub = Paho(gw.mqtt_port, "behind", clean=False)
        got = [int(m.payload) for m in sub.get_n(5)]
        assert got == [15, 16, 17, 18, 19]
        assert sub.nothing_more()
    finally:
        gw.stop()


def test_amqps_and_unified_tls_listeners(tmp_path, certs):
    """AMQP over TLS (pika) and the unified TLS port sniffing HTTPS after the handshake."""
    import json
    import ssl
    import urllib.request

    import pika

    gw = GatewayProcess(
        tmp_path / "d",
        "--tls-cert",
        str(certs / "server.pem"),
        "--tls-key",
        str(certs / "server.key"),
        "--mqtts-port",
        "0",
        "--amqps-port",
        "auto",
        "--unified-tls-port",
        "auto",
    ).start()
    try:
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        params = pika.ConnectionParameters(
            "127.0.0.1",
            gw.ports["amqps"],
            ssl_options=pika.SSLOptions(ctx, "localhost"),
            connection_attempts=1,
            socket_timeout=5,
        )
        conn = pika.BlockingConnection(params)
        try:
            ch = conn.channel()
            ch.queue_declare("over-tls")
            ch.basic_publish("", "over-tls", b"secret")
            assert ch.basic_get("over-tls", auto_ack=True)[2] == b"secret"
        finally:
            conn.close()
        url = f"https://localhost:{gw.ports['unified_tls']}/health"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
            assert json.loads(resp.read())["status"] == "ok"
    finally:
        gw.stop()


# -- deny rules under wider subscriptions ---------------------------------------------------


@pytest.fixture
def denying(tmp_path: Path):
    """carol: "allow # except secret/#"; writer may publish anywhere."""
    data = tmp_path / "data"
    d = ["--data-dir", str(data)]
    lmq("users", "add", "carol", "--password", "carol-pw", *d)
    lmq("users", "add", "writer", "--password", "writer-pw", *d)
    lmq("users", "acl", "add", "carol", "--deny", "secret/#", *d)
    lmq("users", "acl", "add", "carol", "--subscribe", "#", *d)
    lmq("users", "acl", "add", "writer", "--publish", "#", *d)
    gw = GatewayProcess(data).start()
    yield gw
    gw.stop()


def _write(port: int, *topics: str, retain: bool = False) -> None:
    writer = Paho(port, "writer", username="writer", password="writer-pw")
    for topic in topics:
        writer.publish(topic, topic.encode(), qos=1, retain=retain)
    writer.disconnect()


def _topics_until(c: RawClient, last: str) -> list[str]:
    """Topics delivered to ``c`` (QoS 1 ones acknowledged) up to and including ``last``."""
    topics: list[str] = []
    while not topics or topics[-1] != last:
        packet = c.recv()
        assert isinstance(packet, Publish), packet
        if packet.qos:
            c.send(Puback(packet_id=packet.packet_id))
        topics.append(packet.topic)
    return topics


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_deny_rule_filters_what_a_wider_subscription_delivers(denying, version):
    refused = ReasonCode.NOT_AUTHORIZED if version == V5 else 0x80
    c, ack = login(denying.mqtt_port, "carol-1", "carol", "carol-pw", version)
    assert ack.reason_code == 0
    wanted = ("#", "secret/#", "secret/x", "+/x")
    c.send(Subscribe(packet_id=1, subscriptions=tuple(Subscription(f, 1) for f in wanted)))
    # '#' and '+/x' only overlap the deny rule: granted; it covers the other two: refused
    assert c.recv().reason_codes == (1, refused, refused, 1)
    c.send(Unsubscribe(packet_id=2, topic_filters=("+/x",)))
    assert isinstance(c.recv(), Unsuback)
    _write(denying.mqtt_port, "a/b", "secret/x", "secret/y/z", "secret", "secretive", "a/end")
    assert _topics_until(c, "a/end") == ["a/b", "secretive", "a/end"]


@pytest.mark.parametrize("version", [V311, V5], ids=["3.1.1", "5.0"])
def test_deny_rule_filters_overlapping_subscriptions(denying, version):
    """'#' and '+/x' overlap each other (one merged delivery per message) and the deny
    rule: a denied topic matched by both is delivered through neither."""
    c, ack = login(denying.mqtt_port, "carol-o", "carol", "carol-pw", version)
    assert ack.reason_code == 0
    c.send(Subscribe(packet_id=1, subscriptions=(Subscription("#", 1), Subscription("+/x", 1))))
    assert c.recv().reason_codes == (1, 1)
    _write(denying.mqtt_port, "a/x", "secret/x", "secret/y", "b/x", "a/end")
    assert _topics_until(c, "a/end") == ["a/x", "b/x", "a/end"]


def test_deny_rule_filters_shared_subscriptions(denying):
    c, _ = login(denying.mqtt_port, "carol-s", "carol", "carol-pw")
    c.send(
        Subscribe(
            packet_id=1,
            subscriptions=(Subscription("$share/g/#", 1), Subscription("$share/g/secret/+", 1)),
        )
    )
    assert c.recv().reason_codes == (1, ReasonCode.NOT_AUTHORIZED)
    _write(denying.mqtt_port, "secret/x", "a/b", "secret/y", "a/end")
    assert _topics_until(c, "a/end") == ["a/b", "a/end"]


def test_deny_rule_filters_retained_messages(denying):
    _write(denying.mqtt_port, "a/r", "secret/r", "b/r", retain=True)
    out = subprocess.run(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            str(denying.mqtt_port),
            "-V",
            "mqttv311",
            "-u",
            "carol",
            "-P",
            "carol-pw",
            "-t",
            "#",
            "-t",
            "+/r",
            "-v",
            "-W",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=15,
    ).stdout
    # each retained message once per matching subscription, the secret one never
    assert sorted(out.splitlines()) == ["a/r a/r", "a/r a/r", "b/r b/r", "b/r b/r"]


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
def test_persistent_session_keeps_filtering_across_a_restart(denying, v5):
    kwargs = {"session_expiry": 3600} if v5 else {}
    login_as = {"username": "carol", "password": "carol-pw", "v5": v5, "clean": False, **kwargs}
    carol = Paho(denying.mqtt_port, "carol-p", **login_as)
    carol.subscribe("#", qos=1)
    carol.disconnect()
    _write(denying.mqtt_port, "a/1", "secret/1", "a/2", "secret/2")
    denying.restart()  # the session comes back from disk; its filter is recomputed
    carol = Paho(denying.mqtt_port, "carol-p", **login_as)
    assert carol.session_present
    assert [m.topic for m in carol.get_n(2)] == ["a/1", "a/2"]
    _write(denying.mqtt_port, "secret/3", "a/3")
    assert [m.topic for m in carol.get_n(1)] == ["a/3"]
    assert carol.nothing_more()
    carol.disconnect()
    carol = Paho(denying.mqtt_port, "carol-p", **login_as)
    assert carol.session_present and carol.nothing_more()  # denied ones were consumed


def test_rule_changes_apply_at_the_next_connect(denying):
    # the file named: edited directly beside the gateway (no administrator for its API)
    d = ["--users-file", str(denying.data_dir / "users.json")]
    login_as = {"username": "carol", "password": "carol-pw", "clean": False}
    carol = Paho(denying.mqtt_port, "carol-r", **login_as)
    carol.subscribe("#", qos=1)
    carol.disconnect()
    lmq("users", "acl", "add", "carol", "--deny", "news/#", "--position", "1", *d)
    _write(denying.mqtt_port, "news/x", "a/x")
    carol = Paho(denying.mqtt_port, "carol-r", **login_as)
    assert [m.topic for m in carol.get_n(1)] == ["a/x"] and carol.nothing_more()
    carol.disconnect()
    # a deny that covers the subscription: kept, but it delivers nothing any more
    lmq("users", "acl", "add", "carol", "--deny", "#", "--position", "1", *d)
    _write(denying.mqtt_port, "a/y")
    carol = Paho(denying.mqtt_port, "carol-r", **login_as)
    assert carol.session_present and carol.nothing_more()
