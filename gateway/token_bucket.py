"""A token bucket: ``rate`` tokens a second, at most ``rate`` in the bucket.

Pure (the caller passes the clock), used for ``max_publish_rate``: an MQTT publisher
ahead of its budget is paused, not disconnected, for as long as :meth:`TokenBucket.take`
says; an HTTP connection's publish beyond it is refused with 429 and the
:meth:`TokenBucket.try_take` wait as ``Retry-After``. (Shared by both front ends, so it
lives here rather than in ``gateway/mqtt/``.)
"""

from __future__ import annotations


class TokenBucket:
    __slots__ = ("rate", "tokens", "at")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = float(rate)
        self.at = now

    def take(self, now: float) -> float:
        """Take one token at ``now``. Returns 0.0 if the budget allowed it, else the
        seconds until the bucket is back at zero (the pause that repays the debt)."""
        rate = self.rate
        self.tokens = min(float(rate), self.tokens + (now - self.at) * rate)
        self.at = now
        self.tokens -= 1
        return -self.tokens / rate if self.tokens < 0 else 0.0

    def try_take(self, now: float, count: int = 1) -> float:
        """Take ``count`` tokens at ``now`` if the bucket holds them: 0.0. Otherwise take
        nothing and return the seconds until it would hold them (never more than
        ``count / rate``; a count above ``rate`` can never fit: that wait is returned
        and nothing is taken)."""
        rate = self.rate
        self.tokens = min(float(rate), self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens >= count:
            self.tokens -= count
            return 0.0
        return (count - self.tokens) / rate


__all__ = ["TokenBucket"]
