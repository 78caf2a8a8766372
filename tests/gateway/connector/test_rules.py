"""The rules file: what parses, and that every error names its key."""
# ruff: noqa: E501  (the tables of bad inputs and their messages read best one per line)

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.connector.rules import RulesError, load_rules, parse_rules, start_millis

GOOD = """
status_address = "127.0.0.1:9999"
heartbeat_interval = 2

[clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:8080"]
access_key = "ak"
secret_key = "sk"

[clusters.b]
kind = "rocketmq"
endpoints = "10.0.0.2:9876"
tls = { ca_file = "/etc/ca.pem" }

[clusters.m]
kind = "mqtt"
endpoints = ["127.0.0.1:1883"]
user = "u"
password = "p"
client_id = "bridge-1"

[clusters.q]
kind = "amqp"
endpoints = ["127.0.0.1:5672"]
vhost = "/prod"

[[rules]]
name = "orders"
source = "a"
topic = "orders"
tag = "eu || us"
target = "b"
target_topic = "copy-{topic}"
start = "2026-01-02T03:04:05Z"
rate_limit = 100
carry_group_offsets = ["billing"]
on_refused = "dead-letter"
dead_letter_topic = "refused"
batch_size = 64

[[rules]]
name = "from-mqtt"
source = "m"
filter = "sensors/#"
property = "region = 'eu'"
target = "a"

[[rules]]
name = "from-amqp"
source = "q"
queue = "jobs"
target = "a"
target_topic = "jobs-{queue}"
start = "earliest"
"""


def parse(text: str):
    return parse_rules(tomllib.loads(text))


def test_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    rules = load_rules(path)
    assert rules.settings.status_address == "127.0.0.1:9999"
    assert rules.settings.heartbeat_interval == 2.0
    a, b, m, q = (rules.clusters[n] for n in "abmq")
    assert (a.kind, a.endpoints, a.access_key, a.secret_key) == (
        "gateway",
        ("127.0.0.1:8080",),
        "ak",
        "sk",
    )
    assert b.endpoints == ("10.0.0.2:9876",) and b.tls is not None
    assert b.tls.ca_file == "/etc/ca.pem" and b.tls.verify
    assert m.options == {"client_id": "bridge-1"} and m.user == "u"
    assert q.options == {"vhost": "/prod"}
    orders, from_mqtt, from_amqp = rules.rules
    assert orders.read == "orders" and orders.tag == "eu || us"
    assert orders.render_topic("orders", "orders:3") == "copy-orders"
    assert orders.start == "2026-01-02T03:04:05+00:00"
    assert start_millis(orders.start) == 1767323045000
    assert orders.rate_limit == 100.0 and orders.batch_size == 64
    assert orders.carry_group_offsets == ("billing",)
    assert orders.on_refused == "dead-letter" and orders.dead_letter_topic == "refused"
    assert orders.passes("eu", {}) and orders.passes("us", {})
    assert not orders.passes("asia", {}) and not orders.passes(None, {})
    assert from_mqtt.read == "sensors/#" and from_mqtt.start == "latest"
    assert from_mqtt.property is not None
    assert from_mqtt.passes(None, {"region": "eu"})
    assert not from_mqtt.passes(None, {"region": "us"}) and not from_mqtt.passes(None, {})
    assert from_amqp.render_topic("x", "jobs") == "jobs-jobs"
    assert from_amqp.passes(None, {}) and from_amqp.start == "earliest"


BASE = """
[clusters.a]
kind = "gateway"
endpoints = ["127.0.0.1:8080"]
[clusters.m]
kind = "mqtt"
endpoints = ["127.0.0.1:1883"]
"""

R = 'name = "r"\nsource = "a"\ntopic = "t"\ntarget = "m"\n'
G = 'kind = "gateway"\nendpoints = ["h:1"]\n'

RULE = """
[[rules]]
name = "ok"
source = "a"
topic = "t"
target = "m"
"""


# fmt: off
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('name = "r"\nsource = "a"\ntopic = "t"\ntarget = "eu"', "rules.2.target: unknown cluster 'eu'"),
        ('name = "r"\nsource = "x"\ntopic = "t"\ntarget = "m"', "rules.2.source: unknown cluster 'x'"),
        ('name = "ok"\nsource = "a"\ntopic = "t"\ntarget = "m"', "rules.2.name: duplicate rule name 'ok'"),
        ('name = "r"\nsource = "a"\nfilter = "t/#"\ntarget = "m"', "rules.2.filter: a gateway source reads a 'topic'"),
        ('name = "r"\nsource = "m"\ntopic = "t"\ntarget = "a"', "rules.2.topic: a mqtt source reads a 'filter'"),
        ('name = "r"\nsource = "a"\ntarget = "m"', "rules.2.topic: expected what to read"),
        ('name = "r"\nsource = "a"\ntopic = "a/b"\ntarget = "m"', "rules.2.topic: not a RocketMQ topic name"),
        (R + 'start = "yesterday"', "rules.2.start: expected latest, earliest or an ISO-8601 time"),
        (R + 'target_topic = "{topc}"', "rules.2.target_topic: unknown field {topc}"),
        (R + 'on_refused = "drop"', "rules.2.on_refused: must be one of stop, skip, dead-letter"),
        (R + 'on_refused = "dead-letter"', "rules.2.dead_letter_topic: required"),
        (R + 'rate_limit = 0', "rules.2.rate_limit: expected a number"),
        (R + 'batch_size = 0', "rules.2.batch_size: expected an integer from 1 to 1024"),
        (R + 'tag = "a | b"', "rules.2.tag: expected a tag expression"),
        (R + 'tag = "a"\nproperty = "k=v"', "rules.2.property: give a tag or a property filter, not both"),
        (R + 'property = "k"', "rules.2.property: expected 'key = value'"),
        (R + 'carry_group_offsets = ["g"]', "rules.2.carry_group_offsets: consumer groups are carried between"),
        (R + 'target_topik = "x"', "rules.2: unknown option 'target_topik'"),
    ],
)
# fmt: on
def test_rule_errors_name_the_key(extra: str, message: str) -> None:
    with pytest.raises(RulesError) as info:
        parse(BASE + RULE + "[[rules]]\n" + extra)
    assert str(info.value).startswith(message), str(info.value)


# fmt: off
@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ('kind = "kafka"\nendpoints = ["h:1"]', "clusters.x.kind: must be one of gateway, rocketmq, mqtt, amqp, got 'kafka'"),
        ('kind = "gateway"\nendpoints = ["nohost"]', "clusters.x.endpoints: expected a list of host:port"),
        ('kind = "gateway"\nendpoints = []', "clusters.x.endpoints: expected a list of host:port"),
        (G + 'access_key = "a"', "clusters.x.secret_key: access_key and secret_key go together"),
        (G + 'user = "a"', "clusters.x.user: a gateway cluster signs with access_key/secret_key"),
        ('kind = "mqtt"\nendpoints = ["h:1"]\naccess_key = "a"\nsecret_key = "b"', "clusters.x.access_key: a mqtt cluster logs in with user/password"),
        ('kind = "mqtt"\nendpoints = ["h:1"]\nvhost = "/"', "clusters.x: unknown option 'vhost' for kind 'mqtt'"),
        (G + 'tls = { cert_file = "c" }', "clusters.x.tls.key_file: cert_file and key_file go together"),
        (G + 'tls = { verfy = false }', "clusters.x.tls: unknown option 'verfy'"),
    ],
)
# fmt: on
def test_cluster_errors_name_the_key(cluster: str, message: str) -> None:
    with pytest.raises(RulesError) as info:
        parse(BASE + "[clusters.x]\n" + cluster)
    assert str(info.value).startswith(message), str(info.value)


def test_top_level_errors(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="unknown option 'status_adress'"):
        parse('status_adress = "x"')
    with pytest.raises(RulesError, match="status_address: expected host:port"):
        parse('status_address = "nowhere"')
    with pytest.raises(RulesError, match="retry_max: less than retry_initial"):
        parse("retry_initial = 5\nretry_max = 1")
    with pytest.raises(RulesError, match="connector.clusters.x.kind"):
        parse_rules({"clusters": {"x": {"kind": "?"}}}, prefix="connector.")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rules]\n")
    with pytest.raises(RulesError, match=r"bad.toml: invalid TOML"):
        load_rules(bad)
    with pytest.raises(RulesError, match="not found"):
        load_rules(tmp_path / "missing.toml")
    assert parse("").rules == ()


@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3, unique=True),
    st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d", ""])),
)
def test_tag_filter_is_rocketmqs(tags: list[str], tag: str | None) -> None:
    rule = parse(BASE + RULE.replace('target = "m"', f'target = "m"\ntag = "{" || ".join(tags)}"'))
    assert rule.rules[0].passes(tag, {}) == (tag in tags)
    star = parse(BASE + RULE.replace('target = "m"', 'target = "m"\ntag = "*"'))
    assert star.rules[0].passes(tag, {})


SHARED = """
[clusters.a]
kind = "gateway"
endpoints = ["10.0.0.1:8080"]
[clusters.a2]
kind = "gateway"
endpoints = ["10.0.0.9:8080", "10.0.0.1:8080"]
[clusters.b]
kind = "gateway"
endpoints = ["10.0.0.2:8080"]
[clusters.r]
kind = "rocketmq"
endpoints = ["10.0.0.3:9876"]
[clusters.m]
kind = "mqtt"
endpoints = ["10.0.0.4:1883"]

[[rules]]
name = "eu"
source = "a"
topic = "orders"
tag = "eu"
target = "b"
"""


@pytest.mark.parametrize(
    ("second", "shared"),
    [
        # the same source topic into the same target topic: refused, filters or not
        ('source = "a"\ntopic = "orders"\ntag = "us"\ntarget = "b"', "orders"),
        # the source named twice (a shared endpoint), the target topic rendered alike
        ('source = "a2"\ntopic = "orders"\ntarget = "b"\ntarget_topic = "orders/eu"', "orders"),
        # its dead letters into the first rule's topic
        ('source = "a"\ntopic = "orders"\ntarget = "b"\ntarget_topic = "x"\non_refused = "dead-letter"\ndead_letter_topic = "orders"', "orders"),
    ],
)
def test_two_rules_sharing_a_high_water_mark_are_refused(second: str, shared: str) -> None:
    text = SHARED + f'\n[[rules]]\nname = "us"\n{second}\n'
    with pytest.raises(RulesError) as info:
        parse(text)
    message = str(info.value)
    assert message.startswith("rules.2: rules 'eu' (rules.1) and 'us' both copy topic 'orders'")
    assert f"into topic {shared!r} of cluster 'b'" in message and "high-water mark" in message


@pytest.mark.parametrize(
    "second",
    [
        'source = "a"\ntopic = "orders"\ntarget = "b"\ntarget_topic = "orders-us"',  # another topic
        'source = "a"\ntopic = "refunds"\ntarget = "b"\ntarget_topic = "orders"',  # another source topic
        'source = "b"\ntopic = "orders"\ntarget = "a"',  # the other way
        'source = "a"\ntopic = "orders"\ntarget = "r"',  # a RocketMQ target keeps no marks
        'source = "m"\nfilter = "orders"\ntarget = "b"',  # an MQTT source sends no origins
        'source = "a"\ntopic = "orders"\ntarget = "b"\nenabled = false',  # not running
    ],
)
def test_rules_not_sharing_a_high_water_mark_pass(second: str) -> None:
    assert len(parse(SHARED + f'\n[[rules]]\nname = "us"\n{second}\n').rules) == 2


def test_the_connector_refuses_shared_marks_in_rules_not_parsed_from_a_file() -> None:
    from dataclasses import replace

    from gateway.connector.runner import Connector

    rules = parse(SHARED)
    doubled = replace(rules, rules=(rules.rules[0], replace(rules.rules[0], name="us")))
    with pytest.raises(RulesError, match="'eu' \\(rules.1\\) and 'us'"):
        Connector(doubled)
