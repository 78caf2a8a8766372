"""Crash test: a gateway subprocess is killed with SIGKILL while a client publishes over
the JSON API with an Idempotency-Key per message. After a restart on the same data
directory, every publish that got a 2xx is there; the publish that was cut off by the
kill is retried with its key (and every answered one once more), and each message is
stored exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from ..gateway_process import GatewayProcess

pytestmark = pytest.mark.slow
BOUND = 10.0


def url(gateway: GatewayProcess) -> str:
    return f"http://127.0.0.1:{gateway.ports['http']}"


def test_kill_9_loses_no_answered_publish_and_stores_retries_once(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "data", "--http-port", "auto").start()
    answered: list[int] = []
    attempted: list[int] = []
    stop = threading.Event()
    try:
        def publish() -> None:
            session = requests.Session()
            i = 0
            try:
                while not stop.is_set():
                    attempted.append(i)
                    resp = session.post(
                        f"{url(gateway)}/v1/topics/crash/messages", json={"body": str(i)},
                        headers={"Idempotency-Key": f"key-{i}"}, timeout=BOUND)
                    if 200 <= resp.status_code < 300:
                        answered.append(i)
                    i += 1
            except requests.RequestException:
                pass  # the gateway died under us

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        deadline = time.monotonic() + 20
        while len(answered) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        gateway.kill()
        stop.set()
        publisher.join(BOUND)
        assert len(answered) >= 300

        gateway.ports = {}
        gateway.start()
        session = requests.Session()
        # retry everything attempted, the cut-off one included: nothing is stored twice
        for i in attempted:
            resp = session.post(f"{url(gateway)}/v1/topics/crash/messages",
                                json={"body": str(i)}, headers={"Idempotency-Key": f"key-{i}"},
                                timeout=BOUND)
            assert resp.status_code in (200, 201), resp.text
            if i in answered:
                assert resp.status_code == 200 and resp.json()["duplicate"] is True
        seen: Counter[str] = Counter()
        while True:
            got = session.post(f"{url(gateway)}/v1/groups/check/topics/crash/receive",
                               json={"max_messages": 32}, timeout=BOUND).json()["messages"]
            if not got:
                break
            seen.update(m["body"] for m in got)
            session.post(f"{url(gateway)}/v1/groups/check/ack", timeout=BOUND,
                         json={"receipt_handles": [m["receipt_handle"] for m in got]})
        assert seen == Counter(str(i) for i in attempted)
    finally:
        stop.set()
        gateway.stop()
