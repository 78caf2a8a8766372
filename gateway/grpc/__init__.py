"""The RocketMQ 5 gRPC front end (``apache.rocketmq.v2.MessagingService``).

- :mod:`.frontend`: :class:`GrpcFrontEnd`: builds the services, owns the RPC table,
  the connections and the metrics;
- :mod:`.services`: :class:`~.services.GrpcServices`, all RPC code is given
  (``call.services``: the RocketMQ services, the client registry of :mod:`.registry`,
  receive slots and state, the events that end long polls, counters); RPC code never
  imports the front end;
- :mod:`.server`: the door: one handler per HTTP/2 connection (the dedicated gRPC ports
  and the unified ports) over the sans-IO :mod:`protocol.grpc.server`, one task per
  call;
- :mod:`.service`: the servicer: one method per RPC, each building a :class:`.call.Call`
  and delegating to the module that serves it;
- :mod:`.call`: the per-call context (the services, metadata, client id, principal,
  deadline, ACL checks);
- RPC families: :mod:`.route` (QueryRoute, QueryAssignment), :mod:`.clients`
  (Heartbeat, NotifyClientTermination, Telemetry), :mod:`.send`, :mod:`.receive`,
  :mod:`.ack`, :mod:`.offsets`, :mod:`.transactions`.

The generated protocol classes come from PyPI ``rocketmq-python-client``. See
docs/rocketmq.md, "gRPC".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.context import GatewayContext
    from gateway.grpc.frontend import GrpcFrontEnd


def create_frontend(ctx: GatewayContext) -> GrpcFrontEnd:
    from gateway.grpc.frontend import GrpcFrontEnd

    return GrpcFrontEnd(ctx)
