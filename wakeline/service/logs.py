"""Logging set-up for `wakeline serve`, with a last-line-of-defence redactor."""

from __future__ import annotations

import logging
import sys
import time

from wakeline.secrets import scrub

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class RedactingFormatter(logging.Formatter):
    """Appends structured `extra=` fields, then scrubs every known secret."""

    def __init__(self, secret_values: list[str]) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self._secrets = secret_values

    def format(self, record: logging.LogRecord) -> str:
        """Format, append extras as key=value, redact."""
        text = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        if extras:
            text += " " + " ".join(f"{k}={v!r}" for k, v in sorted(extras.items()))
        return scrub(text, self._secrets)


class EveryFewSeconds(logging.Filter):
    """Lets one record through per `seconds`; under load waitress warns on every queued request."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._seconds = seconds
        self._next = 0.0
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """True for the first record of each period; it carries how many were dropped before."""
        now = time.monotonic()
        if now < self._next:
            self._dropped += 1
            return False
        self._next = now + self._seconds
        if self._dropped:
            record.msg = f"{record.msg} ({self._dropped} similar messages suppressed)"
            self._dropped = 0
        return True


def setup_logging(level: str, secret_values: list[str]) -> None:
    """Route every logger to stderr through the redactor."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(secret_values))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("waitress").setLevel(logging.WARNING)
    # A full request queue matters, but one line every ten seconds says so.
    queue = logging.getLogger("waitress.queue")
    queue.filters[:] = [EveryFewSeconds(10.0)]
