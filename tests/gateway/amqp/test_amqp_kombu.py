"""kombu (py-amqp transport), the client under Celery, against a gateway process."""

from __future__ import annotations

import kombu

from ..gateway_process import GatewayProcess


def test_kombu_publish_consume_and_reject(gateway: GatewayProcess):
    url = f"amqp://guest:guest@127.0.0.1:{gateway.ports['amqp']}//"
    exchange = kombu.Exchange("tasks", type="direct", durable=True)
    queue = kombu.Queue("celery-like", exchange, routing_key="work", durable=True)
    with kombu.Connection(url, connect_timeout=5) as conn:
        producer = conn.Producer(serializer="json")
        for i in range(5):
            producer.publish({"n": i}, exchange=exchange, routing_key="work",
                             declare=[queue], retry=False)
        got: list[int] = []
        rejected: list[int] = []

        def on_message(body, message):  # type: ignore[no-untyped-def]
            if body["n"] == 2 and not message.delivery_info["redelivered"]:
                rejected.append(body["n"])
                message.requeue()  # basic.reject requeue=True: comes back redelivered
                return
            got.append(body["n"])
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message], prefetch_count=10):
            while len(got) < 5:
                conn.drain_events(timeout=5)
        assert sorted(got) == [0, 1, 2, 3, 4] and rejected == [2]
        # the queue is empty now
        assert queue(conn.default_channel).get() is None
