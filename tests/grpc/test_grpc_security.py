"""gRPC security against a real ``lmq serve``: the ``authorization`` signature checked
against the users' access keys, ACLs, and TLS on the dedicated and unified TLS ports."""

from __future__ import annotations

import ssl
import subprocess
import urllib.request
from pathlib import Path

import grpc
import grpc.aio
from rocketmq.grpc_protocol import service_pb2

from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule
from protocol.grpc import Code
from tests.gateway.gateway_process import GatewayProcess
from tests.grpc.grpc_core_support import (
    BOUND,
    channel,
    endpoints,
    metadata,
    query_route,
    resource,
    stub,
)


def users(data: Path) -> None:
    data.mkdir(parents=True)
    db = UsersDatabase()
    db.add_user("app", None)
    db.add_access_key("app", "AK_app", "secret-app")
    db.add_acl_rule("app", AclRule.parse("both allowed/#"))
    db.save(data / "users.json")


async def test_signature_and_acl(tmp_path: Path) -> None:
    data = tmp_path / "data"
    users(data)
    process = GatewayProcess(data).start()
    try:
        for port in (process.ports["grpc"], process.ports["unified"]):
            async with channel(port) as ch:
                s = stub(ch)
                signed = {"ak": "AK_app", "sk": "secret-app"}
                assert (await query_route(s, "allowed", port, **signed)).status.code == Code.OK
                for refused in ({}, {"ak": "AK_app", "sk": "wrong"},
                                {"ak": "AK_nobody", "sk": "secret-app"}):
                    reply = await query_route(s, "allowed", port, **refused)
                    assert reply.status.code == Code.UNAUTHORIZED, refused
                    assert not reply.message_queues
                # a malformed header
                md = [(k, v) for k, v in metadata() if k != "authorization"]
                md.append(("authorization", "Basic dXNlcjpwYXNz"))
                reply = await s.QueryRoute(
                    service_pb2.QueryRouteRequest(topic=resource("allowed")), metadata=md,
                    timeout=BOUND)
                assert reply.status.code == Code.UNAUTHORIZED
                assert "unsupported authorization scheme" in reply.status.message
                # the ACL: consuming "secret" is not allowed, "allowed" is
                for topic, code in (("allowed", Code.OK), ("secret", Code.FORBIDDEN)):
                    r = await s.QueryAssignment(
                        service_pb2.QueryAssignmentRequest(
                            topic=resource(topic), group=resource("G"),
                            endpoints=endpoints(port)),
                        metadata=metadata(**signed), timeout=BOUND)
                    assert r.status.code == code, topic
                # a Telemetry stream with bad credentials gets one status and ends
                call = s.Telemetry(iter([service_pb2.TelemetryCommand()]),
                                   metadata=metadata("t1", ak="AK_app", sk="wrong"),
                                   timeout=BOUND)
                replies = [r async for r in call]
                assert [r.status.code for r in replies] == [Code.UNAUTHORIZED]
    finally:
        process.stop()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(d: Path) -> None:
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
             "/CN=Test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "server.ext", "-out", "server.pem",
             cwd=d)


async def test_tls_on_the_grpc_tls_and_unified_tls_ports(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    certificates(pki)
    process = GatewayProcess(
        tmp_path / "data", "--tls-cert", str(pki / "server.pem"),
        "--tls-key", str(pki / "server.key"), "--unified-tls-port", "auto",
        "--grpc-tls-port", "auto", "--mqtts-port", "0", "--amqps-port", "0").start()
    try:
        root = (pki / "ca.pem").read_bytes()
        for name in ("grpc_tls", "unified_tls"):
            port = process.ports[name]
            async with channel(port, tls_root=root) as ch:
                route = await query_route(stub(ch), "Secure", port)
                assert route.status.code == Code.OK, name
                assert len(route.message_queues) == 8
            # plaintext gRPC on a TLS port does not get through
            async with channel(port) as ch:
                try:
                    await query_route(stub(ch), "Secure", port)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE
                else:
                    raise AssertionError(f"plaintext gRPC served on {name}")
        # HTTPS on the unified TLS port still negotiates HTTP/1.1 (ALPN offers h2 too)
        context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        context.set_alpn_protocols(["h2", "http/1.1"])
        url = f"https://localhost:{process.ports['unified_tls']}/health"
        with urllib.request.urlopen(url, timeout=BOUND, context=context) as response:
            assert response.status == 200
    finally:
        process.stop()
