"""The protocol tests compare our encoders with pamqp's on every name RabbitMQ
accepts, so pamqp runs relaxed here, as in the gateway (which makes the same call at
start); ``test_importing_protocol_amqp_leaves_pamqp_alone`` checks that importing does
not do it."""

from __future__ import annotations

import pytest

from protocol.amqp import relax_pamqp_name_validation


@pytest.fixture(autouse=True, scope="session")
def _relaxed_pamqp() -> None:
    relax_pamqp_name_validation()
