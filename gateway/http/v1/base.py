"""The JSON API's shared part (:class:`ApiBase`): the gateway context, authentication
(:mod:`gateway.http.auth`: Basic with scrypt off the event loop, or an Aliyun MQ
signature), the ACL checks, the per-connection publish rate and the consumer group."""

from __future__ import annotations

import asyncio
import base64
import logging
import math
from typing import TYPE_CHECKING, Any

from gateway.auth.authenticator import Principal, Refusal, RefusalReason
from gateway.http.auth import HttpLogin, HttpLogins, peer_host
from gateway.http.counts import MessageCounts
from gateway.http.messages import Request
from gateway.http.mq_signature import SignatureRefused, is_signed
from gateway.http.v1.documents import (
    CHALLENGE,
    ApiError,
)
from gateway.token_bucket import TokenBucket
from lmq.rocketmq import InvalidName

if TYPE_CHECKING:
    from gateway.context import GatewayContext

log = logging.getLogger("gateway.http.v1")


class ApiBase:
    """What every part of the API shares: the context, the caller and its checks."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        cfg = ctx.config
        self.window_ms = int(cfg.http_idempotency_window * 1000)
        #: Idempotent publishes in flight: (topic, message id) -> their answer.
        self._inflight: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        #: MQTT topic filters this node added to the topic space for HTTP groups.
        self._mqtt_filters: set[str] = set()
        self._logins = HttpLogins(ctx.security)
        #: Messages the JSON API stored and gave, per connection and in total (the
        #: overview's HTTP rates).
        self.counts = MessageCounts(ctx.metrics, "lmq_http_messages", "the JSON API")

    @property
    def login(self) -> HttpLogin | None:
        """The HTTP logins (None in open mode; on once a users file appears)."""
        return self._logins.current()

    # -- auth ---------------------------------------------------------------------

    def principal(self, request: Request) -> Principal | None:
        """The caller, authenticated before the handler ran (:meth:`authenticate`, by
        the route guard); None in open mode."""
        if self.login is None:
            return None
        cached = request.context.get("principal")
        if isinstance(cached, Principal):
            return cached
        raise ApiError(401, "authentication required", headers=CHALLENGE)

    async def authenticate(self, request: Request) -> Principal | None:
        """The caller, from HTTP Basic credentials (scrypt in a thread, a verified login
        reused a short while: :mod:`gateway.http.auth`) or an Aliyun MQ signature
        (``Authorization: MQ ak:sig``); None in open mode. Raises 401 (429 when rate
        limited)."""
        login = self.login
        if login is None:
            return None
        if is_signed(request):
            try:
                signed = login.signed(request)
            except SignatureRefused as exc:
                if exc.retry_after is not None:
                    wait = max(1, math.ceil(exc.retry_after))
                    raise ApiError(429, exc.message,
                                   headers=[("Retry-After", str(wait))]) from None
                raise ApiError(400 if exc.bad_request else 401, exc.message,
                               headers=[] if exc.bad_request else CHALLENGE) from None
            assert not isinstance(signed, Refusal)
            request.context["principal"] = signed
            return signed
        username = password = None
        header = request.header("authorization")
        if header and header[:6].lower() == "basic ":
            try:
                username, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise ApiError(401, "malformed Basic credentials", headers=CHALLENGE) from None
        result = await login.password(username, password, client_id="http",
                                      peer=peer_host(request))
        if isinstance(result, Refusal):
            if result.reason is RefusalReason.RATE_LIMITED:
                wait = max(1, math.ceil(result.retry_after))
                raise ApiError(429, "too many failed logins from this address or for this"
                                    f" user; retry in {wait} s",
                               headers=[("Retry-After", str(wait))])
            raise ApiError(401, "authentication failed: Basic credentials of a gateway user"
                                " are required", headers=CHALLENGE)
        request.context["principal"] = result
        return result

    def check_publish(self, request: Request, topic: str) -> None:
        principal = self.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_publish(
                principal, "http", topic):
            raise ApiError(403, f"not allowed to publish to {topic!r}")

    def check_consume(self, request: Request, topic: str) -> None:
        principal = self.principal(request)
        auth = self.ctx.authenticator
        if auth is not None and principal is not None and not auth.can_subscribe(
                principal, "http", topic):
            raise ApiError(403, f"not allowed to consume from {topic!r}")

    def check_rate(self, request: Request, count: int = 1) -> None:
        """``max_publish_rate`` per connection, as MQTT has it: a publish beyond the
        budget is refused with 429 and the wait as ``Retry-After`` (a batch costs one
        token a message, at most a full bucket)."""
        bucket = request.context.get("publish_bucket")
        if not isinstance(bucket, TokenBucket):
            return
        wait = bucket.try_take(self.ctx.loop.time(), min(count, int(bucket.rate)))
        if wait:
            seconds = max(1, math.ceil(wait))
            raise ApiError(429, f"more than {bucket.rate:g} messages a second on this"
                                f" connection (max_publish_rate); retry in {seconds} s",
                           headers=[("Retry-After", str(seconds))])

    def _group(self, name: str) -> None:
        try:
            config = self.ctx.rocketmq_groups.ensure(name)
        except InvalidName as exc:
            raise ApiError(400, f"invalid group name: {exc}") from None
        if config is None:
            raise ApiError(404, f"group {name!r} does not exist")
