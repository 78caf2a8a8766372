"""The HTTP router: literal and parameter segments, percent-decoding per segment, the
rest-of-path parameter, 405's allowed methods, HEAD served by GET."""

from __future__ import annotations

import pytest

from gateway.http.messages import Request, Response
from gateway.http.routes import MATCH_CACHE, Match, Router


async def ok(_request: Request) -> Response:
    return Response()


async def other(_request: Request) -> Response:
    return Response(201)


def test_parameters_are_decoded_per_segment():
    r = Router()
    r.add("POST", "/topics/{topic}/messages", ok)
    m = r.match("POST", "/topics/a%2Fb%20c/messages")
    assert m is not None and m.handler is ok and m.params == {"topic": "a/b c"}
    assert r.match("POST", "/topics/a/b/messages") is None  # a raw slash is a new segment
    assert r.match("POST", "/topics//messages") is None  # an empty parameter never matches


def test_rest_of_path_and_methods():
    r = Router()
    r.add("GET", "/v1/mqtt/{topic...}", ok)
    r.add("POST", "/v1/mqtt/{topic...}", other)
    m = r.match("POST", "/v1/mqtt/a/b%2Bc/d")
    assert m is not None and m.handler is other and m.params == {"topic": "a/b+c/d"}
    assert r.match("HEAD", "/v1/mqtt/x").handler is ok  # type: ignore[union-attr]
    m = r.match("DELETE", "/v1/mqtt/x")
    assert m is not None and m.handler is None and m.allowed == ("GET", "POST")
    assert r.match("GET", "/v1/mqtt") is None and r.match("GET", "/v1/mqtt/") is None


def test_bad_patterns_are_refused():
    r = Router()
    with pytest.raises(ValueError):
        r.add("GET", "v1", ok)
    with pytest.raises(ValueError):
        r.add("GET", "/{a...}/b", ok)


def test_remembered_matches_follow_new_routes_and_stay_bounded():
    r = Router()
    r.add("POST", "/topics/{topic}/messages", ok)
    first = r.match("POST", "/topics/t/messages")
    assert first is not None and r.match("POST", "/topics/t/messages") == first
    assert r.match("GET", "/topics/t/messages") == Match(None, {}, ("POST",),
                                                          "/topics/{topic}/messages")
    r.add("GET", "/topics/{topic}/messages", other)  # a route added later is found
    again = r.match("GET", "/topics/t/messages")
    assert again is not None and again.handler is other and again.params == {"topic": "t"}
    for i in range(MATCH_CACHE + 10):  # more paths than are remembered: answers stay right
        m = r.match("POST", f"/topics/t{i}/messages")
        assert m is not None and m.params == {"topic": f"t{i}"}
    long = "x" * 300  # (not remembered, still answered)
    assert r.match("POST", f"/topics/{long}/messages").params == {"topic": long}  # type: ignore[union-attr]
    assert r.match("POST", "/nowhere") is None and r.match("POST", "/nowhere") is None
