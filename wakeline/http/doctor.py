"""Operator API: `GET /v1/doctor`, checks that never call Linear and never show a secret."""

from __future__ import annotations

from typing import Any, Callable

import falcon

from wakeline.http.auth import lanes
from wakeline.service.parts import Check
from wakeline.turns.tokens import Lane


class Doctor:
    """`GET /v1/doctor`: `{"ok", "checks": [{"name", "ok", "detail", "fix"?}], "linear": {...}}`.

    `checks` gives the service's own items and then every part's; `linear` the Linear
    part's summary (None without Linear's part).
    """

    def __init__(self, checks: Callable[[], list[Check]],
                 linear: Callable[[], dict[str, Any] | None]) -> None:
        self._checks = checks
        self._linear = linear

    @falcon.before(lanes(Lane.OPERATOR))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Run every check; `ok` is true when all pass."""
        checks = [c.to_json() for c in self._checks()]
        resp.media = {"ok": all(c["ok"] for c in checks), "checks": checks,
                      "linear": self._linear()}


def add_routes(app: falcon.App, checks: Callable[[], list[Check]],
               linear: Callable[[], dict[str, Any] | None]) -> None:
    """Mount `GET /v1/doctor`."""
    app.add_route("/v1/doctor", Doctor(checks, linear))
