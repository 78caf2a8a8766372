"""The RocketMQ remoting front end (RIP-55): RocketMQ's producers and consumers on LMQs.

- :mod:`.frontend`: :class:`RemotingFrontEnd`: builds the services, owns the request
  table, the connections and the metrics;
- :mod:`.handler`: one connection (frames in, requests dispatched, replies out);
- :mod:`.dispatch`: the request-code table and how a handler module plugs in;
- :mod:`.services`: :class:`~.services.RemotingServices`, all request code is given
  (``ctx.services``: the RocketMQ services, consumer manager, queue locks, long-polling
  pulls' waiters, security checks, counters); request code never imports the front end;
- :mod:`.replies`: building responses;
- :mod:`.consumers`: clients and consumer groups from heartbeats;
- :mod:`.locks`: ordered consumers' queue locks;
- request families: :mod:`.send`, :mod:`.pull`, :mod:`.offsets`, :mod:`.clients`,
  :mod:`.route`, :mod:`.query` (and the pop family's modules).

See docs/rocketmq.md for the request codes served and the differences from RocketMQ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.remoting.frontend import RemotingFrontEnd


def create_frontend(ctx: GatewayContext) -> RemotingFrontEnd:
    from gateway.remoting.frontend import RemotingFrontEnd

    return RemotingFrontEnd(ctx)
