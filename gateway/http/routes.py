"""Routing of HTTP requests to handlers by method and path pattern.

Patterns are literal segments and ``{name}`` segments (one path segment each, matched
after splitting the raw path on ``/`` and percent-decoding each segment, so an MQTT
topic ``a/b`` is one segment when sent as ``a%2Fb``); a final ``{name...}`` takes the
rest of the path, slashes included. Routes are tried in the order added. No match for
the path: 404; a match for the path but not the method: 405 with ``Allow``. Up to
:data:`MATCH_CACHE` answers for paths of up to 256 characters are kept by method and
path (a client publishes to the same few paths again and again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote

from gateway.http.messages import Request, Response

__all__ = ["Handler", "MATCH_CACHE", "Match", "Router"]

#: (method, path) -> its Match, this many at most (then the cache starts anew).
MATCH_CACHE = 1024

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Match:
    handler: Handler | None
    params: dict[str, str]
    #: Methods the path allows (for 405's ``Allow``) when ``handler`` is None.
    allowed: tuple[str, ...] = ()
    #: The pattern that matched (``/topics/{topic}/messages``): a metric label of
    #: bounded cardinality.
    pattern: str = ""


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    parts: tuple[str, ...]
    handler: Handler
    pattern: str = ""


class Router:
    def __init__(self) -> None:
        self._routes: list[_Route] = []
        #: The routes that may match a path, by its first segment (in the order added:
        #: those with that literal first segment and those starting with a parameter).
        self._by_first: dict[str, list[_Route]] = {}
        self._param_first: list[_Route] = []
        self._cache: dict[tuple[str, str], Match | None] = {}
        #: Asked before any handler: a response to give instead (a slave of a broker
        #: group sends requests to its master), or None to route the request.
        self.before: Callable[[Request], Response | None] | None = None

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        if not pattern.startswith("/"):
            raise ValueError(f"a route pattern starts with '/': {pattern!r}")
        parts = tuple(pattern.split("/")[1:])
        for i, part in enumerate(parts):
            if part.endswith("...}") and i != len(parts) - 1:
                raise ValueError(f"'{part}' must be the last segment of {pattern!r}")
        self._routes.append(_Route(method.upper(), parts, handler, pattern))
        self._cache = {}
        self._by_first = {}
        self._param_first = [r for r in self._routes if r.parts[0].startswith("{")]
        for route in self._routes:
            first = route.parts[0]
            if not first.startswith("{") and first not in self._by_first:
                self._by_first[first] = [
                    r for r in self._routes if r.parts[0] == first or r.parts[0].startswith("{")]

    def match(self, method: str, path: str) -> Match | None:
        """The handler for ``method`` on the raw (percent-encoded) ``path``; a Match
        with no handler when only other methods fit; None when nothing fits. (The
        Match may be shared with other calls: its ``params`` are not to be changed.)"""
        key = (method, path)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found = self._match(method, path)
        if len(path) > 256:
            return found  # (the cache's memory stays small)
        if len(self._cache) >= MATCH_CACHE:
            self._cache = {}
        self._cache[key] = found
        return found

    def _match(self, method: str, path: str) -> Match | None:
        segments = path.split("/")[1:]
        allowed: list[str] = []
        pattern = ""
        method = method.upper()
        first = segments[0] if segments else ""
        for route in self._by_first.get(first, self._param_first):
            params = _bind(route.parts, segments)
            if params is None:
                continue
            if route.method == method or (method == "HEAD" and route.method == "GET"):
                return Match(route.handler, params, pattern=route.pattern)
            allowed.append(route.method)
            pattern = pattern or route.pattern
        if allowed:
            return Match(None, {}, tuple(dict.fromkeys(allowed)), pattern)
        return None


def _bind(parts: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    params: dict[str, str] = {}
    for i, part in enumerate(parts):
        if part.startswith("{") and part.endswith("...}"):
            rest = segments[i:]
            if not rest or rest == [""]:
                return None
            params[part[1:-4]] = unquote("/".join(rest))
            return params
        if i >= len(segments):
            return None
        segment = segments[i]
        if part.startswith("{") and part.endswith("}"):
            if not segment:
                return None
            params[part[1:-1]] = unquote(segment)
        elif part != segment:
            return None
    return params if len(segments) == len(parts) else None
