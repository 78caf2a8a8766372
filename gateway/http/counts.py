"""Messages an HTTP API stored and gave (issue 31), counted twice where they happen: on
the request's connection (the admin API's connections list shows messages in and out
per connection, as for the other protocols) and in the API's counters, which the
overview's rates per protocol read (:data:`gateway.history.MESSAGE_COUNTERS`). The
counters are copied in from plain ints at each sample, as the other front ends do
(:mod:`gateway.metrics`: a plain attribute is the cheapest count on a hot path)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.http.messages import Request
    from gateway.metrics import Registry

__all__ = ["MessageCounts"]


class MessageCounts:
    """``{prefix}_received_total`` (messages stored by ``what``) and, when it gives
    messages, ``{prefix}_sent_total`` (messages given)."""

    def __init__(self, metrics: Registry, prefix: str, what: str, *, gives: bool = True) -> None:
        self.received = 0
        self.sent = 0
        received = metrics.counter(f"{prefix}_received_total", f"Messages stored by {what}")
        sent = (
            metrics.counter(f"{prefix}_sent_total", f"Messages given by {what}") if gives else None
        )
        copied = [0, 0]

        def copy() -> None:
            received.inc(self.received - copied[0])
            if sent is not None:
                sent.inc(self.sent - copied[1])
            copied[:] = [self.received, self.sent]

        metrics.on_sample(copy)

    def stored(self, request: Request, count: int = 1) -> None:
        """``count`` messages of ``request`` were stored."""
        self.received += count
        if request.connection is not None:
            request.connection.messages_in += count

    def given(self, request: Request, count: int = 1) -> None:
        """``count`` messages were given in the answer to ``request``."""
        self.sent += count
        if request.connection is not None:
            request.connection.messages_out += count
