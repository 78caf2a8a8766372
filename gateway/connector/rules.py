"""The connector's rules file: named clusters and the rules that copy between them.

Pure parsing and validation, no I/O beyond reading the file (docs/connector.md, "The
rules file")::

    status_address = "127.0.0.1:9470"

    [clusters.a]
    kind = "gateway"                       # gateway | rocketmq | mqtt | amqp
    endpoints = ["127.0.0.1:8080"]
    access_key = "ak"                      # remoting ACL; user/password for MQTT, AMQP
    secret_key = "sk"

    [[rules]]
    name = "orders-to-b"
    source = "a"
    topic = "orders"                       # RocketMQ topic; MQTT `filter`; AMQP `queue`
    tag = "eu || us"                       # or: property = "region = eu"
    target = "b"
    target_topic = "copy-{topic}"          # {topic}, {queue}, fixed text
    start = "latest"                       # latest | earliest | ISO-8601 time
    carry_group_offsets = ["billing"]
    on_refused = "dead-letter"             # stop | skip | dead-letter
    dead_letter_topic = "orders-refused"

Every error names the key it is about, like the gateway configuration's
(``rules.2.target: unknown cluster 'eu'``; rules are numbered from 1 as in the file).
"""

from __future__ import annotations

import re
import string
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from protocol.remoting.client import parse_tag_expression, tag_matches

#: Endpoint kinds; "rocketmq" is a RocketMQ cluster over remoting (the gateway's endpoint
#: without the gateway's private requests: high_water answers None).
KINDS = ("gateway", "rocketmq", "mqtt", "amqp")
#: What a rule reads, by the source cluster's kind.
READ_KEY = {"gateway": "topic", "rocketmq": "topic", "mqtt": "filter", "amqp": "queue"}
ON_REFUSED = ("stop", "skip", "dead-letter")

_CLUSTER_KEYS = {"kind", "endpoints", "access_key", "secret_key", "user", "password", "tls"}
#: Keys a cluster of one kind may add; the endpoint reads them from Cluster.options.
KIND_CLUSTER_KEYS: dict[str, frozenset[str]] = {
    "gateway": frozenset({"timeout", "producer_group"}),
    "rocketmq": frozenset({"timeout", "producer_group"}),
    "mqtt": frozenset({"client_id", "protocol_version", "keepalive", "session_expiry", "qos"}),
    "amqp": frozenset({"vhost", "prefetch", "exchange", "heartbeat"}),
}
_TLS_KEYS = {"ca_file", "cert_file", "key_file", "verify"}
_RULE_KEYS = {
    "name",
    "source",
    "topic",
    "filter",
    "queue",
    "tag",
    "property",
    "target",
    "target_topic",
    "start",
    "rate_limit",
    "carry_group_offsets",
    "on_refused",
    "dead_letter_topic",
    "batch_size",
    "wait_ms",
    "enabled",
    "options",
}
_SETTINGS_KEYS = {
    "status_address",
    "heartbeat_interval",
    "group_offsets_interval",
    "stall_after",
    "retry_initial",
    "retry_max",
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_TEMPLATE_FIELDS = {"topic", "queue"}


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the bad key."""


@dataclass(frozen=True, slots=True)
class Tls:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True


@dataclass(frozen=True, slots=True)
class Cluster:
    """A named cluster. ``options`` holds the keys of its kind (``KIND_CLUSTER_KEYS``)."""

    name: str
    kind: str
    endpoints: tuple[str, ...]
    access_key: str | None = None
    secret_key: str | None = None
    user: str | None = None
    password: str | None = None
    tls: Tls | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_gateway(self) -> bool:
        return self.kind in ("gateway", "rocketmq")


@dataclass(frozen=True, slots=True)
class PropertyFilter:
    key: str
    value: str

    def matches(self, properties: Mapping[str, str]) -> bool:
        return properties.get(self.key) == self.value


@dataclass(frozen=True, slots=True)
class Rule:
    """One copy rule. ``read`` is what the source reads: a RocketMQ topic, an MQTT
    filter or an AMQP queue (``READ_KEY`` by the source's kind)."""

    name: str
    source: str
    read: str
    target: str
    target_topic: str = "{topic}"
    tag: str = "*"
    property: PropertyFilter | None = None
    start: str = "latest"
    rate_limit: float | None = None
    carry_group_offsets: tuple[str, ...] = ()
    on_refused: str = "stop"
    dead_letter_topic: str | None = None
    batch_size: int = 32
    wait_ms: int = 1000
    enabled: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)

    def tag_passes(self, tag: str | None) -> bool:
        """Whether a message with ``tag`` passes the rule's tag expression."""
        return tag_matches(parse_tag_expression(self.tag), tag or None)

    def passes(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        """The rule's filter (tag expression or property) on one message."""
        if self.property is not None:
            return self.property.matches(properties)
        return self.tag_passes(tag)

    def render_topic(self, topic: str, queue: str) -> str:
        """The target topic for a message of source topic ``topic`` from ``queue``."""
        return self.target_topic.format(topic=topic, queue=queue)


@dataclass(frozen=True, slots=True)
class Settings:
    """Connector-wide settings (top-level keys of the rules file)."""

    #: the standalone process's status listener (loopback), "" for none
    status_address: str = "127.0.0.1:9470"
    #: seconds between heartbeat messages per rule (0: none; delay then unmeasured)
    heartbeat_interval: float = 5.0
    #: seconds between carries of the listed groups' offsets
    group_offsets_interval: float = 5.0
    #: a rule with lag and no progress for this many seconds is "stalled"
    stall_after: float = 30.0
    #: back-off on an unreachable endpoint: first wait and bound, in seconds
    retry_initial: float = 0.2
    retry_max: float = 30.0


@dataclass(frozen=True, slots=True)
class Rules:
    clusters: Mapping[str, Cluster]
    rules: tuple[Rule, ...]
    settings: Settings = field(default_factory=Settings)


def load_rules(path: str | Path) -> Rules:
    """Read and validate a rules file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RulesError(f"rules file {path} not found") from None
    except OSError as exc:
        raise RulesError(f"rules file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise RulesError(f"{path}: invalid TOML: not UTF-8 at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{path}: invalid TOML: {exc}") from None
    try:
        return parse_rules(data)
    except RulesError as exc:
        raise RulesError(f"{path}: {exc}") from None


def parse_rules(data: Mapping[str, Any], *, prefix: str = "") -> Rules:
    """Validate the parsed TOML of a rules file (or the ``[connector]`` table of a
    gateway configuration, with ``prefix="connector."``, less its ``rules`` file key)."""
    unknown = set(data) - _SETTINGS_KEYS - {"clusters", "rules"}
    if unknown:
        raise RulesError(f"unknown option {prefix}{sorted(unknown)[0]!r}")
    settings = _settings(data, prefix)
    raw_clusters = data.get("clusters", {})
    if not isinstance(raw_clusters, dict):
        raise RulesError(f"{prefix}clusters: expected a table of clusters")
    clusters = {
        name: _cluster(name, value, f"{prefix}clusters.{name}")
        for name, value in raw_clusters.items()
    }
    raw_rules = data.get("rules", [])
    if not isinstance(raw_rules, list):
        raise RulesError(f"{prefix}rules: expected an array of tables ([[rules]])")
    rules: list[Rule] = []
    names: set[str] = set()
    for i, raw in enumerate(raw_rules, 1):
        where = f"{prefix}rules.{i}"
        rule = _rule(raw, where, clusters)
        if rule.name in names:
            raise RulesError(f"{where}.name: duplicate rule name {rule.name!r}")
        names.add(rule.name)
        rules.append(rule)
    result = Rules(clusters, tuple(rules), settings)
    check_shared_marks(result, prefix=prefix)
    return result


def _marked_topics(rule: Rule) -> set[str]:
    """The target RocketMQ topics a rule from a gateway source writes copies with origins
    to: the first level of its rendered target topic (the rest is the MQTT second topic)
    and of its dead-letter topic. A gateway source's ``{topic}`` is what the rule reads."""
    topics = {rule.render_topic(rule.read, rule.read).split("/")[0]}
    if rule.dead_letter_topic:
        topics.add(rule.dead_letter_topic.split("/")[0])
    return topics


def _same_cluster(a: Cluster, b: Cluster) -> bool:
    return a.name == b.name or bool(set(a.endpoints) & set(b.endpoints))


def check_shared_marks(rules: Rules, *, prefix: str = "") -> None:
    """Refuse two enabled rules that would share a high-water mark: from the same source
    topic of the same gateway/RocketMQ cluster into the same topic of the same gateway
    (by name or by a shared endpoint). A gateway target keeps one mark per (origin
    cluster, origin queue, target topic) and drops a copy at or below it, so each rule
    would drop the other's copies as duplicates. Filters do not help: a rule's mark also
    moves over the records its filter dropped, which the other rule may want."""
    eligible = [
        (i, rule)
        for i, rule in enumerate(rules.rules, 1)
        if rule.enabled
        and rules.clusters[rule.source].is_gateway
        and rules.clusters[rule.target].kind == "gateway"
    ]
    for n, (i, first) in enumerate(eligible):
        for j, second in eligible[n + 1 :]:
            if first.read != second.read:
                continue
            if not _same_cluster(rules.clusters[first.source], rules.clusters[second.source]):
                continue
            if not _same_cluster(rules.clusters[first.target], rules.clusters[second.target]):
                continue
            shared = _marked_topics(first) & _marked_topics(second)
            if shared:
                raise RulesError(
                    f"{prefix}rules.{j}: rules {first.name!r} (rules.{i}) and {second.name!r}"
                    f" both copy topic {first.read!r} of cluster {first.source!r} into topic"
                    f" {sorted(shared)[0]!r} of cluster {first.target!r}: they would share one"
                    " high-water mark and drop each other's copies; make them one rule (a tag"
                    " expression such as 'a || b') or give them different target topics"
                )


def _settings(data: Mapping[str, Any], prefix: str) -> Settings:
    kw: dict[str, Any] = {}
    if "status_address" in data:
        address = data["status_address"]
        if not isinstance(address, str) or (address and not _is_address(address)):
            raise RulesError(f'{prefix}status_address: expected host:port or ""')
        kw["status_address"] = address
    for key in ("heartbeat_interval", "group_offsets_interval", "stall_after"):
        if key in data:
            kw[key] = _number(data[key], f"{prefix}{key}", minimum=0.0)
    for key in ("retry_initial", "retry_max"):
        if key in data:
            kw[key] = _number(data[key], f"{prefix}{key}", minimum=0.001)
    settings = Settings(**kw)
    if settings.retry_max < settings.retry_initial:
        raise RulesError(f"{prefix}retry_max: less than retry_initial")
    return settings


def _cluster(name: str, raw: Any, where: str) -> Cluster:
    if not _NAME.match(name):
        raise RulesError(f"{where}: bad cluster name (letters, digits, _ . -)")
    if not isinstance(raw, dict):
        raise RulesError(f"{where}: expected a table")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise RulesError(f"{where}.kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    allowed = _CLUSTER_KEYS | KIND_CLUSTER_KEYS[kind]
    unknown = set(raw) - allowed
    if unknown:
        raise RulesError(f"{where}: unknown option {sorted(unknown)[0]!r} for kind {kind!r}")
    endpoints = raw.get("endpoints")
    if isinstance(endpoints, str):
        endpoints = [endpoints]
    if (
        not isinstance(endpoints, list)
        or not endpoints
        or not all(isinstance(e, str) and _is_address(e) for e in endpoints)
    ):
        raise RulesError(f"{where}.endpoints: expected a list of host:port addresses")
    creds = {}
    for key in ("access_key", "secret_key", "user", "password"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise RulesError(f"{where}.{key}: expected a string")
            creds[key] = raw[key]
    if ("access_key" in creds) != ("secret_key" in creds):
        missing = "secret_key" if "access_key" in creds else "access_key"
        raise RulesError(f"{where}.{missing}: access_key and secret_key go together")
    if kind in ("gateway", "rocketmq") and "user" in creds:
        raise RulesError(f"{where}.user: a {kind} cluster signs with access_key/secret_key")
    if kind in ("mqtt", "amqp") and "access_key" in creds:
        raise RulesError(f"{where}.access_key: a {kind} cluster logs in with user/password")
    tls = _tls(raw["tls"], f"{where}.tls") if "tls" in raw else None
    options = {k: raw[k] for k in KIND_CLUSTER_KEYS[kind] if k in raw}
    return Cluster(name, kind, tuple(endpoints), tls=tls, options=options, **creds)


def _tls(raw: Any, where: str) -> Tls | None:
    if raw is False:
        return None
    if raw is True:
        return Tls()
    if not isinstance(raw, dict):
        raise RulesError(f"{where}: expected true, false or a table")
    unknown = set(raw) - _TLS_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown option {sorted(unknown)[0]!r}")
    for key in ("ca_file", "cert_file", "key_file"):
        if key in raw and not isinstance(raw[key], str):
            raise RulesError(f"{where}.{key}: expected a string")
    if "verify" in raw and not isinstance(raw["verify"], bool):
        raise RulesError(f"{where}.verify: expected true or false")
    if ("cert_file" in raw) != ("key_file" in raw):
        raise RulesError(f"{where}.key_file: cert_file and key_file go together")
    return Tls(**raw)


def _rule(raw: Any, where: str, clusters: Mapping[str, Cluster]) -> Rule:
    if not isinstance(raw, dict):
        raise RulesError(f"{where}: expected a table")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown option {sorted(unknown)[0]!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise RulesError(f"{where}.name: expected a name (letters, digits, _ . -)")
    kw: dict[str, Any] = {"name": name}
    for side in ("source", "target"):
        value = raw.get(side)
        if not isinstance(value, str):
            raise RulesError(f"{where}.{side}: expected a cluster name")
        if value not in clusters:
            raise RulesError(f"{where}.{side}: unknown cluster {value!r}")
        kw[side] = value
    source = clusters[kw["source"]]
    target = clusters[kw["target"]]
    read_key = READ_KEY[source.kind]
    for key in ("topic", "filter", "queue"):
        if key in raw and key != read_key:
            raise RulesError(
                f"{where}.{key}: a {source.kind} source reads a {read_key!r}, not a {key!r}"
            )
    read = raw.get(read_key)
    if not isinstance(read, str) or not read:
        raise RulesError(f"{where}.{read_key}: expected what to read from {source.name!r}")
    if source.is_gateway and not _is_rocketmq_topic(read):
        raise RulesError(f"{where}.topic: not a RocketMQ topic name: {read!r}")
    kw["read"] = read
    if "tag" in raw and "property" in raw:
        raise RulesError(f"{where}.property: give a tag or a property filter, not both")
    if "tag" in raw:
        tag = raw["tag"]
        if not isinstance(tag, str) or not tag.strip():
            raise RulesError(f"{where}.tag: expected a tag expression such as 'a || b'")
        if any(c in t for t in parse_tag_expression(tag) for c in "|&()*"):
            raise RulesError(f"{where}.tag: expected a tag expression such as 'a || b'")
        kw["tag"] = tag.strip()
    if "property" in raw:
        kw["property"] = _property(raw["property"], f"{where}.property")
    template = raw.get("target_topic", "{topic}")
    kw["target_topic"] = _template(template, f"{where}.target_topic")
    if "start" in raw:
        kw["start"] = _start(raw["start"], f"{where}.start")
    if "rate_limit" in raw:
        kw["rate_limit"] = _number(raw["rate_limit"], f"{where}.rate_limit", minimum=0.001)
    if "carry_group_offsets" in raw:
        groups = raw["carry_group_offsets"]
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise RulesError(f"{where}.carry_group_offsets: expected a list of group names")
        if groups and not (source.is_gateway and target.is_gateway):
            raise RulesError(
                f"{where}.carry_group_offsets: consumer groups are carried between "
                "gateway/rocketmq clusters only"
            )
        kw["carry_group_offsets"] = tuple(groups)
    on_refused = raw.get("on_refused", "stop")
    if on_refused not in ON_REFUSED:
        raise RulesError(
            f"{where}.on_refused: must be one of {', '.join(ON_REFUSED)}, got {on_refused!r}"
        )
    kw["on_refused"] = on_refused
    if "dead_letter_topic" in raw:
        dlt = raw["dead_letter_topic"]
        if not isinstance(dlt, str) or not dlt:
            raise RulesError(f"{where}.dead_letter_topic: expected a topic name")
        kw["dead_letter_topic"] = dlt
    if on_refused == "dead-letter" and "dead_letter_topic" not in kw:
        raise RulesError(f"{where}.dead_letter_topic: required with on_refused = 'dead-letter'")
    for key, low, high in (("batch_size", 1, 1024), ("wait_ms", 0, 60_000)):
        if key in raw:
            value = raw[key]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise RulesError(f"{where}.{key}: expected an integer from {low} to {high}")
            kw[key] = value
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise RulesError(f"{where}.enabled: expected true or false")
        kw["enabled"] = raw["enabled"]
    if "options" in raw:
        if not isinstance(raw["options"], dict):
            raise RulesError(f"{where}.options: expected a table")
        kw["options"] = dict(raw["options"])
    return Rule(**kw)


def _property(raw: Any, where: str) -> PropertyFilter:
    if not isinstance(raw, str) or "=" not in raw:
        raise RulesError(f"{where}: expected 'key = value'")
    key, _, value = raw.partition("=")
    key, value = key.strip(), value.strip()
    if not key:
        raise RulesError(f"{where}: empty property name")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return PropertyFilter(key, value)


def _template(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise RulesError(f"{where}: expected a topic template such as '{{topic}}'")
    try:
        fields = [f for _, f, spec, conv in string.Formatter().parse(raw) if f is not None]
    except ValueError as exc:
        raise RulesError(f"{where}: {exc}") from None
    for f in fields:
        if f not in _TEMPLATE_FIELDS:
            raise RulesError(f"{where}: unknown field {{{f}}} (use {{topic}} or {{queue}})")
    return raw


def _start(raw: Any, where: str) -> str:
    if raw in ("latest", "earliest"):
        return str(raw)
    if isinstance(raw, datetime):  # a TOML date-time literal
        when = raw
    elif isinstance(raw, str):
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            raise RulesError(
                f"{where}: expected latest, earliest or an ISO-8601 time, got {raw!r}"
            ) from None
    else:
        raise RulesError(f"{where}: expected latest, earliest or an ISO-8601 time")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.isoformat()


def start_millis(start: str) -> int | None:
    """An ISO start position as epoch milliseconds (None for latest/earliest)."""
    if start in ("latest", "earliest"):
        return None
    return int(datetime.fromisoformat(start).timestamp() * 1000)


def _number(raw: Any, where: str, *, minimum: float) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < minimum:
        raise RulesError(f"{where}: expected a number of at least {minimum:g}")
    return float(raw)


def _is_address(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


_ROCKETMQ_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")


def _is_rocketmq_topic(name: str) -> bool:
    return bool(_ROCKETMQ_TOPIC.match(name))
