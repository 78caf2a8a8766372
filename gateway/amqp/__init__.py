"""The AMQP 0-9-1 front end: RabbitMQ's broker model on LMQs.

- :mod:`.frontend`: :class:`AmqpFrontEnd`, the shared state and background work;
- :mod:`.handler`: one connection (the sans-IO machine's events to the broker);
- :mod:`.channel`: one channel (consumers, acks, prefetch, confirms, transactions);
- :mod:`.broker`: vhosts, exchanges, queues, bindings, routing, persistence;
- :mod:`.queues`: a queue at run time (its LMQ, its consumers, pop delivery, limits);
- :mod:`.model`: exchange and queue data, queue arguments;
- :mod:`.messages`: AMQP message <-> stored record, MQTT interop, dead-letter copies.

See docs/amqp.md for the mapping and what is (not) implemented.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.amqp.frontend import AmqpFrontEnd
    from gateway.context import GatewayContext


def create_frontend(ctx: GatewayContext) -> AmqpFrontEnd:
    from gateway.amqp.frontend import AmqpFrontEnd
    from protocol.amqp import relax_pamqp_name_validation

    # pamqp's name checks are stricter than RabbitMQ's; the server relaxes them once.
    relax_pamqp_name_validation()
    return AmqpFrontEnd(ctx)
