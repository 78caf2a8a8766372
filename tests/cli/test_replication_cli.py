"""``lmq replication``: the epoch history of a data directory, and promote's errors."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from broker_core import Message, MessageStore
from cli.main import main


def test_epochs_lists_the_history(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with MessageStore.open(data) as store:
        assert store.replica is not None
        store.replica.become_master(3)
        store.append(Message(topic="t", body=b"x"), ["q"])
        end = store.log_end
        store.replica.become_master(7)
    result = CliRunner().invoke(main, ["replication", "epochs", "--data-dir", str(data)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["epoch 3 from position 0", f"epoch 7 from position {end}"]


def test_epochs_of_a_store_never_in_a_group(tmp_path: Path) -> None:
    MessageStore.open(tmp_path / "data").close()
    result = CliRunner().invoke(
        main, ["replication", "epochs", "--data-dir", str(tmp_path / "data")]
    )
    assert result.exit_code == 0 and "no epoch history" in result.output


def test_a_damaged_history_is_named(tmp_path: Path) -> None:
    (tmp_path / "epochs").write_text("LMQ-EPOCHS 1\n5 0\n4 10\n")
    result = CliRunner().invoke(main, ["replication", "epochs", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1 and "line 3: entries out of order" in result.output


def test_promote_names_a_missing_process() -> None:
    result = CliRunner().invoke(main, ["replication", "promote", "--pid", "999999999"])
    assert result.exit_code == 1 and "no process 999999999" in result.output
