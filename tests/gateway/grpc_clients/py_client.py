"""The official RocketMQ 5 Python client (PyPI ``rocketmq-python-client``), unchanged, as a
subprocess the tests drive (see ``clients.PyClient``; this file is not a test).

    python py_client.py producer|simple|push '<json config>'

It prints ``LMQ {"ready": true}`` once ``startup()`` returned (``{"fatal": ...}`` if it
raised), then, for ``producer`` and ``simple``, reads one JSON command a line from stdin
and prints one ``{"reply": id, "ok": ...}`` or ``{"reply": id, "error": ...}`` each:

- ``{"op": "send", "message": {topic, body, tag, keys, properties, group, delivery}}``
  (``delivery``: a DELAY message's delivery time, epoch SECONDS: the client writes it
  into the protobuf Timestamp's seconds, whatever its docstring says)
- ``{"op": "receive", "max": n, "invisible": seconds}`` -> the messages
- ``{"op": "send_tx", "message": {...}, "end": "commit"|"rollback"|"none"}`` (a
  transactional producer: begin, send the half message, then commit, roll back, or
  leave it to the gateway's check-back; the producer's checker answers a check-back
  with ``checker[body]`` (COMMIT, ROLLBACK; unspecified if absent) and prints
  ``{"check": {...}, "answer": ...}``)
- ``{"op": "ack", "msg": message_id}``, ``{"op": "change", "msg": ..., "invisible": s}``
  (on the last received copy of that message; the client itself replaces the receipt
  handle with the one ChangeInvisibleDuration returns)

A ``push`` consumer prints ``{"msg": {...}, "result": "SUCCESS"|"FAILURE"}`` for every
consume call; bodies listed in ``fail`` always fail, ``fail_times`` {body: n} fail n times.
SIGTERM shuts the client down (``{"closed": true}``). The client library logs to
``$HOME/logs/rocketmq_python``: the harness points HOME into the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_out_lock = threading.Lock()


def out(obj: dict[str, Any]) -> None:
    with _out_lock:
        sys.stdout.write("LMQ " + json.dumps(obj) + "\n")
        sys.stdout.flush()


def view(m: Any) -> dict[str, Any]:
    body = bytes(m.body or b"")
    return {
        "id": m.message_id,
        "topic": m.topic,
        "body": body.decode("utf-8", "replace"),
        "size": len(body),
        "tag": m.tag,
        "keys": sorted(m.keys or []),
        "properties": dict(m.properties or {}),
        "group": m.message_group,
        "attempt": m.delivery_attempt,
        "receipt": m.receipt_handle,
        "corrupted": bool(m.corrupted),
        "born": m.born_timestamp,
        "delivery": m.delivery_timestamp,
        "received_ms": int(time.time() * 1000),
    }


def message(spec: dict[str, Any]) -> Any:
    m = Message()
    m.topic = spec["topic"]
    m.body = spec["body"].encode()
    if spec.get("tag"):
        m.tag = spec["tag"]
    for key in spec.get("keys") or []:
        m.keys = key  # the setter adds one key per assignment
    for k, v in (spec.get("properties") or {}).items():
        m.add_property(k, v)
    if spec.get("group"):
        m.message_group = spec["group"]
    if spec.get("delivery"):
        # a DELAY message; the client puts this number in the Timestamp's seconds
        m.delivery_timestamp = spec["delivery"]
    return m


def configuration(cfg: dict[str, Any]) -> Any:
    return ClientConfiguration(
        cfg["endpoints"], Credentials(cfg.get("ak", ""), cfg.get("sk", "")),
        request_timeout=cfg.get("request_timeout", 3),
    )


def subscriptions(cfg: dict[str, Any]) -> dict[str, Any]:
    return {t: FilterExpression(e) for t, e in cfg["subscriptions"].items()}


class Listener(MessageListener):
    def __init__(self, fail: list[str], fail_times: dict[str, int]) -> None:
        self.fail = set(fail)
        self.fail_times = dict(fail_times)
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        v = view(message)
        with self.lock:
            failing = v["body"] in self.fail or self.fail_times.get(v["body"], 0) > 0
            if v["body"] in self.fail_times and self.fail_times[v["body"]] > 0:
                self.fail_times[v["body"]] -= 1
        v["at"] = time.time()
        out({"msg": v, "result": "FAILURE" if failing else "SUCCESS"})
        return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS


class Checker(TransactionChecker):
    """Answers check-backs by body (``checker`` in the producer's config)."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def check(self, message: Any) -> Any:
        answer = self.answers.get(message.body.decode(), "TRANSACTION_RESOLUTION_UNSPECIFIED")
        out({"check": view(message), "answer": answer})
        return getattr(TransactionResolution, answer)


def serve(client: Any, role: str) -> None:
    held: dict[str, Any] = {}  # message id -> the last received copy
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        rid = cmd.get("id")
        try:
            op = cmd["op"]
            if op == "send" and role == "producer":
                receipt = client.send(message(cmd["message"]))
                mq = receipt.message_queue
                # the client's MessageQueue keeps its id private (no property)
                result: Any = {"id": receipt.message_id, "offset": receipt.offset,
                               "queue": getattr(mq, "_MessageQueue__queue_id", None)}
            elif op == "send_tx" and role == "producer":
                transaction = client.begin_transaction()
                receipt = client.send(message(cmd["message"]), transaction)
                end = cmd.get("end", "commit")
                if end == "commit":
                    transaction.commit()
                elif end == "rollback":
                    transaction.rollback()
                result = {"id": receipt.message_id, "transaction_id": receipt.transaction_id}
            elif op == "receive" and role == "simple":
                got = client.receive(cmd.get("max", 16), cmd.get("invisible", 15))
                for m in got:
                    held[m.message_id] = m
                result = [view(m) for m in got]
            elif op == "ack" and role == "simple":
                client.ack(held[cmd["msg"]])
                result = True
            elif op == "change" and role == "simple":
                m = held[cmd["msg"]]
                client.change_invisible_duration(m, cmd["invisible"])
                result = {"receipt": m.receipt_handle}
            else:
                raise ValueError(f"unknown command for {role}: {op}")
            out({"reply": rid, "ok": result})
        except Exception as exc:  # the test asserts on the client's error
            out({"reply": rid, "error": f"{type(exc).__name__}: {exc}"})


def main() -> None:
    role, cfg = sys.argv[1], json.loads(sys.argv[2])

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    conf = configuration(cfg)
    client: Any
    try:
        if role == "producer":
            checker = Checker(cfg["checker"]) if "checker" in cfg else None
            client = Producer(conf, cfg.get("topics"), checker)
        elif role == "simple":
            client = SimpleConsumer(conf, cfg["group"], subscriptions(cfg),
                                    await_duration=cfg.get("await_s", 5))
        elif role == "push":
            listener = Listener(cfg.get("fail", []), cfg.get("fail_times", {}))
            client = PushConsumer(conf, cfg["group"], listener, subscriptions(cfg),
                                  consumption_thread_count=cfg.get("threads", 4))
        else:
            raise ValueError(f"unknown role {role}")
        client.startup()
    except Exception as exc:
        out({"fatal": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
        os._exit(1)
    out({"ready": True, "client_id": client.client_id})
    try:
        if role == "push":
            while True:
                time.sleep(3600)
        serve(client, role)
    finally:
        # The client's threads may outlive a shutdown that hangs on the gateway: a bound.
        threading.Timer(15.0, lambda: os._exit(3)).start()
        try:
            client.shutdown()
        except Exception as exc:
            out({"shutdown_error": str(exc)})
        out({"closed": True})
        os._exit(0)


if __name__ == "__main__":
    main()
