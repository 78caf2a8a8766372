"""What the front ends and services show the admin API, without the admin API (or its
HTTP door) importing them: the front ends stay independent of each other and of HTTP.

A front end registers named providers on ``ctx.views`` when it starts
(``ctx.views.provide("mqtt.sessions", self.admin_sessions)``); the admin API asks
(:meth:`AdminViews.ask`). A provider takes keyword arguments and returns a JSON-able
value (or an awaitable of one); it raises :class:`LookupError` for an unknown object
(404) and :class:`ValueError` for bad input (400). A view nobody provides (a gateway
built without the front end) is :class:`Unavailable` (404 there too).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["AdminViews", "Unavailable"]


class Unavailable(LookupError):
    """No provider for the view (its front end or service is not running)."""


class AdminViews:
    def __init__(self) -> None:
        self._providers: dict[str, Callable[..., Any]] = {}

    def provide(self, name: str, provider: Callable[..., Any]) -> None:
        self._providers[name] = provider

    def withdraw(self, name: str) -> None:
        self._providers.pop(name, None)

    def has(self, name: str) -> bool:
        return name in self._providers

    async def ask(self, view: str, **kwargs: Any) -> Any:
        provider = self._providers.get(view)
        if provider is None:
            raise Unavailable(f"{view.split('.')[0]} is not running on this gateway")
        result = provider(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result
