"""The gateway's configuration: a frozen dataclass, loaded from a TOML file and merged
with command-line flags (flags win).

Every option is documented where it is defined and in docs/configuration.md. The TOML
file holds the top-level options as plain keys and the storage engine's options in a
``[store]`` table (the fields of :class:`broker_core.StoreConfig`). Later tables
(``[tls]``, ``[auth]``) get their own section the same way.

Any problem — an unknown key, a value of the wrong type or out of range, a file that is
not TOML — raises :class:`ConfigError` with a one-line message naming the key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker_core import Durability, StoreConfig
from gateway.connector.rules import Rules

#: A listener port: 1-65535, 0 = the listener is disabled, ``"auto"`` = any free port
#: (the port actually bound is reported by the gateway; meant for tests and tooling).
Port = int | str
AUTO = "auto"
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
TLS_LISTENERS = ("mqtts", "amqps", "unified_tls", "remoting_tls", "grpc_tls")
PROXY_PROTOCOL_MODES = ("off", "v1", "v2", "any")
#: docs/replication.md: one node; a static pair's master or slave; etcd decides.
REPLICATION_ROLES = ("none", "master", "slave", "auto")
REPLICATION_ACKS = ("async", "sync")
#: Listener names ``proxy_protocol_listeners`` may list (gateway.server.LISTENERS).
LISTENER_NAMES = (
    "mqtt", "amqp", "unified", "remoting", "mqtts", "amqps", "unified_tls", "remoting_tls",
    "http", "admin",
)
#: Largest ``remoting_max_frame``: a remoting frame's length field then has a first
#: byte below 0x10, which keeps the unified port's sniffers disjoint (gateway.sniff).
REMOTING_FRAME_LIMIT = 2**28 - 1
CLIENT_CERT_MODES = ("none", "optional", "required")


class ConfigError(ValueError):
    """A configuration problem; ``str()`` is a one-line message naming the key."""


class BindError(OSError):
    """A listener cannot bind its port (in use, or not allowed); ``str()`` is one line
    naming the listener, the address and the option (flag) that changes the port."""

    def __init__(self, listener: str, host: str, port: int, reason: str | OSError) -> None:
        if isinstance(reason, OSError):
            reason = os.strerror(reason.errno) if reason.errno else str(reason)
        reason = reason.lower()
        flag = "--" + listener.replace("_", "-") + "-port"
        super().__init__(
            f"{listener} listener: cannot bind {host}:{port} ({reason}); choose another port"
            f" with {flag} PORT ({listener}_port in a config file; auto picks a free one,"
            " 0 disables the listener)"
        )
        self.listener = listener
        self.port = port


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    #: The data directory of the store (created if missing).
    data_dir: Path = Path("./lmq-data")
    #: The address every listener binds. 127.0.0.1 by default: exposing the gateway is an
    #: explicit choice: a non-loopback bind needs users (docs/security.md) or
    #: ``allow_anonymous``.
    bind: str = "127.0.0.1"
    #: Plain MQTT listener.
    mqtt_port: Port = 1883
    #: Plain AMQP 0-9-1 listener.
    amqp_port: Port = 5672
    #: The unified port: the first bytes of a connection choose MQTT, AMQP, HTTP
    #: (/health, /metrics) or RocketMQ remoting. 8080 is also RocketMQ 5's proxy
    #: remoting port, so RocketMQ clients pointed at the proxy address need nothing more.
    unified_port: Port = 8080
    #: A dedicated RocketMQ remoting listener (no sniffing). Disabled by default: the
    #: unified port already serves remoting; 10911 (a broker's port) is the usual choice.
    remoting_port: Port = 0
    #: RocketMQ 5's gRPC (``apache.rocketmq.v2``) on its own port (RocketMQ's
    #: grpcServerPort, 8081). The unified port serves gRPC too (the same door,
    #: gateway.grpc.server); 0 disables this one.
    grpc_port: Port = 8081
    #: Open connections, all listeners together; more are closed at accept.
    max_connections: int = 10_000
    #: Open connections from one source address (0 = no per-address limit).
    max_connections_per_address: int = 0
    #: Largest MQTT packet / AMQP frame a front end accepts or sends, in bytes. The
    #: default holds a body of the store's default ``max_message_bytes`` (16 MiB) plus
    #: 64 KiB of topic and properties; the message size itself is
    #: ``store.max_message_bytes``, for every protocol.
    max_packet_size: int = 16 * 1024 * 1024 + 64 * 1024
    #: Seconds a new connection has to identify its protocol and finish its handshake
    #: (MQTT CONNECT, AMQP connection.open); silent or slow ones are closed.
    connect_timeout: float = 10.0
    #: Seconds a graceful shutdown waits for connections to close after saying goodbye,
    #: before aborting the rest.
    shutdown_timeout: float = 10.0
    #: Unsent output above which a connection's writer is paused (the front end waits on
    #: ``conn.drain()``); it resumes below a quarter of this.
    write_buffer_high: int = 256 * 1024
    #: Unsent output above which a connection is aborted as a slow consumer. Bounds the
    #: memory of a connection whose peer stops reading.
    write_buffer_max: int = 32 * 1024 * 1024
    #: MQTT over TLS (the listener runs only when ``tls_cert`` is set).
    mqtts_port: Port = 8883
    #: AMQP over TLS (only with ``tls_cert``).
    amqps_port: Port = 5671
    #: The unified port over TLS: MQTT, AMQP and HTTPS sniffed after the handshake (only
    #: with ``tls_cert``).
    unified_tls_port: Port = 8443
    #: RocketMQ remoting over TLS (only with ``tls_cert``; disabled by default, as
    #: ``remoting_port``).
    remoting_tls_port: Port = 0
    #: gRPC over TLS on its own port (only with ``tls_cert``; disabled by default: the
    #: unified TLS port serves gRPC over TLS too). Client certificates as ``tls_ca`` and
    #: ``tls_client_cert`` say (``optional`` verifies one when sent).
    grpc_tls_port: Port = 0
    #: ReceiveMessage calls one gRPC client (``x-mq-client-id``) may have open at once;
    #: more are answered TOO_MANY_REQUESTS. A push consumer keeps one per assigned queue.
    grpc_max_receives_per_client: int = 64

    #: Aliyun MQ HTTP API: seconds a consumed message stays invisible before it is
    #: delivered again unless acked (Aliyun's fixed 300; its NextConsumeTime).
    aliyun_invisible_seconds: int = 300
    #: Aliyun MQ HTTP API: the key receipt handles are signed with ("" = a random key
    #: made once and kept in the store's metadata). Give every node of a cluster the
    #: same key so a handle from one node acks on another.
    aliyun_handle_key: str = ""
    #: PEM certificate chain of the TLS listeners ("" = no TLS listeners).
    tls_cert: str = ""
    #: PEM private key of ``tls_cert`` ("" = the key is in the ``tls_cert`` file).
    tls_key: str = ""
    #: PEM CA bundle that client certificates must chain to ("" = no client certificates).
    tls_ca: str = ""
    #: Client certificates: ``none``, ``optional`` (verified when sent; a certificate whose
    #: subject is mapped to a user logs that user in) or ``required``.
    tls_client_cert: str = "none"
    #: The users file (``lmq users``): "" = ``<data_dir>/users.json``. With no users file
    #: the gateway is open to anyone, which it allows only on a loopback ``bind``.
    users_file: str = ""
    #: Let clients without credentials in (as ``@anonymous``) when a users file exists,
    #: and allow a non-loopback ``bind`` without a users file.
    allow_anonymous: bool = False
    #: Subscriptions one MQTT session may hold (0 = no limit); more get SUBACK 0x97.
    max_subscriptions_per_session: int = 10_000
    #: QoS 1/2 messages in flight to one MQTT client: the lower of this and the client's
    #: Receive Maximum.
    max_inflight: int = 1024
    #: QoS 1/2 PUBLISH packets an MQTT 5 client may have unacknowledged towards the
    #: gateway: the Receive Maximum of CONNACK; more is DISCONNECT 0x93. 3.x clients
    #: have no such limit (reading pauses while the store catches up, whatever this is).
    receive_maximum: int = 1024
    #: Queues one AMQP connection may have created and not yet deleted (its LMQs);
    #: more declares get 406 PRECONDITION_FAILED. 0 = no limit.
    max_queues_per_connection: int = 0
    #: Longest MQTT keep-alive accepted, in seconds (0 = whatever the client asks). An
    #: MQTT 5 client asking for more (or for none) is told this one (Server Keep Alive);
    #: a 3.x client's longer keep-alive is enforced at this value.
    max_keep_alive: int = 0
    #: Messages one MQTT subscription may have waiting (its backlog in the LMQ); when a
    #: session is further behind, the oldest are skipped. 0 = no limit (the backlog is
    #: on disk, bounded by retention).
    max_queued_messages: int = 0
    #: PUBLISH packets per second one MQTT connection may send; faster publishers are
    #: slowed down (reading pauses), not disconnected. 0 = no limit.
    max_publish_rate: int = 0
    #: Seconds a new connection on a sniffing listener (the unified ports) has to send
    #: the bytes that identify its protocol (and its PROXY header, when one is
    #: required); a silent one is closed. The handshake itself is ``connect_timeout``.
    sniff_timeout: float = 5.0
    #: PROXY protocol (HAProxy) header in front of a connection: ``off``, ``v1``, ``v2``
    #: or ``any``. When on, a connection from ``proxy_protocol_networks`` on one of
    #: ``proxy_protocol_listeners`` must start with the header, and the address it names
    #: is the client's (logs, limits, ACLs). Off by default: a client could forge it.
    proxy_protocol: str = "off"
    #: Source networks (CIDR) a PROXY header is accepted from: the load balancers.
    #: Connections from elsewhere are taken as direct (a header from them is unknown
    #: bytes). Required when ``proxy_protocol`` is on.
    proxy_protocol_networks: tuple[str, ...] = ()
    #: Plain listeners the PROXY header is expected on (empty = every plain listener).
    proxy_protocol_listeners: tuple[str, ...] = ()
    #: ``host:port`` the RocketMQ route reply names as the broker's address; "" = the
    #: address the client connected to (right unless a NAT or load balancer is between).
    advertised_address: str = ""
    #: Largest RocketMQ remoting frame accepted, in bytes (RocketMQ's default, 16 MiB).
    remoting_max_frame: int = 16 * 1024 * 1024
    #: A RocketMQ producer sending to (or a route query for) an unknown topic creates
    #: it, with ``rocketmq_default_queue_nums`` queues.
    rocketmq_auto_create_topics: bool = True
    #: Auto-created topics are NORMAL (RocketMQ 5's strict default: a delayed, FIFO or
    #: transactional send to them is refused) instead of MIXED (every message type, as
    #: RocketMQ's ``enableMixedMessageType``). Explicitly created topics keep their type.
    rocketmq_strict_message_type: bool = False
    #: A consumer group heartbeating, pulling or committing for the first time creates it.
    rocketmq_auto_create_groups: bool = True
    #: Queues of an auto-created RocketMQ topic (RocketMQ's defaultTopicQueueNums).
    rocketmq_default_queue_nums: int = 8
    #: Seconds an orderly consumer's queue lock lasts without renewal
    #: (RocketMQ's rebalance lock expiry).
    rocketmq_lock_expiry: float = 60.0

    #: The gateway's cluster id for the message connector (issue 19): the id copies'
    #: ``__LMQ_PATH`` carries, to stop loops. "" = generated once and kept in the store
    #: (``gateway.cluster_id``).
    cluster_id: str = ""

    #: HTTP (issue 18): a dedicated HTTP listener (no sniffing; the unified ports serve
    #: HTTP too). Disabled by default, as ``remoting_port``.
    http_port: Port = 0
    #: Largest HTTP request head (request line and headers), bytes; larger is 431.
    http_max_head_bytes: int = 16 * 1024
    #: Largest HTTP request body, bytes; larger is 413 (a batch publish is one body).
    http_max_body_bytes: int = 16 * 1024 * 1024 + 64 * 1024
    #: Seconds an HTTP request head may take from its first byte (slow loris): 408.
    http_head_timeout: float = 10.0
    #: Seconds an HTTP request body may take after its head: 408.
    http_body_timeout: float = 60.0
    #: Seconds an idle keep-alive HTTP connection is kept open for its next request.
    http_keepalive_timeout: float = 60.0

    #: The admin API (issue 31, docs/operations.md): a dedicated listener for it (and
    #: the console, /health, /metrics) alone; disabled by default: the unified ports and
    #: ``http_port`` serve it too.
    admin_port: Port = 0
    #: The admin API's audit log. "" = ``<data_dir>/audit.log``.
    admin_audit_log: str = ""
    #: Seconds a JSON API publish with an ``Idempotency-Key`` is remembered: a retry
    #: with the same key within it stores nothing (the key index, so across restarts).
    http_idempotency_window: float = 24 * 3600.0

    #: Seconds a remoting send carrying ``__LMQ_DEDUP_ID`` (the connector's copies from
    #: MQTT and AMQP brokers) is remembered: a copy with the same id on the same topic
    #: within it is not stored again (gateway/remoting/dedup.py).
    remoting_dedup_window: float = 3600.0
    #: Log line format: ``text`` or ``json`` (one JSON object per line).
    log_format: str = "text"
    #: Least severe log level written: debug, info, warning, error.
    log_level: str = "info"
    #: The storage engine's options (the ``[store]`` table).
    store: StoreConfig = field(default_factory=StoreConfig)

    # -- a broker group (docs/replication.md) --
    #: "none": one node (the default, unchanged); "master" / "slave": a static pair
    #: (``lmq replication promote`` moves the master); "auto": etcd elects.
    replication_role: str = "none"
    #: The broker group: members of one group replicate one log.
    replication_group: str = "broker-a"
    #: This member's name in the group ("" = the replication listener's host:port).
    replication_name: str = ""
    #: The replication listener (slaves connect here); "auto" picks a free port.
    replication_port: Port = 0
    #: A static slave's master: host:port of its replication listener.
    replication_master: str = ""
    #: "async": acknowledged on the master's own durability; "sync": once every member
    #: of the in-sync set holds the record.
    replication_ack: str = "async"
    #: etcd client endpoints (host:port) for role "auto".
    replication_etcd: tuple[str, ...] = ()
    #: The master key's lease in etcd; a master that cannot renew it stops acknowledging.
    replication_lease: float = 5.0
    #: A slave behind the master this long (or disconnected) leaves the in-sync set.
    replication_max_lag: float = 15.0
    #: ``sync`` mode: the members (the master included) the in-sync set must have
    #: (RocketMQ's minInSyncReplicas): while it has fewer, writes are refused; one made
    #: just before it shrank waits ``replication_max_lag``, then fails. 1: the master
    #: alone is enough.
    replication_min_insync: int = 1

    #: The message connector's rules run inside the gateway (the ``[connector]`` table:
    #: ``rules = "FILE"`` or the rules inline, docs/connector.md); None: no connector.
    connector: Rules | None = None

    def __post_init__(self) -> None:
        if self.proxy_protocol != "off" and not self.proxy_protocol_networks:
            raise ConfigError(
                "proxy_protocol needs proxy_protocol_networks (the load balancers' addresses)"
            )
        tls = [name for name in self.proxy_protocol_listeners if name in TLS_LISTENERS]
        if tls:
            raise ConfigError(
                f"proxy_protocol_listeners: {tls[0]}: PROXY headers are read on plain"
                " listeners only (terminate TLS at the load balancer)"
            )
        if self.replication_role != "none" and self.port("replication") is None:
            raise ConfigError(
                f"replication_role {self.replication_role} needs replication_port (slaves"
                " connect there, and a slave serves there once promoted)"
            )
        if self.replication_role == "slave" and not self.replication_master:
            raise ConfigError("replication_role slave needs replication_master (host:port)")
        if self.replication_min_insync > 1 and self.replication_ack != "sync":
            raise ConfigError("replication_min_insync above 1 needs replication_ack sync")
        if self.replication_role == "auto" and not self.replication_etcd:
            raise ConfigError("replication_role auto needs replication_etcd (endpoints)")
        if self.write_buffer_max < self.max_packet_size + self.write_buffer_high:
            raise ConfigError(
                "write_buffer_max must be at least max_packet_size + write_buffer_high"
                f" ({self.max_packet_size + self.write_buffer_high})"
            )

    def port(self, name: str) -> int | None:
        """The port to bind for listener ``name`` (mqtt, amqp, unified, and the TLS ones):
        ``None`` when disabled, 0 for any free port."""
        if name in TLS_LISTENERS and not self.tls_cert:
            return None
        value = getattr(self, f"{name}_port")
        if value == AUTO:
            return 0
        return int(value) or None


    def proxy_protocol_on(self, listener: str) -> bool:
        """Whether connections on ``listener`` may carry a PROXY header (plain
        listeners only: on a TLS listener the header would come before the handshake,
        which asyncio's TLS listeners perform before the gateway sees a byte)."""
        return self.proxy_protocol != "off" and listener not in TLS_LISTENERS and (
            not self.proxy_protocol_listeners or listener in self.proxy_protocol_listeners
        )


# -- value checkers: each returns the converted value or raises ValueError(problem) -----


#: No option needs more than a signed 64-bit integer (TOML's own integer range, which
#: tomllib does not enforce).
_INT_LIMIT = 2**63 - 1


def _int(minimum: int, maximum: int | None = None) -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if not -_INT_LIMIT <= value <= _INT_LIMIT:
            raise ValueError(f"must fit in 64 bits, got an integer of {value.bit_length()} bits")
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"{minimum}-{maximum}" if maximum is not None else f">= {minimum}"
            raise ValueError(f"must be {bound}, got {value}")
        return value

    return check


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number of seconds, got {value!r}")
    if not 0 < value <= 86_400:
        raise ValueError(f"must be > 0 and at most 86400 seconds, got {value}")
    return float(value)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    if "\x00" in value:  # no file name, address or LMQ name can hold it
        raise ValueError(f"must not contain U+0000, got {value!r}")
    return value


def _nonempty(value: object) -> str:
    if not _str(value):
        raise ValueError("must not be empty")
    return typing.cast(str, value)


def _str_tuple(value: object) -> tuple[str, ...]:
    """A TOML array of non-empty strings (may be empty), or one comma-separated flag."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected an array of strings, got {value!r}")
    return tuple(_nonempty(item) for item in value)


def _path(value: object) -> Path:
    if isinstance(value, Path):
        return value
    return Path(_nonempty(value))


def _choice(*choices: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if not isinstance(value, str) or value.lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")
        return value.lower()

    return check


def _port(value: object) -> Port:
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f'expected a port 0-65535 (0 = disabled) or "auto", got {value!r}')
    return value


def _list_of(item: Callable[[object], str]) -> Callable[[object], tuple[str, ...]]:
    """A TOML array of strings, or one comma-separated string (flags)."""

    def check(value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return tuple(dict.fromkeys(item(v) for v in value))

    return check


def _network(value: object) -> str:
    try:
        return str(ipaddress.ip_network(_nonempty(value).strip(), strict=False))
    except ValueError:
        raise ValueError(f"expected a network like 10.0.0.0/8, got {value!r}") from None


def _host_port(value: object) -> str:
    """``host:port`` or ``[v6]:port`` ("" = not set)."""
    text = _str(value).strip()
    if not text:
        return ""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            host = ""
    elif ":" in host:
        host = ""  # an IPv6 address must be bracketed
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected host:port or [ipv6]:port, got {value!r}")
    return text


def _cluster_id(value: object) -> str:
    """"" (generated) or an id (gateway.cluster_id)."""
    text = _str(value)
    if text:
        from gateway.cluster_id import check_cluster_id

        problem = check_cluster_id(text)
        if problem:
            raise ValueError(problem)
    return text


def _connector(value: object) -> Rules:
    """The ``[connector]`` table: ``rules = "FILE"`` (a rules file) or the rules file's
    keys inline (``[connector.clusters.a]``, ``[[connector.rules]]``)."""
    from gateway.connector.rules import RulesError, load_rules, parse_rules

    if not isinstance(value, dict):
        raise ValueError("expected a [connector] table")
    try:
        if isinstance(value.get("rules"), str):
            others = sorted(set(value) - {"rules"})
            if others:
                raise ValueError(f"{others[0]}: with rules = FILE, put it in the rules file")
            return load_rules(value["rules"])
        return parse_rules(value)
    except RulesError as exc:
        raise ValueError(str(exc)) from None


_GATEWAY_OPTIONS: dict[str, Callable[[object], object]] = {
    "data_dir": _path,
    "bind": _nonempty,
    "mqtt_port": _port,
    "amqp_port": _port,
    "unified_port": _port,
    "remoting_port": _port,
    "grpc_port": _port,
    "max_connections": _int(1),
    "max_connections_per_address": _int(0),
    "max_packet_size": _int(1024, 268_435_455),
    "connect_timeout": _seconds,
    "shutdown_timeout": _seconds,
    "write_buffer_high": _int(1024),
    "write_buffer_max": _int(1024),
    "mqtts_port": _port,
    "amqps_port": _port,
    "unified_tls_port": _port,
    "remoting_tls_port": _port,
    "grpc_tls_port": _port,
    "grpc_max_receives_per_client": _int(1, 65535),
    "aliyun_invisible_seconds": _int(1, 12 * 3600),
    "aliyun_handle_key": _str,
    "tls_cert": _str,
    "tls_key": _str,
    "tls_ca": _str,
    "tls_client_cert": _choice(*CLIENT_CERT_MODES),
    "users_file": _str,
    "allow_anonymous": _bool,
    "max_subscriptions_per_session": _int(0),
    "max_inflight": _int(1, 65535),
    "receive_maximum": _int(1, 65535),
    "max_queued_messages": _int(0),
    "max_keep_alive": _int(0, 65535),
    "max_queues_per_connection": _int(0),
    "max_publish_rate": _int(0),
    "sniff_timeout": _seconds,
    "proxy_protocol": _choice(*PROXY_PROTOCOL_MODES),
    "proxy_protocol_networks": _list_of(_network),
    "proxy_protocol_listeners": _list_of(_choice(*LISTENER_NAMES)),
    "advertised_address": _host_port,
    "remoting_max_frame": _int(1024, REMOTING_FRAME_LIMIT),
    "rocketmq_auto_create_topics": _bool,
    "rocketmq_auto_create_groups": _bool,
    "rocketmq_strict_message_type": _bool,
    "rocketmq_default_queue_nums": _int(1, 1024),
    "rocketmq_lock_expiry": _seconds,
    "cluster_id": _cluster_id,
    "http_port": _port,
    "admin_port": _port,
    "admin_audit_log": _str,
    "http_max_head_bytes": _int(1024, 1024 * 1024),
    "http_max_body_bytes": _int(1024),
    "http_head_timeout": _seconds,
    "http_body_timeout": _seconds,
    "http_keepalive_timeout": _seconds,
    "http_idempotency_window": _seconds,
    "remoting_dedup_window": _seconds,
    "log_format": _choice(*LOG_FORMATS),
    "log_level": _choice(*LOG_LEVELS),
    "connector": _connector,
    "replication_role": _choice(*REPLICATION_ROLES),
    "replication_group": _nonempty,
    "replication_name": _str,
    "replication_port": _port,
    "replication_master": _host_port,
    "replication_ack": _choice(*REPLICATION_ACKS),
    "replication_etcd": _list_of(_host_port),
    "replication_lease": _seconds,
    "replication_max_lag": _seconds,
    "replication_min_insync": _int(1),
}


def _store_options() -> dict[str, Callable[[object], object]]:
    hints = typing.get_type_hints(StoreConfig)
    out: dict[str, Callable[[object], object]] = {}
    for f in dataclasses.fields(StoreConfig):
        kind = hints[f.name]
        if kind is Durability:
            out[f.name] = _choice(*(d.value for d in Durability))
        elif kind is int:
            out[f.name] = _int(0)
        elif kind == tuple[str, ...]:
            out[f.name] = _str_tuple
        else:
            out[f.name] = _nonempty
    return out


_STORE_OPTIONS = _store_options()

#: Every option by its dotted name (``store.durability``), as flags pass them.
OPTIONS: dict[str, Callable[[object], object]] = {
    **_GATEWAY_OPTIONS,
    **{f"store.{k}": v for k, v in _STORE_OPTIONS.items()},
}


def _flatten(table: Mapping[str, object], source: str) -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in table.items():
        if key == "store":
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: store: expected a [store] table")
            for sub, subvalue in value.items():
                flat[f"store.{sub}"] = subvalue
        else:
            flat[key] = value
    return flat


def _check(flat: Mapping[str, object], source: str) -> dict[str, object]:
    checked: dict[str, object] = {}
    for key, value in flat.items():
        checker = OPTIONS.get(key)
        if checker is None:
            raise ConfigError(f"{source}: unknown option {key!r}")
        try:
            checked[key] = checker(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}: {exc}") from None
    return checked


def read_toml(path: Path) -> dict[str, object]:
    """The options of a TOML config file, flattened to dotted names and checked."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the whole file first
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 at byte {exc.start}") from None
    except ValueError as exc:  # tomllib's int() of a number over 4300 digits
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
    return _check(_flatten(raw, str(path)), str(path))


def load_config(
    path: Path | None = None, overrides: Mapping[str, object] | None = None
) -> GatewayConfig:
    """Defaults, then the TOML file at ``path`` (if any), then ``overrides`` (dotted
    option names, e.g. from command-line flags; ``None`` values are ignored)."""
    merged = read_toml(path) if path is not None else {}
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    merged.update(_check(given, "command line"))
    return build_config(merged)


def build_config(options: Mapping[str, object]) -> GatewayConfig:
    """A config from checked dotted options; cross-option problems raise ConfigError."""
    store_kw = {k[6:]: v for k, v in options.items() if k.startswith("store.")}
    if "durability" in store_kw:
        store_kw["durability"] = Durability(str(store_kw["durability"]))
    top = {k: v for k, v in options.items() if not k.startswith("store.")}
    try:
        store = StoreConfig(**store_kw)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(f"store.{exc}") from None
    return GatewayConfig(**top, store=store)  # type: ignore[arg-type]
