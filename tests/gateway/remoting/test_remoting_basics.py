"""The remoting front end over real sockets: routes, heartbeats and consumer lists,
offsets, locks, unknown codes and bad frames."""

from __future__ import annotations

import json
from pathlib import Path

from protocol.remoting import RequestCode, ResponseCode

from .remoting_support import Client, port_of, running_gateway


async def test_unknown_code_gets_request_code_not_supported(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as gw:
        client = await Client.connect(port_of(gw))
        response = await client.call(9999)
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "9999" in (response.remark or "")
        # the connection is still usable
        route = await client.ok(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
        assert json.loads(route.body)["queueDatas"][0]["writeQueueNums"] == 8
        await client.close()
