"""Disk full: the store refuses appends with StorageFull, damages nothing, and serves
again when space returns.

The disk is a real small file system: a tmpfs mounted by the test (this needs root;
without it the tests are skipped, saying so). Three layouts:

- only ``commitlog/`` on the small tmpfs: the log fills, deterministically;
- only ``index/`` on it: RocksDB's write fails first, deterministically;
- the whole data directory on it: whichever fills first, as in production.

A file-size limit (``RLIMIT_FSIZE``, EFBIG) is a full disk too.

The scenarios where RocksDB may fail run in a child process (this file run as a
script), because a RocksDB that failed a write cannot be closed cleanly and keeps its
files open in the process that opened it.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_core import Durability, Message, MessageStore, StorageFull, StoreConfig
from broker_core.commit_log import ScanStop

CFG = StoreConfig(durability=Durability.SYNC, segment_bytes=128 * 1024, max_message_bytes=16 * 1024)
NAMES = [f"dev/{i}" for i in range(8)]
FANOUT = [f"sub/{i}" for i in range(60)]


# -- mounting --------------------------------------------------------------------------


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


@contextmanager
def small_fs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path``, unmounted afterwards whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the disk-full tests cannot run here")
    path.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if done.returncode != 0:
        pytest.skip(f"this sandbox does not allow mounting a tmpfs: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if _run("umount", str(path)).returncode != 0:
            _run("umount", "-l", str(path))  # a leaked file handle: detach anyway


def grow(path: Path, size: str) -> None:
    done = _run("mount", "-o", f"remount,size={size}", str(path))
    assert done.returncode == 0, done.stderr


# -- checks ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acked:
    position: int
    body: bytes
    targets: tuple[tuple[str, int], ...]


def batch_of(rnd: random.Random, fanout: bool = False) -> list[tuple[Message, list[str]]]:
    out = []
    for _ in range(rnd.randint(1, 4)):
        if fanout:
            body, targets = rnd.randbytes(rnd.randint(1, 50)), FANOUT
        else:
            body, targets = rnd.randbytes(rnd.randint(500, 6000)), rnd.sample(NAMES, 2)
        out.append((Message(topic="t", body=body), targets))
    return out


def acked_of(batch, results) -> list[Acked]:  # type: ignore[no-untyped-def]
    return [
        Acked(r.position, m.body, tuple(zip(t, r.offsets, strict=True)))
        for (m, t), r in zip(batch, results, strict=True)
    ]


def assert_intact(s: MessageStore, acked: list[Acked]) -> None:
    """Every acknowledged message reads back from each of its LMQs, and the log holds
    whole records only, up to its end."""
    for a in acked:
        for name, offset in a.targets:
            got = s.read_at(name, offset)
            assert got is not None and got.record.position == a.position, (name, offset)
            assert got.body == a.body
    assert not [x for x in s.log.scan() if isinstance(x, ScanStop)]
    for seg in s.log.segments():
        assert os.path.getsize(seg.path) == seg.size  # no bytes past the last record


# -- the commit log's disk fills ------------------------------------------------------


def test_log_disk_full_refuses_damages_nothing_and_resumes(tmp_path):
    data = tmp_path / "data"
    with small_fs(data / "commitlog", "1m") as fs:
        filler = fs / "filler.bin"  # not a segment (no .log suffix): freed later
        filler.write_bytes(bytes(256 * 1024))
        rnd = random.Random(1)
        acked: list[Acked] = []
        s = MessageStore.open(data, CFG)
        try:
            with pytest.raises(StorageFull, match="No space left"):
                for _ in range(10_000):
                    batch = batch_of(rnd)
                    acked += acked_of(batch, s.append_batch(batch))
            assert len(acked) > 20
            end = s.log.end
            last = s.read_at(*acked[-1].targets[0])
            assert last is not None and last.record.next_position == end
            maxes = {n: s.lmq(n).max_offset for n in NAMES}
            # the failed batch left nothing behind, in the log or in the index
            assert_intact(s, acked)
            for _ in range(3):  # still full: still refused, still nothing written
                with pytest.raises(StorageFull):
                    s.append_batch(batch_of(rnd))
            assert s.log.end == end and {n: s.lmq(n).max_offset for n in NAMES} == maxes
            # space returns (a file removed): appends succeed where the log ended
            filler.unlink()
            batch = [(Message(topic="t", body=b"back"), ["dev/0"])]
            (r,) = s.append_batch(batch)
            assert r.position == end and r.offsets == (maxes["dev/0"],)
            acked += acked_of(batch, [r])
            # more space (the file system enlarged): the log goes on, rolling segments
            grow(fs, "4m")
            for _ in range(60):
                batch = batch_of(rnd)
                acked += acked_of(batch, s.append_batch(batch))
        finally:
            s.close()
        with MessageStore.open(data, CFG) as s:
            rep = s.recovery
            assert rep.truncated_bytes == 0 and rep.replayed_records == 0
            assert_intact(s, acked)
            assert s.verify().ok


def test_file_size_limit_is_storage_full_too(tmp_path):
    """EFBIG (RLIMIT_FSIZE, SIGXFSZ ignored) maps to StorageFull like ENOSPC."""
    out = child(tmp_path / "data", "fsize")
    assert out["FULL"].startswith("StorageFull"), out
    with MessageStore.open(tmp_path / "data", CFG) as s:
        assert s.recovery.truncated_bytes == 0
        assert s.verify().ok


# -- RocksDB's disk fills (child process) ----------------------------------------------


def child(data: Path, mode: str, fs: Path | None = None) -> dict[str, str]:
    """Run this file as a writer that appends until an error, reports it, waits for the
    parent to make space, appends again, and exits without closing. Returns its report
    (``FULL``, ``RESUMED``) and the acknowledged appends (``acked``) as text."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-P",
            __file__,
            str(data),
            mode,
        ],  # -P: tests/broker_core is not the package
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    report: dict[str, str] = {"acked": ""}
    try:
        for line in proc.stdout:
            key, _, rest = line.rstrip("\n").partition(" ")
            if key == "ACK":
                report["acked"] += rest + "\n"
                continue
            report[key] = rest
            if key == "FULL":
                if mode == "fsize":
                    continue  # the child exits: nothing to resume
                if fs is not None:
                    grow(fs, "64m")
                proc.stdin.write("space\n")
                proc.stdin.flush()
        assert proc.wait(timeout=60) == 0, report
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stdin.close()
    return report


def parse_acked(text: str) -> list[Acked]:
    out = []
    for line in text.splitlines():
        position, body, pairs = line.split()
        targets = tuple((p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in pairs.split(","))
        out.append(Acked(int(position), bytes.fromhex(body), targets))
    return out


def _after_restart(data: Path, acked: list[Acked]) -> None:
    with MessageStore.open(data, CFG) as s:
        assert s.recovery.truncated_bytes == 0  # the failed batch left no partial record
        assert_intact(s, acked)
        assert s.verify().ok
        # offsets go on from the last acknowledged one: the failed batch used none
        held = [o for a in acked for n, o in a.targets if n == FANOUT[0]]
        (r,) = s.append_batch([(Message(topic="t", body=b"after"), FANOUT)])
        assert r.offsets[0] == max(held, default=-1) + 1


@pytest.fixture(scope="module")
def index_full(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str]]]:
    """Only ``index/`` on the small file system; fan-out 60 makes RocksDB's write of a
    batch far larger than the log's."""
    data = tmp_path_factory.mktemp("index-full") / "data"
    with small_fs(data / "index", "512k") as fs:
        report = child(data, "fanout", fs)
        yield data, report


def test_index_disk_full_damages_nothing(index_full):
    data, report = index_full
    assert "No space left on device" in report["FULL"]
    acked = parse_acked(report["acked"])
    assert len(acked) > 5
    _after_restart(data, acked)


def test_index_disk_full_is_storage_full_and_service_resumes(index_full):
    _, report = index_full
    assert report["FULL"].startswith("StorageFull")
    assert report["RESUMED"] == "ok"


def test_whole_data_dir_full(tmp_path):
    """Everything on one small disk, as in production: whichever fills first (log or
    RocksDB), nothing acknowledged is damaged and no partial record stays; if the log
    filled first (StorageFull), appends resume in the same process."""
    with small_fs(tmp_path / "fs", "3m") as fs:
        data = fs / "data"
        report = child(data, "mixed", fs)
        acked = parse_acked(report["acked"])
        assert len(acked) > 20
        assert "No space left on device" in report["FULL"]
        if report["FULL"].startswith("StorageFull"):
            assert report["RESUMED"] == "ok"
        _after_restart(data, acked)


# -- the child -------------------------------------------------------------------------


def _child_main(data: str, mode: str) -> None:
    if mode == "fsize":
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail with EFBIG instead
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (96 * 1024, hard))
    rnd = random.Random(5)
    s = MessageStore.open(data, CFG)
    error: BaseException | None = None
    for _ in range(100_000):
        batch = batch_of(rnd, fanout=mode == "fanout" or (mode == "mixed" and rnd.random() < 0.3))
        try:
            results = s.append_batch(batch)
        except Exception as exc:
            error = exc
            break
        for a in acked_of(batch, results):
            pairs = ",".join(f"{n}:{o}" for n, o in a.targets)
            print(f"ACK {a.position} {a.body.hex()} {pairs}")
    print(f"FULL {type(error).__name__}: {error}".replace("\n", " "), flush=True)
    if mode != "fsize":
        sys.stdin.readline()  # the parent made space
        status = "never"
        for _ in range(10):
            try:
                s.append(Message(topic="t", body=b"x"), ["dev/0"])
                status = "ok"
                break
            except Exception as exc:
                status = f"{type(exc).__name__}: {exc}".replace("\n", " ")
                time.sleep(0.2)
        print(f"RESUMED {status}", flush=True)
    os._exit(0)  # as a crash: a RocksDB that failed a write cannot be closed cleanly


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])


def test_mqtt_publishers_get_quota_exceeded_and_service_resumes(tmp_path):
    """The gateway on a full disk: MQTT 5 publishers get PUBACK 0x97 (quota exceeded),
    nothing acknowledged is lost, and publishing works again once there is space."""
    from protocol.mqtt import (
        Connack,
        Connect,
        MQTTVersion,
        Puback,
        Publish,
        Subscribe,
        Subscription,
    )
    from tests.gateway.gateway_process import GatewayProcess
    from tests.gateway.mqtt_clients import RawClient, close_all

    v5 = MQTTVersion.V5
    with small_fs(tmp_path / "fs", "6m") as fs:
        config = tmp_path / "gw.toml"
        config.write_text("[store]\nsegment_bytes = 1048576\nmax_message_bytes = 65536\n")
        gw = GatewayProcess(fs / "data", "--config", str(config)).start()
        try:
            sub = RawClient(gw.mqtt_port, v5)
            sub.send(
                Connect(
                    client_id="keeper",
                    protocol_version=v5,
                    clean_start=False,
                    properties=_props(session_expiry_interval=3600),
                )
            )
            assert isinstance(sub.recv(), Connack)
            sub.send(Subscribe(packet_id=1, subscriptions=(Subscription("fill/#", 1),)))
            sub.recv()
            sub.close()
            pub = RawClient(gw.mqtt_port, v5)
            pub.send(Connect(client_id="filler", protocol_version=v5))
            assert isinstance(pub.recv(), Connack)
            acked: list[bytes] = []
            code = 0
            for i in range(2000):
                body = b"%06d" % i + bytes(16_000)
                pub.send(Publish(topic="fill/x", payload=body, qos=1, packet_id=i % 60000 + 1))
                ack = pub.recv(timeout=10)
                assert isinstance(ack, Puback)
                if ack.reason_code:
                    code = ack.reason_code
                    break
                acked.append(body[:6])
            assert code == 0x97, f"no quota-exceeded PUBACK after {len(acked)} messages"
            assert len(acked) > 10
            grow(fs, "64m")  # space returns
            for _attempt in range(20):
                pub.send(Publish(topic="fill/x", payload=b"after", qos=1, packet_id=60001))
                ack = pub.recv(timeout=10)
                if ack.reason_code == 0:
                    break
                time.sleep(0.2)
            assert ack.reason_code == 0, "publishing did not resume"
            # every acknowledged message reaches the persistent subscriber
            sub = RawClient(gw.mqtt_port, v5)
            sub.send(
                Connect(
                    client_id="keeper",
                    protocol_version=v5,
                    clean_start=False,
                    properties=_props(session_expiry_interval=3600),
                )
            )
            assert sub.recv().session_present
            got = []
            while len(got) < len(acked) + 1:
                p = sub.recv(timeout=10)
                got.append(p.payload[:6])
                sub.send(Puback(packet_id=p.packet_id))
            assert got[: len(acked)] == acked and got[-1] == b"after"
        finally:
            close_all()
            gw.stop()


def _props(**kw):  # type: ignore[no-untyped-def]
    from protocol.mqtt import Properties

    return Properties(**kw)


def test_amqp_publishers_are_nacked_then_blocked_and_resume(tmp_path):
    """AMQP on a full disk: the publish that fails is nacked (never confirmed), then the
    connection gets connection.blocked; when space returns, connection.unblocked, and
    confirmed publishing goes on. Nothing confirmed is lost."""
    import pika
    from pika.exceptions import NackError

    from tests.gateway.gateway_process import GatewayProcess

    with small_fs(tmp_path / "fs", "6m") as fs:
        config = tmp_path / "gw.toml"
        config.write_text("[store]\nsegment_bytes = 1048576\nmax_message_bytes = 65536\n")
        gw = GatewayProcess(fs / "data", "--config", str(config)).start()
        conn = None
        try:
            events: list[str] = []
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", gw.ports["amqp"], connection_attempts=1, socket_timeout=5,
                blocked_connection_timeout=30))
            conn.add_on_connection_blocked_callback(lambda *_: events.append("blocked"))
            conn.add_on_connection_unblocked_callback(lambda *_: events.append("unblocked"))
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("keep", durable=True)
            confirmed: list[bytes] = []
            nacked = False
            for i in range(2000):
                body = b"%06d" % i + bytes(16_000)
                try:
                    ch.basic_publish("", "keep", body,
                                     pika.BasicProperties(delivery_mode=2))
                except NackError:
                    nacked = True
                    break
                confirmed.append(body[:6])
            assert nacked and len(confirmed) > 10
            # the next publish while the disk is full blocks the connection
            with contextlib.suppress(NackError):
                ch.basic_publish("", "keep", b"probe", pika.BasicProperties(delivery_mode=2))
            deadline = time.monotonic() + 10
            while "blocked" not in events and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.2)
            assert "blocked" in events
            grow(fs, "64m")
            deadline = time.monotonic() + 15
            while "unblocked" not in events and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.2)
            assert "unblocked" in events
            ch.basic_publish("", "keep", b"after", pika.BasicProperties(delivery_mode=2))
            got = []
            while True:
                method, _, body = ch.basic_get("keep", auto_ack=True)
                if method is None:
                    break
                got.append(body[:6])
            # every confirmed message is there; the probe may or may not have been stored
            assert got[: len(confirmed)] == confirmed and got[-1] == b"after"
        finally:
            if conn is not None and conn.is_open:
                conn.close()
            gw.stop()
