"""Logging set-up for `wakeline serve`, with a last-line-of-defence redactor."""

from __future__ import annotations

import logging
import sys

from wakeline.secrets import redact

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
        return redact(text, self._secrets)


def setup_logging(level: str, secret_values: list[str]) -> None:
    """Route every logger to stderr through the redactor."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(secret_values))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # waitress logs every queue warning at WARNING; keep them, they matter under load.
    logging.getLogger("waitress").setLevel(logging.WARNING)
