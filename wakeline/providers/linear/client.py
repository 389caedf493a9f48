"""The wire to Linear's GraphQL API: one attempt per call, a request budget, honest errors.

`LinearClient.execute` never retries, but for a request Linear refused as
unauthenticated (which it did not run): that one goes once more with a renewed
token (`credentials.py`). A definite refusal (GraphQL errors, a
4xx, RATELIMITED, which Linear may send with HTTP 400) raises
`ProviderRejected` with Linear's message, secrets redacted; a network error or
a 5xx raises `PossiblyDispatched`, because the request may have reached Linear.
The budget refuses before anything is sent.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import requests

from wakeline.clock import Clock
from wakeline.service.net import http_session
from wakeline.errors import (
    BudgetExhausted,
    LinearAuthUnavailable,
    PossiblyDispatched,
    ProviderRejected,
)
from wakeline.providers.linear.credentials import Credential
from wakeline.secrets import redact

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
MESSAGE_MAX_CHARS = 1_000
# Progress (optional requests) is shed once this share of the hourly budget is used.
SHED_AT = 0.8
# Linear said RATELIMITED without a reset time: wait this long before the next request.
RATELIMITED_BLOCK_SECONDS = 60.0


@dataclass
class RequestBudget:
    """A sliding hourly cap plus whatever Linear's rate-limit headers last said."""

    per_hour: int
    clock: Clock

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: deque[float] = deque()
        self._blocked_until = 0.0

    def take(self, optional: bool = False) -> None:
        """Count one request, or raise `BudgetExhausted` without sending it. An `optional`
        request (progress) is refused already past `SHED_AT` of the budget."""
        now = self.clock.now().timestamp()
        with self._lock:
            if now < self._blocked_until:
                raise BudgetExhausted("Linear's rate limit is exhausted",
                                      retryAfterSeconds=round(self._blocked_until - now, 1))
            while self._sent and self._sent[0] <= now - 3600:
                self._sent.popleft()
            cap = self.per_hour * SHED_AT if optional else self.per_hour
            if len(self._sent) >= cap:
                raise BudgetExhausted("the hourly request budget is spent" if not optional else
                                      "progress is shed: the hourly budget is nearly spent",
                                      retryAfterSeconds=round(self._sent[0] + 3600 - now, 1))
            self._sent.append(now)

    def available(self) -> bool:
        """Whether a (non-optional) request would be taken now."""
        now = self.clock.now().timestamp()
        with self._lock:
            recent = sum(1 for t in self._sent if t > now - 3600)
            return now >= self._blocked_until and recent < self.per_hour

    def observe(self, headers: Any, rate_limited: bool = False) -> None:
        """Block until Linear's reset when its headers say nothing is left, or for a minute
        when it answered RATELIMITED without saying until when."""
        now = self.clock.now().timestamp()
        until = now + RATELIMITED_BLOCK_SECONDS if rate_limited else 0.0
        retry_after = headers.get("Retry-After")
        if retry_after:
            try:
                until = now + float(retry_after)
            except ValueError:
                pass
        for kind in ("Requests", "Complexity"):
            remaining = headers.get(f"X-RateLimit-{kind}-Remaining")
            reset = headers.get(f"X-RateLimit-{kind}-Reset")
            if remaining is not None and reset is not None:
                try:
                    if int(remaining) <= 0:
                        until = int(reset) / 1000 if rate_limited else max(until, int(reset) / 1000)
                except ValueError:
                    pass
        if until > now:
            with self._lock:
                self._blocked_until = max(self._blocked_until, until)

    def used(self) -> int:
        """Requests counted in the last hour."""
        with self._lock:
            return len(self._sent)


class LinearClient:
    """Sends GraphQL operations to Linear with one credential.

    A request Linear refuses as unauthenticated (HTTP 401, or `AUTHENTICATION_ERROR`) was
    not run, so it is the one case sent again: once, after the credential renewed itself
    (or found that another thread already had). Every other failure is never resent.
    """

    def __init__(self, api_url: str, credential: Credential, budget: RequestBudget,
                 secret_values: list[str]) -> None:
        self._url = api_url
        self._budget = budget
        self._credential = credential
        self._secrets = secret_values  # a live list: the credential adds its tokens to it
        self._session = http_session(api_url)  # a stand-in on loopback: never via a proxy
        self._session.headers.update({"Content-Type": "application/json", "User-Agent": "wakeline"})

    @property
    def credential(self) -> Credential:
        """Where the `Authorization` header comes from."""
        return self._credential

    @property
    def budget(self) -> RequestBudget:
        """The request budget every call takes from."""
        return self._budget

    def execute(self, query: str, variables: dict[str, Any] | None = None,
                operation_name: str | None = None, *,
                authorization: str | None = None, optional: bool = False) -> dict[str, Any]:
        """Send one operation once; returns the whole GraphQL response (`data`, maybe `errors`).

        `authorization` overrides the credential (an install checks its new token with it);
        an `optional` request (progress) is shed first when the budget runs low.

        Raises:
            LinearAuthUnavailable: no token works; nothing was run.
        """
        payload: dict[str, Any] = {"query": query}
        if variables:
            payload["variables"] = variables
        if operation_name:
            payload["operationName"] = operation_name
        header = authorization or self._credential.header()
        self._budget.take(optional)
        resp = self._post(payload, header)
        if _unauthenticated(resp) and authorization is None:
            fresh = self._credential.refused(header)
            if fresh is None:
                raise LinearAuthUnavailable(self._credential.state().detail)
            log.info("linear refused the token; sending once more with a renewed one")
            self._budget.take()
            resp = self._post(payload, fresh)
            if _unauthenticated(resp):
                self._credential.failed(fresh, "Linear refused the app's renewed token")
                raise LinearAuthUnavailable(self._credential.state().detail)
        return self._read(resp)

    def _post(self, payload: dict[str, Any], header: str) -> requests.Response:
        try:
            return self._session.post(self._url, json=payload, headers={"Authorization": header},
                                      timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS))
        except requests.RequestException as exc:
            raise PossiblyDispatched(f"no answer from Linear ({exc.__class__.__name__})") from None

    def _read(self, resp: requests.Response) -> dict[str, Any]:
        if resp.status_code >= 500:
            self._budget.observe(resp.headers)
            raise PossiblyDispatched(f"Linear answered {resp.status_code}")
        body = _json(resp)
        codes = error_codes(body.get("errors")) if isinstance(body, dict) else []
        self._budget.observe(resp.headers, rate_limited="RATELIMITED" in codes)
        if not isinstance(body, dict):
            if resp.status_code >= 400:
                raise ProviderRejected(f"Linear answered {resp.status_code}", status=resp.status_code)
            raise PossiblyDispatched("Linear's answer was not JSON")
        errors = body.get("errors")
        if errors or resp.status_code >= 400:
            raise ProviderRejected(self._message(errors, resp.status_code), status=resp.status_code,
                                   codes=codes)
        return body

    def _message(self, errors: Any, status: int) -> str:
        messages = []
        for err in errors if isinstance(errors, list) else []:
            if isinstance(err, dict) and isinstance(err.get("message"), str):
                messages.append(err["message"])
        text = "; ".join(messages) or f"Linear answered {status}"
        return redact(text, self._secrets)[:MESSAGE_MAX_CHARS]


def error_codes(errors: Any) -> list[str]:
    """The `extensions.code` of each GraphQL error."""
    codes = []
    for err in errors if isinstance(errors, list) else []:
        ext = err.get("extensions") if isinstance(err, dict) else None
        if isinstance(ext, dict) and isinstance(ext.get("code"), str):
            codes.append(ext["code"])
    return codes


def _json(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None


def _unauthenticated(resp: requests.Response) -> bool:
    """Linear refused the token itself (so it ran nothing): 401, or AUTHENTICATION_ERROR."""
    if resp.status_code == 401:
        return True
    if resp.status_code >= 500 or "AUTHENTICATION_ERROR" not in resp.text:
        return False
    body = _json(resp)
    return isinstance(body, dict) and "AUTHENTICATION_ERROR" in error_codes(body.get("errors"))
