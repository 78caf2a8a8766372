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
