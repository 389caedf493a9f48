"""A small client of the operator API, used by the CLI."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

import requests

from wakeline.service.net import http_session
from wakeline.config import Config
from wakeline.secrets import read_secret_file

API_URL_ENV = "WAKELINE_API_URL"
TOKEN_ENV = "WAKELINE_TOKEN"


class Unreachable(Exception):
    """The running service could not be reached."""


class NoToken(Exception):
    """No operator or turn token could be found."""


@dataclass
class ApiError(Exception):
    """The service answered with an error body."""

    status: int
    body: dict[str, Any]

    def __str__(self) -> str:
        code = self.body.get("error", "error")
        detail = self.body.get("detail")
        return f"{code}: {detail}" if detail else str(code)


class OperatorClient:
    """Talks JSON to the operator API."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._session = http_session(self.base_url)

    @classmethod
    def from_config(cls, config: Config, environ: Mapping[str, str] | None = None) -> "OperatorClient":
        """Inside a turn, $WAKELINE_API_URL and $WAKELINE_TOKEN; else the operator config."""
        environ = os.environ if environ is None else environ
        if environ.get(API_URL_ENV) and environ.get(TOKEN_ENV):
            return cls(environ[API_URL_ENV], environ[TOKEN_ENV])
        token = read_secret_file(config.operator_token_path)
        if token is None:
            raise NoToken(f"no operator token at {config.operator_token_path}")
        host = config.server.operator_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return cls(f"http://{host}:{config.server.operator_port}", token.get_secret_value())

    def request(self, method: str, path: str, *, json: Any = None,
                params: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """One call; returns the decoded JSON body.

        Raises:
            Unreachable: no connection could be made.
            ApiError: the service refused.
        """
        try:
            resp = self._session.request(
                method,
                self.base_url + path,
                json=json,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=timeout or self._timeout,
            )
        except requests.ConnectionError:
            raise Unreachable(f"cannot reach wakeline at {self.base_url}") from None
        except requests.Timeout:
            raise Unreachable(f"wakeline at {self.base_url} did not answer in time") from None
        try:
            body = resp.json()
        except ValueError:
            body = {"error": "bad_response", "detail": resp.text[:200]}
        if resp.status_code >= 400:
            raise ApiError(resp.status_code, body if isinstance(body, dict) else {"error": "error"})
        return body
