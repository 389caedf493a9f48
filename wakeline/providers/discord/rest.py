"""The Discord REST client: the few calls control threads need, through `requests`.

Each call has bounded timeouts and honours Discord's rate limits (`limits.py`): a
bucket known to be empty is waited out before sending, a 429 is waited out by its
`retry_after` and retried, at most `max_attempts` times and `max_wait_seconds` in
all; past that `DiscordRateLimited` says when to come back and nothing more is sent.
A 5xx or no answer is `DiscordUnavailable` (transient, never retried here: the
caller decides); 404 `Unknown Channel` is `ThreadGone`; other 4xx `DiscordRejected`.
Errors name the route, never the token, and Discord's text is redacted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import requests

from wakeline.service.net import http_session
from wakeline.errors import (
    DiscordRateLimited,
    DiscordRejected,
    DiscordUnauthorized,
    DiscordUnavailable,
    ThreadGone,
)
from wakeline.providers.discord.limits import RateLimits, Route, retry_after_of
from wakeline.secrets import redact

PUBLIC_THREAD = 11
UNKNOWN_CHANNEL = 10003
ARCHIVE_AFTER_MINUTES = 10080  # a week without a message; an open conversation unarchives it
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 15.0
# Discord's 429 without Google's `Via` header comes from Cloudflare: a ban, not a bucket.
CLOUDFLARE_BAN_SECONDS = 60.0


@dataclass(frozen=True)
class Channel:
    """A channel or thread as Discord answers it (only what wakeline reads)."""

    id: str
    type: int
    name: str
    parent_id: str | None
    guild_id: str | None
    archived: bool
    locked: bool
    permission_overwrites: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Channel:
        """From Discord's channel object."""
        meta = data.get("thread_metadata") or {}
        return cls(str(data["id"]), int(data.get("type", 0)), str(data.get("name") or ""),
                   _str(data.get("parent_id")), _str(data.get("guild_id")),
                   bool(meta.get("archived")), bool(meta.get("locked")),
                   tuple(data.get("permission_overwrites") or ()))


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


class DiscordRest:
    """Discord's REST API for one bot; safe to share between threads.

    Args:
        api_url: the REST base (`discord.api_url`).
        token: the bot token; only ever sent in the `Authorization` header.
        secret_values: what to redact from any text Discord sends back.
        monotonic, sleep: the clock and a wait (parameters, so tests move time).
    """

    def __init__(self, api_url: str, token: str, secret_values: list[str] | None = None, *,
                 max_attempts: int = 3, max_wait_seconds: float = 15.0,
                 timeout: tuple[float, float] = (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None) -> None:
        self._base = api_url.rstrip("/")
        self._token = token
        self._secrets = secret_values if secret_values is not None else [token]
        self._max_attempts = max_attempts
        self._max_wait = max_wait_seconds
        self._timeout = timeout
        self._now = monotonic
        self._closed = threading.Event()
        self._sleep = sleep or self._closed.wait  # a stop ends every wait at once
        self.limits = RateLimits(monotonic)
        self._local = threading.local()

    def close(self) -> None:
        """End every wait now (shutting down): waiting calls give up as unavailable."""
        self._closed.set()

    # --- calls -----------------------------------------------------------------------------

    def gateway_url(self) -> str:
        """The Gateway address, from `GET /gateway/bot`."""
        return str(self._call(Route("GET", "/gateway/bot"), "/gateway/bot")["url"])

    def me(self) -> dict[str, Any]:
        """The bot's own user (`GET /users/@me`)."""
        return dict(self._call(Route("GET", "/users/@me"), "/users/@me"))

    def channel(self, channel_id: str) -> Channel:
        """A channel or thread; `ThreadGone` when Discord no longer has it."""
        return Channel.from_json(self._call(Route("GET", "/channels/{id}", channel_id),
                                            f"/channels/{channel_id}"))

    def create_thread(self, parent_id: str, name: str) -> Channel:
        """A public thread (type 11) under `parent_id`, started without a message."""
        return Channel.from_json(self._call(
            Route("POST", "/channels/{id}/threads", parent_id), f"/channels/{parent_id}/threads",
            json={"name": name, "type": PUBLIC_THREAD,
                  "auto_archive_duration": ARCHIVE_AFTER_MINUTES}))

    def edit_thread(self, thread_id: str, **fields: Any) -> Channel:
        """Change a thread's `archived`, `locked` or `name`."""
        return Channel.from_json(self._call(Route("PATCH", "/channels/{id}", thread_id),
                                            f"/channels/{thread_id}", json=fields))

    def post(self, channel_id: str, content: str, nonce: str | None = None, *,
             components: list[dict[str, Any]] | None = None) -> str:
        """Post one message (at most 2,000 characters), with its `components` (buttons); its id.

        Nobody is pinged whatever the text says (`allowed_mentions` is empty). With a
        `nonce`, Discord answers a resend of the same nonce with the first message instead
        of posting it twice (`enforce_nonce`), so a retry after a lost answer is safe.
        """
        body: dict[str, Any] = {"content": content, "allowed_mentions": {"parse": []}}
        if components:
            body["components"] = components
        if nonce:
            body.update(nonce=nonce, enforce_nonce=True)
        answer = self._call(Route("POST", "/channels/{id}/messages", channel_id),
                            f"/channels/{channel_id}/messages", json=body)
        return str(answer["id"])

    def edit_message(self, channel_id: str, message_id: str, **fields: Any) -> None:
        """Change one of the bot's messages (`content`, `components`)."""
        self._call(Route("PATCH", "/channels/{id}/messages/{message}", channel_id),
                   f"/channels/{channel_id}/messages/{message_id}",
                   json={**fields, "allowed_mentions": {"parse": []}})

    def answer_interaction(self, interaction_id: str, token: str, answer: dict[str, Any]) -> None:
        """Answer an interaction (`POST /interactions/{id}/{token}/callback`), once, within
        Discord's 3 s. The token is the interaction's own: it is only ever in the path, and
        errors name the route's template, never the path."""
        self._call(Route("POST", "/interactions/{id}/{token}/callback", interaction_id),
                   f"/interactions/{interaction_id}/{token}/callback", json=answer)

    def messages_after(self, channel_id: str, after: int, limit: int = 100) -> list[dict[str, Any]]:
        """Up to `limit` messages right after message id `after`, oldest first."""
        page = self._call(Route("GET", "/channels/{id}/messages", channel_id),
                          f"/channels/{channel_id}/messages",
                          params={"after": str(after), "limit": str(limit)})
        return sorted(page, key=lambda m: int(m["id"]))

    def guild(self, guild_id: str) -> dict[str, Any]:
        """A guild (its roles, for the doctor's permission check)."""
        return dict(self._call(Route("GET", "/guilds/{id}", guild_id), f"/guilds/{guild_id}"))

    def member(self, guild_id: str, user_id: str) -> dict[str, Any]:
        """A guild member (its roles)."""
        return dict(self._call(Route("GET", "/guilds/{id}/members/{user}", guild_id),
                               f"/guilds/{guild_id}/members/{user_id}"))

    # --- the one way out -------------------------------------------------------------------

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = http_session(self._base)
        return session

    def _call(self, route: Route, path: str, *, json: Any = None,
              params: dict[str, str] | None = None) -> Any:
        what = f"{route.method} {route.template}"
        deadline = self._now() + self._max_wait
        attempts = 0
        while True:
            wait = self.limits.wait_for(route)
            if wait > 0:
                if self._now() + wait > deadline:
                    raise DiscordRateLimited(f"{what}: rate limited", retry_after=wait)
                self._sleep(wait)
                if self._closed.is_set():
                    raise DiscordUnavailable(f"{what}: shutting down")
                continue
            attempts += 1
            try:
                resp = self._session().request(
                    route.method, self._base + path, json=json, params=params,
                    headers={"Authorization": f"Bot {self._token}"}, timeout=self._timeout)
            except requests.RequestException as exc:
                raise DiscordUnavailable(f"{what}: {exc.__class__.__name__}") from None
            self.limits.learn(route, resp.headers)
            if resp.status_code == 429:
                retry_after, is_global = retry_after_of(_json(resp), resp.headers)
                if "Via" not in resp.headers:
                    self.limits.limited(route, max(retry_after, CLOUDFLARE_BAN_SECONDS), True)
                    raise DiscordRateLimited(f"{what}: refused by Cloudflare",
                                             retry_after=max(retry_after, CLOUDFLARE_BAN_SECONDS))
                self.limits.limited(route, retry_after, is_global)
                if attempts >= self._max_attempts:
                    raise DiscordRateLimited(f"{what}: rate limited", retry_after=retry_after)
                continue
            if resp.status_code >= 500:
                raise DiscordUnavailable(f"{what}: HTTP {resp.status_code}")
            if resp.status_code < 300:
                return _json(resp)
            self._refuse(what, resp)

    def _refuse(self, what: str, resp: requests.Response) -> None:
        body = _json(resp)
        code = int(body.get("code", 0)) if isinstance(body, dict) else 0
        message = str(body.get("message", "")) if isinstance(body, dict) else ""
        detail = redact(f"{what}: {resp.status_code} {code} {message}".strip(), self._secrets)
        if resp.status_code == 401:
            raise DiscordUnauthorized(detail, 401, code)
        if resp.status_code == 404 and code == UNKNOWN_CHANNEL:
            raise ThreadGone(detail, 404, code)
        raise DiscordRejected(detail, resp.status_code, code)


def _json(resp: requests.Response) -> Any:
    try:
        return resp.json() if resp.content else None
    except ValueError:
        return None
