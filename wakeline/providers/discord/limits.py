"""Discord's rate limits as its answers describe them: per-route buckets and the global limit.

Every answer names its bucket (`X-RateLimit-Bucket`) and says how many requests it
has left and when it resets; routes that share a bucket share the limit, and each
major parameter (the channel id) has a bucket of its own. A bucket with nothing left
is waited out before the next request instead of being hit, and a 429 blocks its
bucket (or everything, when global) for its `retry_after`, so a busy thread never
turns into a storm of refused requests. Thread-safe: every worker shares one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass(frozen=True)
class Route:
    """One REST route: method, path template and its major parameter (a channel id)."""

    method: str
    template: str
    major: str = ""


class RateLimits:
    """What Discord said about each bucket; asks how long a route must wait.

    Args:
        monotonic: the clock, in seconds (a parameter, so tests move it).
    """

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._now = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], str] = {}  # (method, template) -> Discord's bucket
        self._blocked: dict[tuple[str, str], float] = {}  # (bucket, major) -> blocked until
        self._global_until = 0.0

    def _key(self, route: Route) -> tuple[str, str]:
        # Until Discord names the route's bucket, the route is its own bucket.
        bucket = self._buckets.get((route.method, route.template),
                                   f"{route.method} {route.template}")
        return bucket, route.major

    def wait_for(self, route: Route) -> float:
        """Seconds to wait before a request on `route` may go (0.0: now)."""
        with self._lock:
            now = self._now()
            until = max(self._global_until, self._blocked.get(self._key(route), 0.0))
            return max(0.0, until - now)

    def learn(self, route: Route, headers: Mapping[str, str]) -> None:
        """Read an answer's bucket headers: a bucket with nothing left is blocked until its
        reset; one with room again is free."""
        bucket = headers.get("X-RateLimit-Bucket")
        remaining = headers.get("X-RateLimit-Remaining")
        reset_after = _seconds(headers.get("X-RateLimit-Reset-After"))
        with self._lock:
            if bucket:
                self._buckets[(route.method, route.template)] = bucket
            key = self._key(route)
            if remaining is not None and remaining.strip() == "0" and reset_after is not None:
                self._blocked[key] = max(self._blocked.get(key, 0.0), self._now() + reset_after)
            elif remaining is not None:
                self._blocked.pop(key, None)

    def limited(self, route: Route, retry_after: float, is_global: bool) -> None:
        """A 429: block the route's bucket (or, when global, every route) for `retry_after`."""
        with self._lock:
            until = self._now() + max(retry_after, 0.0)
            if is_global:
                self._global_until = max(self._global_until, until)
            else:
                key = self._key(route)
                self._blocked[key] = max(self._blocked.get(key, 0.0), until)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def retry_after_of(body: object, headers: Mapping[str, str]) -> tuple[float, bool]:
    """A 429's wait in seconds and whether it is global: the JSON body's `retry_after` and
    `global`, else the `Retry-After` header (and `X-RateLimit-Global`); 1 s when neither says."""
    if isinstance(body, dict) and isinstance(body.get("retry_after"), (int, float)):
        return float(body["retry_after"]), bool(body.get("global"))
    header = _seconds(headers.get("Retry-After"))
    return (header if header is not None else 1.0,
            headers.get("X-RateLimit-Global", "").lower() == "true")
