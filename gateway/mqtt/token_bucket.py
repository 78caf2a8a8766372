"""A token bucket: ``rate`` tokens a second, at most ``rate`` in the bucket.

Pure (the caller passes the clock), used for ``max_publish_rate``: a publisher ahead of
its budget is paused, not disconnected, for as long as :meth:`TokenBucket.take` says.
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


__all__ = ["TokenBucket"]
