"""`GET /healthz`, served on both ports."""

from __future__ import annotations

import falcon


class Health:
    """Liveness: answers while the process serves requests."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Always `{"ok": true}`."""
        resp.media = {"ok": True}
