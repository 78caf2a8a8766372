"""gRPC signatures and ACLs with the official clients: with a users file, a client
configured with an access key and its secret (``Credentials`` / ``sessionCredentials``)
signs every call (``authorization: MQv2-HMAC-SHA1 ...``) and is served as that user, with
the user's topic ACL; a wrong secret, an unknown key or no credentials are refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ..gateway_process import GatewayProcess
from .clients import NodeClient, grpc_endpoint
from .conftest import Clients

pytestmark = pytest.mark.slow

WAIT = 30.0
USERS = [("app", "AK_app", "secret-app", ["both grpcAllowed/#"])]


def test_python_client_signed_with_access_keys(
    start_gateway: Callable[..., GatewayProcess], clients: Clients
) -> None:
    gw = start_gateway(users=USERS)
    endpoint = grpc_endpoint(gw)
    p = clients.py("producer", endpoints=endpoint, topics=["grpcAllowed"],
                   ak="AK_app", sk="secret-app")
    sent = p.send_message("grpcAllowed", "signed", tag="T")
    # the topic ACL applies: no publish right on grpcSecret
    denied = p.try_call("send", message={"topic": "grpcSecret", "body": "x", "tag": "T"})
    assert "error" in denied
    c = clients.py("simple", endpoints=endpoint, group="GID_auth",
                   subscriptions={"grpcAllowed": "*"}, ak="AK_app", sk="secret-app",
                   await_s=3)
    got = c.receive_all(1, WAIT)
    assert got[0]["id"] == sent["id"] and got[0]["body"] == "signed"
    c.ack(got[0]["id"])
    # a wrong secret, an unknown access key, no credentials: every send refused
    for creds in ({"ak": "AK_app", "sk": "wrong"}, {"ak": "AK_nobody", "sk": "secret-app"},
                  {}):
        bad = clients.py("producer", endpoints=endpoint, topics=["grpcAllowed"], **creds)
        refused = bad.try_call("send", message={"topic": "grpcAllowed", "body": "nope",
                                                "tag": "T"})
        assert "error" in refused, creds
    # nothing refused reached the topic
    assert c.receive(16, 2) == []


def test_node_client_signed_with_access_keys(
    start_gateway: Callable[..., GatewayProcess], clients: Clients
) -> None:
    gw = start_gateway(users=USERS)
    endpoint = grpc_endpoint(gw)
    p = clients.node("producer", endpoints=endpoint, topics=["grpcAllowed"],
                     ak="AK_app", sk="secret-app")
    sent = p.send_message("grpcAllowed", "signed-node", tag="T")
    c = clients.node("simple", endpoints=endpoint, group="GID_auth_node",
                     subscriptions={"grpcAllowed": "*"}, ak="AK_app", sk="secret-app",
                     await_s=3)
    got = c.receive_all(1, WAIT)
    assert got[0]["id"] == sent["id"] and got[0]["body"] == "signed-node"
    c.ack(got[0]["id"])
    # a wrong secret: the route query at startup is refused (three attempts), so the
    # Node client's startup fails
    bad = NodeClient("producer", endpoints=endpoint, topics=["grpcAllowed"],
                     ak="AK_app", sk="wrong")
    clients.started.append(bad)
    with pytest.raises(AssertionError, match="failed"):
        bad.ready(timeout=30)
