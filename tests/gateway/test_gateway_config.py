"""Loading the gateway configuration: TOML file, flags winning, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core import Durability, StoreConfig
from gateway.config import AUTO, ConfigError, GatewayConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lmq.toml"
    path.write_text(text)
    return path


def test_defaults():
    cfg = load_config()
    assert cfg == GatewayConfig()
    assert cfg.bind == "127.0.0.1"
    assert (cfg.mqtt_port, cfg.amqp_port, cfg.unified_port) == (1883, 5672, 8080)
    assert cfg.store == StoreConfig()
    assert cfg.port("mqtt") == 1883


def test_file_then_flags(tmp_path):
    path = write(
        tmp_path,
        """
data_dir = "/srv/lmq"
mqtt_port = 0
amqp_port = "auto"
unified_port = 9000
max_connections = 50
connect_timeout = 2.5
log_format = "json"

[store]
durability = "sync"
segment_bytes = 16777216
max_message_bytes = 1048576
retention_ms = 0
""",
    )
    cfg = load_config(path)
    assert cfg.data_dir == Path("/srv/lmq")
    assert cfg.port("mqtt") is None and cfg.port("amqp") == 0 and cfg.port("unified") == 9000
    assert cfg.amqp_port == AUTO
    assert cfg.max_connections == 50 and cfg.connect_timeout == 2.5 and cfg.log_format == "json"
    assert cfg.store.durability is Durability.SYNC
    assert cfg.store.segment_bytes == 16777216 and cfg.store.retention_ms == 0

    cfg = load_config(
        path,
        {"unified_port": "auto", "store.durability": "async", "data_dir": Path("x"), "bind": None},
    )
    assert cfg.unified_port == AUTO and cfg.store.durability is Durability.ASYNC
    assert cfg.data_dir == Path("x") and cfg.bind == "127.0.0.1"
    assert cfg.max_connections == 50  # from the file, not overridden


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mqtt_prot = 1", "unknown option 'mqtt_prot'"),
        ("[store]\nsegment_byte = 1", "unknown option 'store.segment_byte'"),
        ("mqtt_port = 70000", "mqtt_port: expected a port 0-65535"),
        ("mqtt_port = true", "mqtt_port: expected a port"),
        ('max_connections = "ten"', "max_connections: expected an integer"),
        ("max_connections = 0", "max_connections: must be >= 1"),
        ("connect_timeout = -1", "connect_timeout: must be > 0"),
        ('log_format = "xml"', "log_format: must be one of text, json"),
        ('[store]\ndurability = "sometimes"', "store.durability: must be one of async, sync"),
        ("[store]\nsegment_bytes = 1000", "store.segment_bytes must be at least 64 KiB"),
        ("store = 3", "store: expected a [store] table"),
        ("write_buffer_max = 2048", "write_buffer_max must be at least max_packet_size"),
        ("mqtt_port = ", "invalid TOML"),
    ],
)
def test_bad_file(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_flag_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="command line: mqtt_port"):
        load_config(None, {"mqtt_port": "nope"})
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_every_option_is_documented():
    from gateway.config import OPTIONS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for key in OPTIONS:
        assert f"| `{key.removeprefix('store.')}` |" in doc, key


def test_rocketmq_and_negotiation_defaults():
    cfg = GatewayConfig()
    assert cfg.port("remoting") is None and cfg.port("remoting_tls") is None
    assert cfg.proxy_protocol == "off" and not cfg.proxy_protocol_on("unified")
    assert cfg.sniff_timeout == 5.0 and cfg.advertised_address == ""
    assert cfg.remoting_max_frame == 16 * 1024 * 1024
    assert cfg.rocketmq_auto_create_topics and cfg.rocketmq_auto_create_groups
    assert cfg.rocketmq_default_queue_nums == 8 and cfg.rocketmq_lock_expiry == 60.0


def test_rocketmq_and_negotiation_options(tmp_path):
    path = write(
        tmp_path,
        """
remoting_port = 10911
remoting_tls_port = "auto"
tls_cert = "cert.pem"
sniff_timeout = 2
proxy_protocol = "V2"
proxy_protocol_networks = ["10.0.0.0/8", "192.168.1.7", "::1"]
proxy_protocol_listeners = ["unified", "remoting"]
advertised_address = "[2001:db8::1]:10911"
remoting_max_frame = 4194304
rocketmq_auto_create_topics = false
rocketmq_auto_create_groups = false
rocketmq_default_queue_nums = 4
rocketmq_lock_expiry = 30
""",
    )
    cfg = load_config(path)
    assert cfg.port("remoting") == 10911 and cfg.port("remoting_tls") == 0
    assert cfg.sniff_timeout == 2.0 and cfg.proxy_protocol == "v2"
    assert cfg.proxy_protocol_networks == ("10.0.0.0/8", "192.168.1.7/32", "::1/128")
    assert cfg.proxy_protocol_on("unified") and cfg.proxy_protocol_on("remoting")
    assert not cfg.proxy_protocol_on("mqtt")
    cfg = load_config(path, {"proxy_protocol_listeners": ""})
    assert cfg.proxy_protocol_on("mqtt") and not cfg.proxy_protocol_on("unified_tls")
    assert cfg.advertised_address == "[2001:db8::1]:10911"
    assert cfg.remoting_max_frame == 4194304
    assert not cfg.rocketmq_auto_create_topics and not cfg.rocketmq_auto_create_groups
    assert cfg.rocketmq_default_queue_nums == 4 and cfg.rocketmq_lock_expiry == 30.0
    # flags give lists as one comma-separated string
    flags = {"proxy_protocol_networks": "127.0.0.0/8, ::1", "proxy_protocol": "any"}
    cfg = load_config(path, flags)
    assert cfg.proxy_protocol_networks == ("127.0.0.0/8", "::1/128")
    assert cfg.proxy_protocol == "any"
    assert load_config(None, {"advertised_address": "gw.example:8080"}).advertised_address == (
        "gw.example:8080"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("remoting_port = -1", "remoting_port: expected a port"),
        ('proxy_protocol = "v3"', "proxy_protocol: must be one of off, v1, v2, any"),
        ('proxy_protocol = "v1"', "proxy_protocol needs proxy_protocol_networks"),
        ('proxy_protocol_networks = ["10.0.0.0/33"]', "proxy_protocol_networks: expected a"),
        ("proxy_protocol_networks = 3", "proxy_protocol_networks: expected a list"),
        ('proxy_protocol_listeners = ["web"]', "proxy_protocol_listeners: must be one of"),
        (
            'proxy_protocol = "v1"\nproxy_protocol_networks = ["10.0.0.0/8"]\n'
            'proxy_protocol_listeners = ["unified_tls"]',
            "proxy_protocol_listeners: unified_tls: PROXY headers are read on plain listeners",
        ),
        ('advertised_address = "gw.example"', "advertised_address: expected host:port"),
        ('advertised_address = "::1:80"', "advertised_address: expected host:port"),
        ('advertised_address = "gw:0"', "advertised_address: expected host:port"),
        ("sniff_timeout = 0", "sniff_timeout: must be > 0"),
        ("remoting_max_frame = 100", "remoting_max_frame: must be 1024-268435455"),
        ("remoting_max_frame = 268435456", "remoting_max_frame: must be 1024-268435455"),
        ("rocketmq_default_queue_nums = 0", "rocketmq_default_queue_nums: must be 1-1024"),
        ('rocketmq_auto_create_topics = "yes"', "rocketmq_auto_create_topics: expected true"),
        ("rocketmq_lock_expiry = -5", "rocketmq_lock_expiry: must be > 0"),
    ],
)
def test_bad_rocketmq_and_negotiation_options(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_key_index_properties_from_toml_and_flag(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text('[store]\nkey_index_properties = ["KEYS", "trace"]\n')
    assert load_config(path).store.key_index_properties == ("KEYS", "trace")
    path.write_text("[store]\nkey_index_properties = []\n")
    assert load_config(path).store.key_index_properties == ()
    flagged = load_config(None, {"store.key_index_properties": "A, B"})
    assert flagged.store.key_index_properties == ("A", "B")
    assert load_config(None).store.key_index_properties == ("KEYS", "UNIQ_KEY")
    path.write_text("[store]\nkey_index_properties = 3\n")
    with pytest.raises(ConfigError, match="key_index_properties"):
        load_config(path)
