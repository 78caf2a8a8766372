"""The connector over TLS: to a gateway's TLS twin of the unified port with the cluster's
``tls = { ca_file = ... }`` (the certificate checked against that CA and the address),
and a certificate that does not verify (the rule stops and says why)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..gateway_process import GatewayProcess
from .connector_support import (
    ConnectorProcess,
    bodies_of,
    eventually,
    read_all,
    send,
    two_gateways,
)


@pytest.fixture(scope="module")
def two_tls(
    tmp_path_factory: pytest.TempPathFactory, pki: dict[str, tuple[Path, Path]]
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Gateway a (plain) and gateway b with TLS listeners (the unified port's twin)."""
    cert, key = pki["server"]
    with two_gateways(
        tmp_path_factory.mktemp("tls"), "--tls-cert", str(cert), "--tls-key", str(key),
        "--unified-tls-port", "auto", "--mqtts-port", "0", "--amqps-port", "0",
    ) as pair:  # fmt: skip
        yield pair


def rules(a: GatewayProcess, b: GatewayProcess, ca: Path, topic: str) -> str:
    return f"""
heartbeat_interval = 0
retry_initial = 0.05
retry_max = 0.5

[clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:{a.ports["unified"]}"]

[clusters.b]
kind = "gateway"
endpoints = ["127.0.0.1:{b.ports["unified_tls"]}"]
tls = {{ ca_file = "{ca}" }}

[[rules]]
name = "r"
source = "a"
topic = "{topic}"
target = "b"
start = "earliest"
"""


async def test_copies_to_a_gateway_over_tls_checking_the_ca(two_tls, pki, tmp_path) -> None:
    a, b = two_tls
    sent = await send(a.ports["unified"], "secure", 20)
    path = tmp_path / "rules.toml"
    path.write_text(rules(a, b, pki["server"][0], "secure"))
    conn = ConnectorProcess(path).start()
    try:

        async def copied():
            got = await read_all(b.ports["unified"], "secure")
            return got if len(bodies_of(got)) >= 20 else None

        got = await eventually(copied)
        assert got, conn.output
        assert bodies_of(got) == sorted(sent)
        status = conn.status()["r"]
        assert status["state"] == "running" and status["messages"] == 20
    finally:
        assert conn.stop() == 0


async def test_a_certificate_that_does_not_verify_stops_the_rule(two_tls, pki, tmp_path) -> None:
    a, b = two_tls
    await send(a.ports["unified"], "insecure", 5)
    path = tmp_path / "rules.toml"
    # the CA given is another certificate's: b's does not chain to it
    # and a rule to b's plain port, which goes on (the process stays up: it exits 1 only
    # when every rule stopped)
    path.write_text(
        rules(a, b, pki["other"][0], "insecure")
        + f"""
[clusters.plain]
kind = "gateway"
endpoints = ["127.0.0.1:{b.ports["unified"]}"]

[[rules]]
name = "p"
source = "a"
topic = "insecure"
target = "plain"
target_topic = "plain-insecure"
start = "earliest"
"""
    )
    conn = ConnectorProcess(path).start()
    try:

        async def stopped():
            s = conn.status()["r"]
            return s if s["state"] == "stopped" else None

        status = await eventually(stopped)
        assert status, conn.status()["r"]
        error = status["last_error"]
        assert "cluster b" in error and "certificate does not verify" in error, error
        assert status["messages"] == 0
        assert bodies_of(await read_all(b.ports["unified"], "insecure")) == []
        assert any("certificate does not verify" in line for line in conn.output)

        async def plain_copied():
            return len(bodies_of(await read_all(b.ports["unified"], "plain-insecure"))) == 5

        assert await eventually(plain_copied), conn.output
        assert conn.status()["p"]["state"] == "running"
    finally:
        conn.stop()
