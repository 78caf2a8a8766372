"""CONNECT: who the client is (:func:`login`) and which session it gets (:func:`accept`).

:func:`login` checks a client certificate's subject first, then the user name and
password; the password check (scrypt, tens of milliseconds) runs in a thread so the
event loop never waits for it. :func:`accept` applies the session rules: a client id
owned by another user is refused (no takeover across users), an online session is taken
over (the old connection gets DISCONNECT 0x8E), clean start ends an existing session;
then the will, the expiry and the CONNACK with our limits. The handler sends the CONNACK
and starts delivery.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.auth import Authenticator, Principal
from gateway.auth.authenticator import LoginResult
from gateway.auth.subjects import subject_from_peercert
from gateway.mqtt.session_state import NEVER, WillState
from protocol.mqtt import Connack, Connect, MQTTVersion, Properties, ReasonCode

if TYPE_CHECKING:
    from gateway.mqtt.frontend import MqttFrontEnd
    from gateway.mqtt.handler import MqttHandler
    from gateway.mqtt.sessions import Session

#: Inbound topic aliases we accept (MQTT 5 Topic Alias Maximum).
TOPIC_ALIAS_MAXIMUM = 1024
_V5 = MQTTVersion.V5


async def login(
    auth: Authenticator, connect: Connect, peercert: Any, peer_host: str
) -> Principal | LoginResult:
    """The principal of a CONNECT, or why it is refused. A certificate whose subject
    maps to a user logs in as that user when the CONNECT names no other user."""
    if peercert:
        try:
            subject = subject_from_peercert(peercert)
        except ValueError:
            subject = ""
        if subject:
            by_cert = auth.authenticate_certificate(
                subject, client_id=connect.client_id, peer_host=peer_host
            )
            if isinstance(by_cert, Principal) and connect.username in (
                None,
                "",
                by_cert.username,
            ):
                return by_cert
    return await asyncio.to_thread(
        auth.authenticate,
        connect.username,
        connect.password,
        client_id=connect.client_id,
        peer_host=peer_host,
    )


@dataclass(slots=True)
class Accepted:
    session: Session
    #: whether the session existed (CONNACK session present)
    present: bool
    connack: Connack
    #: QoS 1/2 deliveries the client takes unacknowledged (its Receive Maximum, capped)
    receive_max: int
    #: MQTT 5 Request Problem Information: reason strings on DISCONNECT
    problem_information: bool
    #: the keep-alive we impose (``max_keep_alive``), None if the client's stands
    server_keep_alive: int | None


@dataclass(slots=True)
class Refused:
    connack: Connack
    reason: str


def accept(
    front: MqttFrontEnd, handler: MqttHandler, connect: Connect, principal: Principal
) -> Accepted | Refused:
    """The session ``connect`` opens for ``principal`` (taken over or new), with its
    state set from the CONNECT, and the CONNACK to send. Not yet online: the caller
    attaches it to the connection."""
    config = front.ctx.config
    version = connect.protocol_version
    props = connect.properties
    intro = front.ctx.introspection
    if intro.replication_role() == "slave":  # docs/replication.md "Clients follow"
        master = intro.replication_master("mqtt") or intro.replication_master("unified")
        return Refused(  # 3.1.1 gets return code 3 (server unavailable): the next address
            Connack(reason_code=ReasonCode.USE_ANOTHER_SERVER,
                    properties=Properties(server_reference=master or None)),
            f"a slave of its broker group (the master: {master or 'unknown'})",
        )
    if props.authentication_method is not None:
        return Refused(
            Connack(reason_code=ReasonCode.BAD_AUTHENTICATION_METHOD),
            "enhanced authentication is not supported",
        )
    client_id = connect.client_id
    assigned = None
    if not client_id:
        client_id = assigned = "lmq-" + secrets.token_hex(8)
    receive_max = config.max_inflight
    if version == _V5:
        expiry = props.session_expiry_interval or 0
        receive_max = min(receive_max, props.receive_maximum or 65535)
    else:
        expiry = 0 if connect.clean_start else NEVER
    owner = front.session_owner(client_id)
    if owner is not None and owner != principal.username:
        return Refused(
            Connack(reason_code=ReasonCode.NOT_AUTHORIZED), "client id belongs to another user"
        )
    session, present = front.sessions_for_connect(client_id, connect.clean_start, handler)
    state = session.state
    state.username = principal.username
    state.expiry = expiry
    state.protocol_level = int(version)
    will = connect.will
    if will is not None:
        wp = will.properties
        state.will = WillState(
            topic=will.topic,
            payload=will.payload,
            qos=will.qos,
            retain=will.retain,
            delay=(wp.will_delay_interval or 0) if version == _V5 else 0,
            properties=front.will_properties(wp) if version == _V5 else {},
        )
    else:
        state.will = None
    max_keep_alive = config.max_keep_alive
    server_keep_alive = None
    if max_keep_alive and (connect.keep_alive == 0 or connect.keep_alive > max_keep_alive):
        server_keep_alive = max_keep_alive
    connack_props = Properties()
    if version == _V5:
        connack_props = Properties(
            receive_maximum=config.receive_maximum,
            topic_alias_maximum=TOPIC_ALIAS_MAXIMUM,
            maximum_packet_size=config.max_packet_size,
            assigned_client_identifier=assigned,
            server_keep_alive=server_keep_alive,
        )
    return Accepted(
        session=session,
        present=present,
        connack=Connack(session_present=present, properties=connack_props),
        receive_max=receive_max,
        problem_information=props.request_problem_information != 0,
        server_keep_alive=server_keep_alive,
    )


__all__ = ["TOPIC_ALIAS_MAXIMUM", "Accepted", "Refused", "accept", "login"]
