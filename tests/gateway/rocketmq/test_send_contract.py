"""The RocketMQ send contract (issue 28 §2): one set of cases, run against the producer
service without sockets and against each RocketMQ door over real sockets (remoting's
wire protocol, gRPC, the JSON API, RIP-17, the Aliyun MQ HTTP API through Aliyun's
SDK), on one in-process gateway with a users file and sync durability.

MQTT and AMQP publishes are not RocketMQ sends, but a publish to ``T`` or below it
reaches RocketMQ topic ``T``'s queue (docs/rocketmq.md), so the cases that can be said
in those protocols are run against them too, with paho-mqtt (MQTT 5) and aiormq
(publisher confirms): see :class:`Publishing`.

A door is a converter: it may answer with its own codes, but not decide differently.
Each door says how it spells each outcome (:attr:`Door.codes`); the cases say which
outcome is due. A new door inherits the contract by adding a :class:`Door`.

Cases: a system topic is refused; a read-only topic is refused; a message type the
topic does not accept is refused (a MIXED auto-created topic accepts all); the publish
ACL is applied to the topic's MQTT name ``T``; a message with ``mqttSecondTopic``
reaches an MQTT subscriber of ``T/...``; a batch is stored all or none; the reply comes
only once the store acknowledges the append under sync durability; an end of
transaction commits once, is idempotent, refuses the other end and unknown ids.

Settling what a door received (RocketMQ's pop ack and changeInvisibleTime): an ack
settles the message (nothing in flight); a second ack of the same receipt, and a change
of invisibility by a receipt a change replaced, find it no longer in flight; a malformed
receipt is refused; a change gives a new receipt, the message comes back once its new
invisible time runs out, and the new receipt acks it. The doors spell "no longer in
flight" differently (:attr:`Door.codes` ``ack_gone``, ``change_gone``): the remoting
protocol answers a stale ack SUCCESS as RocketMQ's broker does, the others refuse it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiormq
import pytest
from google.protobuf.duration_pb2 import Duration
from mq_http_sdk.mq_client import MQClient
from mq_http_sdk.mq_exception import MQServerException
from mq_http_sdk.mq_producer import TopicMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import Durability, MessageTooLarge, StoreConfig, UnknownReceipt
from gateway.auth import UsersDatabase
from gateway.auth.acl import AclRule
from gateway.auth.authenticator import Principal
from gateway.auth.passwords import hash_password
from gateway.auth.users import Permissions
from gateway.config import AUTO
from gateway.rocketmq import producer as p
from gateway.rocketmq.records import encode_properties, to_store_message
from gateway.server import Gateway
from lmq.rocketmq import (
    MQTT_SECOND_TOPIC,
    MessageType,
    Perm,
    TopicConfig,
    message_type_of,
    queue_lmq,
)
from protocol.grpc import Code
from protocol.remoting import HeaderError, RequestCode, ResponseCode

from ...grpc.grpc_core_support import BOUND, channel, metadata, resource, stub
from ..mqtt_clients import Paho
from ..remoting.remoting_support import Client, port_of, running_gateway
from ..remoting.rocketmq_messages import batch_body, properties
from ..remoting.test_pop_remoting import decode_exts
from ..remoting.test_remoting_security import signed
from ..remoting.test_remoting_send_pull import send_fields

MAX_BODY = 1024
AK, SK = "AK_app", "secret-app"


@dataclass
class Sent:
    """What a door's send came to: ``code`` in the door's spelling."""

    code: object
    detail: str = ""
    transaction: str = ""
    #: a change of invisibility's new receipt handle
    handle: str = ""


class Endpoint:
    """What a case talks to on the gateway under test: a :class:`Door` or a
    :class:`Publishing`."""

    name = ""
    #: outcome -> its answer (a code, or the service's exception class)
    codes: dict[str, object] = {}

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass


E = TypeVar("E", bound=Endpoint)


class Door(Endpoint):
    #: A batch is stored all or none (else: per message, the failed ones reported).
    atomic_batch = True
    #: The door ends transactions.
    transactions = True
    #: The door sends batches.
    batches = True
    #: The door receives by pop and acks by receipt.
    settles = True
    #: The door changes a received message's invisible time.
    changes = True

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        raise NotImplementedError

    async def end(self, topic: str, transaction: str, commit: bool) -> Sent:
        raise NotImplementedError

    async def join(self, topic: str, group: str) -> None:
        """Before the first send the group is to receive (a door whose new groups start
        at the end of the queues creates the group here)."""

    async def receive(self, topic: str, group: str, invisible_s: int) -> list[str]:
        """Pop, waiting up to a few seconds for a message; the receipt handles."""
        raise NotImplementedError

    async def ack(self, topic: str, group: str, handle: str) -> Sent:
        raise NotImplementedError

    async def change(self, topic: str, group: str, handle: str, invisible_s: int) -> Sent:
        raise NotImplementedError


#: a receipt handle no door issued
FORGED = "nonsense"
#: how long a receive waits for a message
POLL_S = 5


class ServiceDoor(Door):
    """The producer service itself, called as a door calls it: no socket."""

    name = "service"
    codes = {
        "ok": None, "system": p.SystemTopic, "readonly": p.NotWritable,
        "type": p.TypeMismatch, "acl": p.Forbidden, "too_large": MessageTooLarge,
        "conflict": p.TransactionConflict, "unknown": p.TransactionNotFound,
        "ack_gone": False, "change_gone": UnknownReceipt, "bad_handle": HeaderError,
    }
    principal = Principal("app", "access_key")

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        producer = self.gw.ctx.rocketmq.producer
        try:
            config = producer.resolve(topic, self.principal, "contract")
            items = []
            for body in bodies:
                props = {"UNIQ_KEY": uuid.uuid4().hex}
                if sharding:
                    props["__SHARDINGKEY"] = sharding
                if second:
                    props[MQTT_SECOND_TOPIC] = second
                if transaction:
                    props["TRAN_MSG"] = "true"
                producer.check_type(config, message_type_of(props))
                queue = p.ShardingKey(sharding).select(config)
                message = to_store_message(topic, body, encode_properties(props), props,
                                           origin="PG")
                items.append((message, producer.lmqs(topic, queue, second)))
            if transaction:
                result = await producer.send_half(*items[0], "PG")
                return Sent(None, transaction=str(result.position))
            await producer.send_batch(items)
        except (p.ProducerError, MessageTooLarge) as exc:
            return Sent(type(exc), str(exc))
        return Sent(None)

    async def end(self, topic: str, transaction: str, commit: bool) -> Sent:
        try:
            await self.gw.ctx.rocketmq.producer.end_transaction(
                int(transaction or 1 << 40), commit, self.principal, "contract", "PG")
        except p.ProducerError as exc:
            return Sent(type(exc), str(exc))
        return Sent(None)

    # a handle: "queue offset extraInfo"

    async def receive(self, topic: str, group: str, invisible_s: int) -> list[str]:
        result = await self.gw.ctx.rocketmq.pop.pop(
            group, topic, -1, 32, invisible_s * 1000, POLL_S * 1000)
        return [f"{i.source.queue_id} {i.message.offset} {i.extra_info}"
                for i in result.items]

    @staticmethod
    def _parts(handle: str) -> tuple[int, int, str]:
        queue, offset, extra = (handle.split(" ", 2) + ["", ""])[:3] \
            if handle != FORGED else ("0", "0", FORGED)
        return int(queue), int(offset), extra

    async def ack(self, topic: str, group: str, handle: str) -> Sent:
        try:
            in_flight = self.gw.ctx.rocketmq.pop.ack(group, topic, *self._parts(handle))
        except HeaderError as exc:
            return Sent(HeaderError, str(exc))
        return Sent(None if in_flight else False)

    async def change(self, topic: str, group: str, handle: str, invisible_s: int) -> Sent:
        queue, offset, extra = self._parts(handle)
        try:
            pop_time, invisible = self.gw.ctx.rocketmq.pop.change_invisible_time(
                group, topic, queue, offset, extra, invisible_s * 1000)
        except (HeaderError, UnknownReceipt) as exc:
            return Sent(type(exc), str(exc))
        fields = extra.split(" ")
        fields[1], fields[2] = str(pop_time), str(invisible)
        return Sent(None, handle=f"{queue} {offset} {' '.join(fields)}")


class RemotingDoor(Door):
    """RocketMQ's remoting protocol, signed as ali-ons signs (the unified port)."""

    name = "remoting"
    codes = {
        "ok": ResponseCode.SUCCESS, "system": ResponseCode.NO_PERMISSION,
        "readonly": ResponseCode.NO_PERMISSION, "type": ResponseCode.MESSAGE_ILLEGAL,
        "acl": ResponseCode.NO_PERMISSION, "too_large": ResponseCode.MESSAGE_ILLEGAL,
        "conflict": ResponseCode.SYSTEM_ERROR, "unknown": ResponseCode.SYSTEM_ERROR,
        "ack_gone": ResponseCode.SUCCESS, "change_gone": ResponseCode.NO_MESSAGE,
        "bad_handle": ResponseCode.INVALID_PARAMETER,
    }

    async def open(self) -> None:
        self.client = await Client.connect(port_of(self.gw))

    async def close(self) -> None:
        await self.client.close()

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        extra: dict[str, str] = {}
        if sharding:
            extra["__SHARDINGKEY"] = sharding
        if second:
            extra[MQTT_SECOND_TOPIC] = second
        if transaction:
            extra["TRAN_MSG"] = "true"
            extra["PGROUP"] = "PG"
        if len(bodies) == 1:
            props = properties(UNIQ_KEY=uuid.uuid4().hex, **extra)
            fields = send_fields(topic, -1, props)
            reply = await self.client.call(
                RequestCode.SEND_MESSAGE_V2, signed(fields, bodies[0], AK, SK), bodies[0])
        else:
            body = batch_body([(b, properties(UNIQ_KEY=uuid.uuid4().hex, **extra))
                               for b in bodies])
            fields = send_fields(topic, -1, "") | {"m": True}
            reply = await self.client.call(
                RequestCode.SEND_BATCH_MESSAGE, signed(fields, body, AK, SK), body)
        msg_id = reply.ext_fields.get("msgId", "")
        return Sent(reply.code, reply.remark or "", transaction=msg_id)

    async def end(self, topic: str, transaction: str, commit: bool) -> Sent:
        # the half's log position: the last 16 hex digits of its offsetMsgId
        position = int(transaction[-16:], 16) if transaction else 1 << 40
        fields = {"producerGroup": "PG", "tranStateTableOffset": 0,
                  "commitLogOffset": position, "commitOrRollback": 8 if commit else 12,
                  "fromTransactionCheck": False, "msgId": "x", "transactionId": "x"}
        reply = await self.client.call(
            RequestCode.END_TRANSACTION, signed(fields, b"", AK, SK))
        return Sent(reply.code, reply.remark or "")

    # a handle: the ack's fields (queue, offset, POP_CK) as JSON

    async def receive(self, topic: str, group: str, invisible_s: int) -> list[str]:
        fields = {"consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": 32,
                  "invisibleTime": invisible_s * 1000, "pollTime": POLL_S * 1000,
                  "bornTime": int(time.time() * 1000), "initMode": 0}
        reply = await self.client.call(RequestCode.POP_MESSAGE, signed(fields, b"", AK, SK))
        assert reply.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), reply
        return [json.dumps({"queueId": e.queue_id, "offset": e.queue_offset,
                            "extraInfo": e.properties["POP_CK"]})
                for e in decode_exts(reply.body or b"")]

    @staticmethod
    def _fields(topic: str, group: str, handle: str) -> dict[str, Any]:
        parts = json.loads(handle) if handle != FORGED else {
            "queueId": 0, "offset": 0, "extraInfo": FORGED}
        fields: dict[str, Any] = {"consumerGroup": group, "topic": topic, **parts}
        return fields

    async def ack(self, topic: str, group: str, handle: str) -> Sent:
        fields = self._fields(topic, group, handle)
        reply = await self.client.call(RequestCode.ACK_MESSAGE, signed(fields, b"", AK, SK))
        return Sent(reply.code, reply.remark or "")

    async def change(self, topic: str, group: str, handle: str, invisible_s: int) -> Sent:
        fields = self._fields(topic, group, handle) | {"invisibleTime": invisible_s * 1000}
        reply = await self.client.call(
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME, signed(fields, b"", AK, SK))
        new = ""
        if reply.code == ResponseCode.SUCCESS:
            extra = fields["extraInfo"].split(" ")
            extra[1], extra[2] = reply.ext_fields["popTime"], reply.ext_fields["invisibleTime"]
            new = json.dumps(fields | {"extraInfo": " ".join(extra)})
        return Sent(reply.code, reply.remark or "", handle=new)


class GrpcDoor(Door):
    """RocketMQ 5's gRPC protocol, signed as the official clients sign (the unified
    port)."""

    name = "grpc"
    codes = {
        "ok": Code.OK, "system": Code.ILLEGAL_TOPIC, "readonly": Code.FORBIDDEN,
        "type": Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "acl": Code.FORBIDDEN,
        "too_large": Code.MESSAGE_BODY_TOO_LARGE, "conflict": Code.PRECONDITION_FAILED,
        "unknown": Code.INVALID_TRANSACTION_ID, "ack_gone": Code.OK,
        "change_gone": Code.INVALID_RECEIPT_HANDLE, "bad_handle": Code.INVALID_RECEIPT_HANDLE,
    }

    async def open(self) -> None:
        self.channel = channel(port_of(self.gw))
        self.stub = stub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    def md(self) -> list[tuple[str, str]]:
        return metadata("contract", ak=AK, sk=SK)

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        messages = []
        for body in bodies:
            sysp = pb.SystemProperties(
                message_id=uuid.uuid4().hex.upper(), body_encoding=pb.IDENTITY,
                message_type=pb.TRANSACTION if transaction else
                pb.FIFO if sharding else pb.NORMAL)
            if sharding:
                sysp.message_group = sharding
            msg = pb.Message(topic=resource(topic), body=body, system_properties=sysp)
            if second:
                msg.user_properties[MQTT_SECOND_TOPIC] = second
            messages.append(msg)
        reply = await self.stub.SendMessage(
            service_pb2.SendMessageRequest(messages=messages), metadata=self.md(),
            timeout=BOUND)
        tx = reply.entries[0].transaction_id if reply.entries else ""
        return Sent(reply.status.code, reply.status.message, transaction=tx)

    async def end(self, topic: str, transaction: str, commit: bool) -> Sent:
        reply = await self.stub.EndTransaction(
            service_pb2.EndTransactionRequest(
                topic=resource(topic), message_id="x",
                transaction_id=transaction or "lmq-tx:999999",
                resolution=pb.COMMIT if commit else pb.ROLLBACK,
                source=pb.SOURCE_CLIENT),
            metadata=self.md(), timeout=BOUND)
        return Sent(reply.status.code, reply.status.message)

    async def receive(self, topic: str, group: str, invisible_s: int) -> list[str]:
        request = service_pb2.ReceiveMessageRequest(
            group=resource(group),
            message_queue=pb.MessageQueue(topic=resource(topic), id=0,
                                          broker=pb.Broker(name="lmq-gateway")),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=32, invisible_duration=Duration(seconds=invisible_s),
            long_polling_timeout=Duration(seconds=POLL_S))
        stream = self.stub.ReceiveMessage(request, metadata=self.md(), timeout=BOUND)
        return [r.message.system_properties.receipt_handle async for r in stream
                if r.HasField("message")]

    async def ack(self, topic: str, group: str, handle: str) -> Sent:
        reply = await self.stub.AckMessage(
            service_pb2.AckMessageRequest(
                group=resource(group), topic=resource(topic),
                entries=[service_pb2.AckMessageEntry(message_id="m", receipt_handle=handle)]),
            metadata=self.md(), timeout=BOUND)
        return Sent(reply.status.code, reply.status.message)

    async def change(self, topic: str, group: str, handle: str, invisible_s: int) -> Sent:
        reply = await self.stub.ChangeInvisibleDuration(
            service_pb2.ChangeInvisibleDurationRequest(
                group=resource(group), topic=resource(topic), receipt_handle=handle,
                invisible_duration=Duration(seconds=invisible_s), message_id="m"),
            metadata=self.md(), timeout=BOUND)
        return Sent(reply.status.code, reply.status.message, handle=reply.receipt_handle)


class JsonDoor(Door):
    """The JSON API's topic publish (``POST /v1/topics/{topic}/messages``, HTTP Basic)
    on the unified port. Its batches answer per message (207 when mixed), as
    docs/http.md documents: the batch case checks that instead of all or none."""

    name = "json"
    atomic_batch = False
    codes = {
        "ok": 201, "system": 403, "readonly": 403, "type": 400, "acl": 403,
        "too_large": 413, "conflict": 409, "unknown": 404, "ack_gone": 410,
        "change_gone": 410, "bad_handle": 400,
    }

    def _post(self, path: str, doc: object) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{port_of(self.gw)}{path}"
        data = json.dumps(doc).encode()
        request = urllib.request.Request(url, data=data, method="POST", headers={
            "content-type": "application/json",
            "authorization": "Basic " + base64.b64encode(b"app:pw").decode()})
        try:
            with urllib.request.urlopen(request, timeout=BOUND) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        entries = []
        for body in bodies:
            entry: dict[str, Any] = {"body": body.decode()}
            if sharding:
                entry["message_group"] = sharding
            if second:
                entry["properties"] = {MQTT_SECOND_TOPIC: second}
            if transaction:
                entry["transaction"] = True
                entry["producer_group"] = "PG"
            entries.append(entry)
        doc = entries[0] if len(entries) == 1 else {"messages": entries}
        status, answer = await asyncio.to_thread(
            self._post, f"/v1/topics/{urllib.parse.quote(topic)}/messages", doc)
        if status == 200 and isinstance(answer, dict) and "results" in answer:
            status = 201  # a batch: every message stored
        tx = str(answer.get("transaction_id", "")) if isinstance(answer, dict) else ""
        return Sent(status, json.dumps(answer), transaction=tx)

    async def end(self, topic: str, transaction: str, commit: bool) -> Sent:
        action = "commit" if commit else "rollback"
        status, answer = await asyncio.to_thread(
            self._post, f"/v1/transactions/{transaction or 1 << 40}/{action}", {})
        return Sent(201 if status == 200 else status, json.dumps(answer))

    async def receive(self, topic: str, group: str, invisible_s: int) -> list[str]:
        query = urllib.parse.urlencode({"wait_seconds": POLL_S, "invisible_seconds": invisible_s})
        status, answer = await asyncio.to_thread(
            self._post, f"/v1/groups/{group}/topics/{urllib.parse.quote(topic)}/receive?{query}",
            {})
        assert status == 200, answer
        return [m["receipt_handle"] for m in answer["messages"]]

    async def ack(self, topic: str, group: str, handle: str) -> Sent:
        status, answer = await asyncio.to_thread(
            self._post, f"/v1/groups/{group}/ack", {"receipt_handles": [handle]})
        return Sent(201 if status == 200 else status, json.dumps(answer))

    async def change(self, topic: str, group: str, handle: str, invisible_s: int) -> Sent:
        status, answer = await asyncio.to_thread(
            self._post, f"/v1/groups/{group}/visibility",
            {"receipt_handles": [handle], "invisible_seconds": invisible_s})
        new = answer["results"][0].get("new_receipt_handle", "") if status == 200 else ""
        return Sent(201 if status == 200 else status, json.dumps(answer), handle=new)


class Rip17Door(Door):
    """RIP-17's MSG_SEND (101) and MSG_BATCH_SEND (102) forms on the unified port,
    logged in with Username/Passwd. Its answers have few codes: refusals of the topic
    or the message are SEND_ERROR, the ACL HEADER_ERROR. It has no transactions."""

    name = "rip17"
    transactions = False
    settles = False
    codes = {
        "ok": 0, "system": 14, "readonly": 14, "type": 14, "acl": 6, "too_large": 14,
    }

    def _post(self, code: int, form: dict[str, str]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port_of(self.gw)}/", data=urllib.parse.urlencode(form).encode(),
            method="POST", headers={
                "Code": str(code), "GroupName": "PG", "Pid": "1", "Version": "1.0",
                "Language": "JAVA", "Username": "app", "Passwd": "pw",
                "Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=BOUND) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        assert not transaction
        if len(bodies) == 1:
            ext = {}
            if sharding:
                ext["__SHARDINGKEY"] = sharding
            if second:
                ext[MQTT_SECOND_TOPIC] = second
            answer = await asyncio.to_thread(self._post, 101, {
                "topic": topic, "content": bodies[0].decode(), "bizSeqNo": "B",
                "uniqueId": uuid.uuid4().hex, "extfields": json.dumps(ext)})
        else:
            contents = [{"bizSeqNo": f"b{i}", "topic": topic, "msg": body.decode()}
                        for i, body in enumerate(bodies)]
            answer = await asyncio.to_thread(self._post, 102, {
                "batchId": "X", "size": str(len(bodies)), "contents": json.dumps(contents)})
        return Sent(answer["retCode"], answer.get("retMsg", ""))


class AliyunDoor(Door):
    """The Aliyun MQ HTTP API through Aliyun's own Python SDK (``mq-http-sdk``, signed
    with the access key) on the unified port. It publishes one message a request (no
    batch); a transaction ends by its half's receipt handle (commit / rollback). Its
    consumers ack; the API has no change of invisibility."""

    name = "aliyun"
    batches = False
    changes = False
    codes = {
        "ok": "ok", "system": "AccessDenied", "readonly": "AccessDenied",
        "type": "InvalidArgument", "acl": "AccessDenied", "too_large": "InvalidArgument",
        "conflict": "MessageNotExist", "unknown": "ReceiptHandleError",
        "ack_gone": "MessageNotExist", "bad_handle": "ReceiptHandleError",
    }

    async def open(self) -> None:
        self.client = MQClient(f"http://127.0.0.1:{port_of(self.gw)}", AK, SK)

    async def close(self) -> None:
        self.client.close_connection()

    @staticmethod
    def _code(fn: Any, *args: Any) -> tuple[str, Any]:
        try:
            return "ok", fn(*args)
        except MQServerException as exc:
            sub = exc.sub_errors[0]["ErrorCode"] if exc.sub_errors else exc.type
            return str(sub), None

    async def send(self, topic: str, bodies: list[bytes], *, sharding: str = "",
                   second: str = "", transaction: bool = False) -> Sent:
        assert len(bodies) == 1
        msg = TopicMessage(bodies[0].decode(), "")
        if sharding:
            msg.set_sharding_key(sharding)
        if second:
            msg.put_property(MQTT_SECOND_TOPIC, second)
        if transaction:
            msg.set_trans_check_immunity_time(10)
            producer = self.client.get_trans_producer("", topic, "GID_PG")
        else:
            producer = self.client.get_producer("", topic)
        code, sent = await asyncio.to_thread(self._code, producer.publish_message, msg)
        return Sent(code, transaction=sent.receipt_handle if transaction and sent else "")

    async def end(self, topic: str, transaction: str, commit: bool) -> Sent:
        producer = self.client.get_trans_producer("", topic, "GID_PG")
        fn = producer.commit if commit else producer.rollback
        code, _ = await asyncio.to_thread(self._code, fn, transaction or "not-a-handle")
        return Sent(code)

    async def join(self, topic: str, group: str) -> None:
        # a new consumer group starts at the end of the queues (the SDK's own tests do
        # this too): consume once, nothing there
        consumer = self.client.get_consumer("", topic, group)
        code, _ = await asyncio.to_thread(self._code, consumer.consume_message, 1, 0)
        assert code == "MessageNotExist", code

    async def receive(self, topic: str, group: str, invisible_s: int) -> list[str]:
        consumer = self.client.get_consumer("", topic, group)
        code, got = await asyncio.to_thread(self._code, consumer.consume_message, 16, POLL_S)
        assert code in ("ok", "MessageNotExist"), code
        return [m.receipt_handle for m in got] if code == "ok" else []

    async def ack(self, topic: str, group: str, handle: str) -> Sent:
        consumer = self.client.get_consumer("", topic, group)
        code, _ = await asyncio.to_thread(self._code, consumer.ack_message, [handle])
        return Sent(code)


DOORS = [ServiceDoor, RemotingDoor, GrpcDoor, JsonDoor, Rip17Door, AliyunDoor]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    data = tmp_path / "data"
    data.mkdir()
    db = UsersDatabase()
    db.add_user("app", hash_password("pw", n=16, r=1, p=1))
    db.add_access_key("app", AK, SK)
    db.set_permissions("app", "/", Permissions(".*", ".*", ".*"))
    for rule in ("deny secret", "deny secret/#", "both #"):
        db.add_acl_rule("app", AclRule.parse(rule))
    db.save(data / "users.json")
    async with running_gateway(
        data, store=StoreConfig(durability=Durability.SYNC, max_message_bytes=MAX_BODY),
        amqp_port=AUTO,
    ) as gw:
        topics = gw.ctx.rocketmq.topics
        topics.create(TopicConfig("plain", 2, 2))
        topics.create(TopicConfig("fifo", 2, 2, message_type=MessageType.FIFO))
        topics.create(TopicConfig("tx", 1, 1, message_type=MessageType.TRANSACTION))
        topics.create(TopicConfig("readonly", 2, 2, perm=Perm.READ))
        topics.create(TopicConfig("secret", 2, 2))
        yield gw


@contextlib.asynccontextmanager
async def opened(kind: type[E], gw: Gateway) -> AsyncIterator[E]:
    one = kind(gw)
    await one.open()
    try:
        yield one
    finally:
        await one.close()


@pytest.fixture(params=DOORS, ids=lambda door: door.name)
async def door(request: Any, gateway: Gateway) -> AsyncIterator[Door]:
    async with opened(request.param, gateway) as one:
        yield one


def stored(gw: Gateway, topic: str) -> int:
    """Messages in the topic's queues."""
    config = gw.ctx.rocketmq.topics.get(topic)
    assert config is not None
    total = 0
    for q in range(config.queue_count):
        info = gw.ctx.store.lmq(queue_lmq(topic, q))
        total += 0 if info is None else info.messages
    return total


#: (what is sent, the outcome due)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("a plain send", {"topic": "plain"}, "ok"),
    ("a system topic", {"topic": "TBW102"}, "system"),
    ("a read-only topic", {"topic": "readonly"}, "readonly"),
    ("a FIFO message to a NORMAL topic", {"topic": "plain", "sharding": "g"}, "type"),
    ("a NORMAL message to a FIFO topic", {"topic": "fifo"}, "type"),
    ("a FIFO message to a FIFO topic", {"topic": "fifo", "sharding": "g"}, "ok"),
    ("a FIFO message to an auto-created (MIXED) topic", {"topic": "auto1", "sharding": "g"},
     "ok"),
    ("a topic the ACL denies", {"topic": "secret"}, "acl"),
    ("a message over the size limit", {"topic": "plain", "body": b"x" * (MAX_BODY + 1)},
     "too_large"),
]


async def test_send_checks(door: Door) -> None:
    for what, case, outcome in CASES:
        args = dict(case)
        topic = args.pop("topic")
        body = args.pop("body", b"body")
        before = stored(door.gw, topic) if door.gw.ctx.rocketmq.topics.get(topic) else 0
        sent = await door.send(topic, [body], **args)
        assert sent.code == door.codes[outcome], (door.name, what, sent)
        if outcome != "ok" and door.gw.ctx.rocketmq.topics.get(topic) is not None:
            assert stored(door.gw, topic) == before, (door.name, what)


async def test_batch_is_all_or_none(door: Door) -> None:
    if not door.batches:
        pytest.skip(f"{door.name} sends one message a request")
    ok = await door.send("plain", [b"a", b"b", b"c"])
    assert ok.code == door.codes["ok"], ok
    assert stored(door.gw, "plain") == 3
    bad = await door.send("plain", [b"d", b"x" * (MAX_BODY + 1), b"f"])
    if door.atomic_batch:
        assert bad.code == door.codes["too_large"], bad
        assert stored(door.gw, "plain") == 3
    else:  # per message: the two good ones stored, the bad one reported
        assert stored(door.gw, "plain") == 5


async def test_reply_after_durable(door: Door) -> None:
    store = door.gw.ctx.store
    for _ in range(3):
        sent = await door.send("plain", [b"durable"])
        assert sent.code == door.codes["ok"]
        # answered only once an fsync covers the append: nothing left to wait for
        assert store.acknowledged(store.log_end).done()


async def test_second_topic_reaches_mqtt(door: Door) -> None:
    port = port_of(door.gw, "mqtt")
    sub = await asyncio.to_thread(Paho, port, f"contract-{door.name}", username="app",
                                  password="pw")
    try:
        await asyncio.to_thread(sub.subscribe, "plain/eu/+", 1)
        sent = await door.send("plain", [b"to-mqtt"], second="/eu/7")
        assert sent.code == door.codes["ok"], sent
        got = await asyncio.to_thread(sub.get, BOUND)
        assert (got.topic, got.payload) == ("plain/eu/7", b"to-mqtt")
    finally:
        await asyncio.to_thread(sub.close)


async def test_end_transaction(door: Door) -> None:
    if not door.transactions:
        pytest.skip(f"{door.name} has no transactions")
    half = await door.send("tx", [b"half"], transaction=True)
    assert half.code == door.codes["ok"], half
    assert stored(door.gw, "tx") == 0
    committed = await door.end("tx", half.transaction, commit=True)
    assert committed.code == door.codes["ok"], committed
    assert stored(door.gw, "tx") == 1
    again = await door.end("tx", half.transaction, commit=True)
    assert again.code == door.codes["ok"], again  # idempotent: nothing delivered twice
    assert stored(door.gw, "tx") == 1
    other = await door.end("tx", half.transaction, commit=False)
    assert other.code == door.codes["conflict"], other
    unknown = await door.end("tx", "", commit=True)
    assert unknown.code == door.codes["unknown"], unknown


async def test_ack(door: Door) -> None:
    if not door.settles:
        pytest.skip(f"{door.name} does not receive by pop")
    store, group = door.gw.ctx.store, "GID_settle"
    await door.join("plain", group)
    assert (await door.send("plain", [b"one"])).code == door.codes["ok"]
    [handle] = await door.receive("plain", group, 30)
    assert store.pop.inflight_count(group) == 1
    acked = await door.ack("plain", group, handle)
    assert acked.code == door.codes["ok"], acked
    assert store.pop.inflight_count(group) == 0
    again = await door.ack("plain", group, handle)
    assert again.code == door.codes["ack_gone"], again
    forged = await door.ack("plain", group, FORGED)
    assert forged.code == door.codes["bad_handle"], forged
    assert store.pop.inflight_count(group) == 0


async def test_change_invisibility(door: Door) -> None:
    if not (door.settles and door.changes):
        pytest.skip(f"{door.name} does not change a message's invisible time")
    store, group = door.gw.ctx.store, "GID_settle"
    await door.join("plain", group)
    assert (await door.send("plain", [b"one"])).code == door.codes["ok"]
    [old] = await door.receive("plain", group, 30)
    changed = await door.change("plain", group, old, 1)
    assert changed.code == door.codes["ok"], changed
    assert changed.handle and changed.handle != old
    stale = await door.change("plain", group, old, 1)  # the change replaced it
    assert stale.code == door.codes["change_gone"], stale
    forged = await door.change("plain", group, FORGED, 1)
    assert forged.code == door.codes["bad_handle"], forged
    # visible again once the new invisible time (1 s) runs out: the receive waits for it
    [back] = await door.receive("plain", group, 30)
    acked = await door.ack("plain", group, back)
    assert acked.code == door.codes["ok"], acked
    assert store.pop.inflight_count(group) == 0


async def test_every_send_counts_for_back_pressure(gateway: Gateway) -> None:
    """Back-pressure (``Publisher.lagging``) counts what is appended and not yet
    acknowledged: every kind of send through the service is in ``pending`` while it
    waits for its fsync (sync durability here), and out of it once answered."""
    producer = gateway.ctx.rocketmq.producer
    publisher = gateway.ctx.publisher
    config = producer.resolve("plain", None)

    def item(body: bytes) -> tuple[Any, list[str]]:
        props = {"UNIQ_KEY": uuid.uuid4().hex}
        message = to_store_message("plain", body, encode_properties(props), props)
        return message, producer.lmqs("plain", p.ROUND_ROBIN.select(config))

    later = int(time.time() * 1000) + 60_000
    sends = {
        "batch": lambda: producer.send_batch([item(b"a"), item(b"b"), item(b"c")]),
        "delayed": lambda: producer.send_delayed(
            [(*item(b"d"), later), (*item(b"e"), later)]),
        "half": lambda: producer.send_half(*item(b"f"), "PG"),
    }
    for kind, send in sends.items():
        await settled(publisher)  # what the gateway appended at start, and the last send
        task = asyncio.ensure_future(send())
        await asyncio.sleep(0)  # the send appended and waits for the fsync
        assert publisher.pending > 0, kind
        await task
        assert publisher.pending == 0, kind


async def settled(publisher: Any) -> None:
    """Until nothing appended waits for its acknowledgement (bounded by BOUND)."""
    async with asyncio.timeout(BOUND):
        while publisher.pending:
            await asyncio.sleep(0.01)


# -- MQTT and AMQP publishes ------------------------------------------------------------


class Publishing(Endpoint):
    """An MQTT or AMQP client publishing to a topic name (``T`` or ``T/...``), which
    also reaches RocketMQ topic ``T``'s queue. These protocols have no message types,
    batches or transactions; what they can say of the send contract: a system topic's
    or a read-only topic's queues are never reached (the publish itself is an MQTT
    publish like any other), the publish ACL decides ``T`` and ``T/...``, and the
    acknowledgement comes only once the store acknowledged the append."""

    async def publish(self, topic: str, body: bytes) -> object:
        raise NotImplementedError


class MqttPublishing(Publishing):
    """paho-mqtt, MQTT 5, QoS 1: the PUBACK's reason code."""

    name = "mqtt"
    codes = {"ok": 0, "acl": 0x87}

    async def open(self) -> None:
        self.client = await asyncio.to_thread(
            Paho, port_of(self.gw, "mqtt"), "contract-publisher", v5=True, username="app",
            password="pw")
        self.acks: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def on_publish(_c: Any, _u: Any, mid: int, reason: Any, _props: Any) -> None:
            loop.call_soon_threadsafe(self.acks.put_nowait, (mid, int(reason.value)))

        self.client.client.on_publish = on_publish

    async def close(self) -> None:
        await asyncio.to_thread(self.client.close)

    async def publish(self, topic: str, body: bytes) -> object:
        info = self.client.client.publish(topic, body, qos=1)
        async with asyncio.timeout(BOUND):
            mid, reason = await self.acks.get()
        assert mid == info.mid
        return reason


class AmqpPublishing(Publishing):
    """aiormq with publisher confirms, to ``amq.topic`` with the MQTT name's routing key
    (``/`` as ``.``): ``ack``, or the code that closed the channel."""

    name = "amqp"
    codes = {"ok": "ack", "acl": 403}

    async def open(self) -> None:
        port = port_of(self.gw, "amqp")
        self.conn = await aiormq.connect(f"amqp://app:pw@127.0.0.1:{port}/")

    async def close(self) -> None:
        await self.conn.close()

    async def publish(self, topic: str, body: bytes) -> object:
        channel = await self.conn.channel()  # a refusal closes it
        try:
            confirm = await channel.basic_publish(
                body, exchange="amq.topic", routing_key=topic.replace("/", "."))
        except aiormq.exceptions.ChannelAccessRefused:
            return 403
        await channel.close()
        return "ack" if isinstance(confirm, aiormq.spec.Basic.Ack) else confirm


PUBLISHERS = [MqttPublishing, AmqpPublishing]


@pytest.fixture(params=PUBLISHERS, ids=lambda one: one.name)
async def publishing(request: Any, gateway: Gateway) -> AsyncIterator[Publishing]:
    async with opened(request.param, gateway) as one:
        yield one


#: (what is published, the topic name, the outcome due, whether RocketMQ topic ``T``'s
#: queue gets it)
PUBLISH_CASES: list[tuple[str, str, str, bool]] = [
    ("a publish to T", "plain", "ok", True),
    ("a publish below T", "plain/eu/7", "ok", True),
    ("a system topic's name", "SCHEDULE_TOPIC_XXXX", "ok", False),
    ("below a system topic's name", "SCHEDULE_TOPIC_XXXX/x", "ok", False),
    ("a read-only topic", "readonly/x", "ok", False),
    ("T the ACL denies", "secret", "acl", False),
    ("T/... the ACL denies", "secret/x", "acl", False),
]


async def test_publish_checks(publishing: Publishing) -> None:
    gw = publishing.gw
    gw.ctx.rocketmq.ensure_schedule_topic()  # registered, as once a message is delayed
    for what, name, outcome, reaches in PUBLISH_CASES:
        topic = name.partition("/")[0]
        before = stored(gw, topic)
        code = await publishing.publish(name, b"published")
        assert code == publishing.codes[outcome], (publishing.name, what, code)
        assert stored(gw, topic) == before + reaches, (publishing.name, what)


async def test_publish_ack_after_durable(publishing: Publishing) -> None:
    store = publishing.gw.ctx.store
    for _ in range(3):
        before = stored(publishing.gw, "plain")
        code = await publishing.publish("plain/eu/7", b"durable")
        assert code == publishing.codes["ok"]
        # acknowledged only once an fsync covers the append: nothing left to wait for
        assert store.acknowledged(store.log_end).done()
        assert stored(publishing.gw, "plain") == before + 1
