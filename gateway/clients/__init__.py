"""Clients of other brokers' protocols, for the ``lmq`` tools, the benchmarks and the
connectors: ``gateway.clients.remoting`` (RocketMQ remoting: producer, pull consumer),
``gateway.clients.push`` (push and orderly consumers) and ``gateway.clients.pop``.

    async with RemotingClient("127.0.0.1:8080") as client:
        producer = Producer(client, "my-producers")
        result = await producer.send("orders", b"hello", tags="eu", keys=["42"])
"""

from .origins import OriginClient
from .pop import PopConsumer, PoppedMessage
from .push import PushConsumer
from .remoting import (
    ConnectionLost,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullResult,
    ReceivedMessage,
    RemotingClient,
    RemotingConnection,
    RemotingError,
    RequestTimeout,
    SendResult,
    TopicRoute,
)
from .transactions import TransactionProducer

__all__ = [
    "ConnectionLost",
    "Message",
    "MessageQueue",
    "OriginClient",
    "PopConsumer",
    "PoppedMessage",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PushConsumer",
    "ReceivedMessage",
    "RemotingClient",
    "RemotingConnection",
    "RemotingError",
    "RequestTimeout",
    "SendResult",
    "TopicRoute",
    "TransactionProducer",
]
