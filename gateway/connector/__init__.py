"""The message connector (RIP-12, docs/connector.md): replication between clusters by
rules, exactly once between gateways.

The contract its parts share is :mod:`gateway.connector.endpoints`: a rule reads a
:class:`~gateway.connector.endpoints.Source` and writes a
:class:`~gateway.connector.endpoints.Target`; the endpoint kinds (gateway / RocketMQ over
remoting, MQTT broker, AMQP broker) implement those, the runner knows only them.
"""
