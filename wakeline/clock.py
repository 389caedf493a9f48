"""The one injectable source of time.

Everything that needs "now" receives a `Clock`. `SystemClock` reads the
standard library, which freezegun patches, so tests freeze and move one clock.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Protocol


class Clock(Protocol):
    """Tells the wall time (for records) and a monotonic time (for durations)."""

    def now(self) -> datetime:
        """The current UTC time, timezone-aware."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """The current UTC time, timezone-aware."""
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        return time.monotonic()


def to_ms(moment: datetime) -> int:
    """Milliseconds since the epoch: how the store keeps every instant."""
    return int(moment.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """The inverse of `to_ms`, as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def iso(ms: int) -> str:
    """An instant in the API's ISO-8601 form, millisecond precision, `Z` suffix."""
    # time.gmtime, not a datetime: the same text at a third of the cost (the journal
    # stamps every entry with it).
    return time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(ms // 1000)) + f"{ms % 1000:03d}Z"
