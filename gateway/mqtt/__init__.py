"""The MQTT 3.1 / 3.1.1 / 5.0 front end on LMQs. See :mod:`gateway.mqtt.frontend`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.mqtt.frontend import MqttFrontEnd


def create_frontend(ctx: GatewayContext) -> MqttFrontEnd:
    from gateway.mqtt.frontend import MqttFrontEnd

    return MqttFrontEnd(ctx)
