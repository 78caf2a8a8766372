"""Harness of the Aliyun MQ HTTP API tests: an in-process gateway on its own loop
thread (:class:`ThreadGateway`) whose HTTP front end (the h11 server, on the dedicated
``http_port``) serves the API, as ``lmq serve`` does."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gateway.config import AUTO

from ..amqp_support import ThreadGateway


class AliyunGateway:
    """A ThreadGateway with the Aliyun API served on :attr:`endpoint`."""

    def __init__(self, data_dir: Path, **options: Any) -> None:
        self.gw = ThreadGateway(data_dir, **{"http_port": AUTO, **options})
        #: Called before the gateway stops (tests close their clients here).
        self.on_stop: list[Callable[[], object]] = []

    def start(self) -> AliyunGateway:
        self.gw.start()
        return self

    @property
    def endpoint(self) -> str:
        assert self.gw.gateway is not None
        listener = self.gw.gateway.listener("http")
        assert listener is not None
        return f"http://127.0.0.1:{listener.port}"

    def stop(self) -> None:
        for close in self.on_stop:
            with contextlib.suppress(Exception):
                close()
        self.gw.stop()


@contextlib.contextmanager
def aliyun_gateway(data_dir: Path, **options: Any) -> Iterator[AliyunGateway]:
    gateway = AliyunGateway(data_dir, **options).start()
    try:
        yield gateway
    finally:
        gateway.stop()
