"""Soak: minutes of mixed load with clients connecting and disconnecting; are the
gateway's resources flat?

    .venv/bin/python bench/soak.py                       # 30 minutes
    .venv/bin/python bench/soak.py --minutes 10 --interval 5 --out bench/results/soak

A gateway subprocess (``python -m cli.serve``, ``tests/gateway/gateway_process.py``)
serves, for ``--minutes``:

- a steady MQTT QoS 1 publisher (paho) on ``soak/t/<n>`` and a steady AMQP publisher
  with confirms to the durable queue ``soak-q``, which a steady AMQP consumer drains;
- MQTT churners: connect, subscribe ``soak/t/#`` at QoS 1, take some messages,
  disconnect, again and again; half with clean sessions (new client ids), half with
  persistent sessions of a fixed pool of client ids (their backlog accumulates while
  they are away and is drained when they come back), some leaving with DISCONNECT and
  some dropping the socket;
- AMQP churners: open a connection, a few channels, an exclusive auto-delete queue bound
  to ``amq.topic`` (``soak.#``, so MQTT messages reach it), publish, consume, close the
  channels and the connection (or drop the socket).

Every ``--interval`` seconds it samples the gateway process (psutil): resident memory,
open file descriptors and threads, and scrapes ``/metrics`` on the unified port
(connections, sessions, queues, LMQs, and a task gauge if the gateway has one). It
writes ``<out>.csv`` and ``<out>.png`` and prints, for each curve, the median of the
last third of the run against the median of the second third: flat when within 10 %
(or within a small absolute slack for small counts).
"""

from __future__ import annotations

import argparse
import csv
import logging
import random
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import paho.mqtt.client as mqtt  # noqa: E402
import pika  # noqa: E402
import pika.exceptions  # noqa: E402
import psutil  # noqa: E402
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402

from tests.gateway.gateway_process import GatewayProcess  # noqa: E402

QUEUE = "soak-q"
PERSISTENT_IDS = [f"soak-persistent-{i}" for i in range(6)]
#: the curves judged for flatness, with the absolute slack allowed on top of 10 %
FLAT = {"rss_mb": 4.0, "fds": 3, "threads": 1, "tasks": 5}


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, int] = {}

    def inc(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.values[name] = self.values.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.values)


def _paho(port: int, client_id: str, clean: bool) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv311, clean_session=clean)
    client.connect("127.0.0.1", port, keepalive=30)
    return client


def _amqp(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, connection_attempts=1, socket_timeout=10,
        blocked_connection_timeout=30))


def _drop_pika(conn: pika.BlockingConnection) -> None:
    """Close the socket under pika without a connection.close."""
    transport = getattr(getattr(conn, "_impl", None), "_transport", None)
    sock = getattr(transport, "_sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


def steady_mqtt_publisher(port: int, stop: threading.Event, counters: Counters,
                          rate: float) -> None:
    client = _paho(port, "soak-steady-pub", clean=True)
    client.loop_start()
    try:
        n = 0
        while not stop.is_set():
            info = client.publish(f"soak/t/{n % 16}", b"x" * 100, qos=1)
            info.wait_for_publish(10)
            counters.inc("mqtt_published")
            n += 1
            time.sleep(1 / rate)
    finally:
        client.disconnect()
        client.loop_stop()


def steady_amqp_publisher(port: int, stop: threading.Event, counters: Counters,
                          rate: float) -> None:
    conn = _amqp(port)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        while not stop.is_set():
            ch.basic_publish("", QUEUE, b"y" * 100, pika.BasicProperties(delivery_mode=2))
            counters.inc("amqp_published")
            time.sleep(1 / rate)
    finally:
        conn.close()


def steady_amqp_consumer(port: int, stop: threading.Event, counters: Counters) -> None:
    conn = _amqp(port)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)

        def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
            counters.inc("amqp_consumed")
            ch.basic_ack(method.delivery_tag)

        ch.basic_consume(QUEUE, on_message)
        while not stop.is_set():
            conn.process_data_events(time_limit=0.5)
    finally:
        conn.close()


def mqtt_churner(port: int, stop: threading.Event, counters: Counters, seed: int) -> None:
    rnd = random.Random(seed)
    n = 0
    while not stop.is_set():
        n += 1
        persistent = rnd.random() < 0.5
        client_id = rnd.choice(PERSISTENT_IDS) if persistent else f"soak-clean-{seed}-{n}"
        got = threading.Semaphore(0)
        try:
            client = _paho(port, client_id, clean=not persistent)
            client.on_message = lambda c, u, m, got=got: got.release()
            client.loop_start()
            try:
                client.subscribe("soak/t/#", qos=1)
                deadline = time.monotonic() + rnd.uniform(0.2, 2.0)
                while time.monotonic() < deadline and not stop.is_set():
                    if got.acquire(timeout=0.1):
                        counters.inc("mqtt_received")
                if rnd.random() < 0.2:
                    client.publish("soak/churn", b"z", qos=1)
            finally:
                if rnd.random() < 0.25:  # drop the socket: an abnormal disconnect
                    client.loop_stop()
                    sock = client.socket()
                    if sock is not None:
                        sock.close()
                else:
                    client.disconnect()
                    client.loop_stop()
            counters.inc("mqtt_connects")
        except Exception as exc:
            counters.inc("mqtt_errors")
            print(f"mqtt churner: {exc!r}", flush=True)
            time.sleep(0.5)


def amqp_churner(port: int, stop: threading.Event, counters: Counters, seed: int) -> None:
    rnd = random.Random(seed)
    while not stop.is_set():
        try:
            conn = _amqp(port)
            try:
                channels = [conn.channel() for _ in range(rnd.randint(1, 4))]
                ch = channels[0]
                q = ch.queue_declare("", exclusive=True, auto_delete=True).method.queue
                ch.queue_bind(q, "amq.topic", "soak.#")
                ch.confirm_delivery()
                for _ in range(rnd.randint(1, 20)):
                    ch.basic_publish("", q, b"w", pika.BasicProperties(delivery_mode=2))
                deadline = time.monotonic() + rnd.uniform(0.1, 1.5)
                while time.monotonic() < deadline:
                    method, _, _ = ch.basic_get(q)
                    if method is None:
                        conn.sleep(0.05)
                        continue
                    counters.inc("amqp_churn_received")
                    ch.basic_ack(method.delivery_tag)
                for extra in channels[1:]:
                    extra.close()
            finally:
                if rnd.random() < 0.2:
                    _drop_pika(conn)
                else:
                    conn.close()
            counters.inc("amqp_connects")
        except Exception as exc:
            counters.inc("amqp_errors")
            print(f"amqp churner: {exc!r}", flush=True)
            time.sleep(0.5)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def scrape(port: int) -> dict[str, float]:
    """The /metrics samples, label sets summed per metric name."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    out: dict[str, float] = {}
    for line in text.decode().splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def _task_gauge(metrics: dict[str, float]) -> str | None:
    for name in sorted(metrics):
        if "task" in name and not name.endswith("_total"):
            return name
    return None


def flatness(rows: list[dict[str, Any]], key: str, slack: float) -> tuple[bool, float, float]:
    values = [r[key] for r in rows if r.get(key) not in (None, "")]
    third = len(values) // 3
    if third < 2:
        return True, float("nan"), float("nan")
    middle = statistics.median(values[third : 2 * third])
    last = statistics.median(values[2 * third :])
    return abs(last - middle) <= max(0.10 * middle, slack), middle, last


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t_s"] / 60 for r in rows]
    panels = [
        ("rss_mb", "RSS (MiB)"),
        ("fds", "open file descriptors"),
        ("threads", "threads"),
        ("tasks" if any(r.get("tasks") not in (None, "") for r in rows) else "connections",
         "asyncio tasks" if any(r.get("tasks") not in (None, "") for r in rows)
         else "open connections (/metrics; no task gauge)"),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 10), sharex=True)
    for ax, (key, label) in zip(axes, panels, strict=True):
        ax.plot(t, [r[key] for r in rows], lw=1)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[-1].set_xlabel("minutes")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def soak(data_dir: Path, minutes: float, interval: float, out: Path,
         mqtt_churners: int = 3, amqp_churners: int = 2, rate: float = 100.0) -> int:
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    gw = GatewayProcess(data_dir).start()
    assert gw.proc is not None
    proc = psutil.Process(gw.proc.pid)
    stop = threading.Event()
    counters = Counters()
    mqtt_port, amqp_port, http_port = gw.ports["mqtt"], gw.ports["amqp"], gw.ports["unified"]
    conn = _amqp(amqp_port)
    conn.channel().queue_declare(QUEUE, durable=True)
    conn.close()
    threads = [
        threading.Thread(target=steady_mqtt_publisher, args=(mqtt_port, stop, counters, rate)),
        threading.Thread(target=steady_amqp_publisher, args=(amqp_port, stop, counters, rate)),
        threading.Thread(target=steady_amqp_consumer, args=(amqp_port, stop, counters)),
    ]
    threads += [threading.Thread(target=mqtt_churner, args=(mqtt_port, stop, counters, i))
                for i in range(mqtt_churners)]
    threads += [threading.Thread(target=amqp_churner, args=(amqp_port, stop, counters, 100 + i))
                for i in range(amqp_churners)]
    for t in threads:
        t.daemon = True
        t.start()
    rows: list[dict[str, Any]] = []
    task_name: str | None = None
    start = time.monotonic()
    csv_path, png_path = out.with_suffix(".csv"), out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with csv_path.open("w", newline="") as f:
            writer: csv.DictWriter[str] | None = None
            while time.monotonic() - start < minutes * 60:
                time.sleep(interval)
                if gw.proc is None or gw.proc.poll() is not None:
                    print("the gateway died:\n" + "".join(gw.output[-30:]), flush=True)
                    return 2
                metrics = scrape(http_port)
                task_name = task_name or _task_gauge(metrics)
                c = counters.snapshot()
                row: dict[str, Any] = {
                    "t_s": round(time.monotonic() - start, 1),
                    "rss_mb": round(proc.memory_info().rss / 2**20, 2),
                    "fds": proc.num_fds(),
                    "threads": proc.num_threads(),
                    "tasks": metrics.get(task_name, "") if task_name else "",
                    "connections": metrics.get("lmq_connections", 0.0),
                    "amqp_connections": metrics.get("lmq_amqp_connections", 0.0),
                    "mqtt_sessions": metrics.get("lmq_mqtt_sessions", 0.0),
                    "mqtt_sessions_online": metrics.get("lmq_mqtt_sessions_online", 0.0),
                    "amqp_queues": metrics.get("lmq_amqp_queues", 0.0),
                    "store_lmqs": metrics.get("lmq_store_lmqs", 0.0),
                    "log_mb": round(metrics.get("lmq_store_log_bytes", 0.0) / 2**20, 1),
                    **{k: c.get(k, 0) for k in (
                        "mqtt_published", "mqtt_received", "mqtt_connects", "mqtt_errors",
                        "amqp_published", "amqp_consumed", "amqp_churn_received",
                        "amqp_connects", "amqp_errors")},
                }
                rows.append(row)
                if writer is None:
                    writer = csv.DictWriter(f, fieldnames=list(row))
                    writer.writeheader()
                writer.writerow(row)
                f.flush()
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        code = gw.stop()
    plot(rows, png_path, f"gateway soak, {minutes:g} min, sampled every {interval:g} s")
    last = rows[-1] if rows else {}
    print(f"\n{len(rows)} samples over {minutes:g} min; gateway exit code {code}")
    print(f"connections made: MQTT {last.get('mqtt_connects')}, AMQP {last.get('amqp_connects')};"
          f" errors: MQTT {last.get('mqtt_errors')}, AMQP {last.get('amqp_errors')}")
    print(f"messages: MQTT published {last.get('mqtt_published')}, received by churners"
          f" {last.get('mqtt_received')}; AMQP published {last.get('amqp_published')},"
          f" consumed {last.get('amqp_consumed')}")
    if task_name is None:
        print("no asyncio task gauge in /metrics: threads and connection gauges sampled"
              " instead (a task-count gauge would be needed to judge tasks)")
    ok = True
    for key, slack in FLAT.items():
        if key == "tasks" and task_name is None:
            continue
        flat, middle, end = flatness(rows, key, slack)
        ok = ok and flat
        print(f"{key:8} second third median {middle:10.2f}  last third median {end:10.2f}"
              f"  {'flat' if flat else 'NOT FLAT'}")
    print(f"CSV {csv_path}\nPNG {png_path}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=100.0,
                        help="messages/s of each steady publisher")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "soak")
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gw-soak-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        return soak(data_dir, args.minutes, args.interval, args.out, rate=args.rate)


if __name__ == "__main__":
    sys.exit(main())
