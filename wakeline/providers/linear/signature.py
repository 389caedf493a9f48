"""Linear webhook signatures: lower-case hex HMAC-SHA256 of the raw body."""

from __future__ import annotations

import hashlib
import hmac


def sign(secret: str, body: bytes) -> str:
    """The `Linear-Signature` value Linear would send for `body`."""
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signature_valid(secret: str, body: bytes, header: str | None) -> bool:
    """Constant-time check of a `Linear-Signature` header against the raw body.

    Only the exact lower-case hex form is accepted, as Linear sends it.
    """
    if not header or not secret:
        return False
    expected = sign(secret, body).encode("ascii")
    # WSGI headers are latin-1 strings; that encoding never fails.
    return hmac.compare_digest(expected, header.encode("latin-1"))
