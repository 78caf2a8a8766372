"""Heartbeat messages (docs/connector.md "How it copies"): the runner appends one to the
source now and then; it is copied like any message, and its delay, source append to
target store, is the rule's ``delay_ms``.

A heartbeat has an empty body, the property :data:`HEARTBEAT` = ``<rule>:<birth ms>``
and the tag :data:`HEARTBEAT_TAG`, so that a source that filters by tag (the gateway
endpoint pushes a rule's tag expression into PULL) lets it through, and consumers that
subscribe by tag never see it; others skip messages with the property.
"""

HEARTBEAT = "__LMQ_HEARTBEAT"
HEARTBEAT_TAG = "__LMQ_HEARTBEAT"
