"""Secret material: where it comes from, how it is created, how it is scrubbed.

Values live in `pydantic.SecretStr` so an accidental `repr` or log line shows
stars. Files are created atomically with mode 0600 and never overwritten.
"""

from __future__ import annotations

import os
import re
import secrets as _random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr

from wakeline.config import Config

WEBHOOK_SECRET_ENV = "WAKELINE_LINEAR_WEBHOOK_SECRET"
API_KEY_ENV = "WAKELINE_LINEAR_API_KEY"
CLIENT_SECRET_ENV = "WAKELINE_LINEAR_CLIENT_SECRET"
DISCORD_TOKEN_ENV = "WAKELINE_DISCORD_TOKEN"
DATABASE_URL_ENV = "WAKELINE_DATABASE_URL"
# Learned secrets (rotating app tokens) scrubbed at once; the oldest go first.
LEARNED_KEPT = 16
REDACTED = "[redacted]"
# Linear credential shapes (API keys, OAuth access and refresh tokens, webhook secrets),
# scrubbed even when the value is not one we hold.
_KEY_SHAPE = re.compile(r"lin_[a-z]{2,12}_[A-Za-z0-9]{8,}")
# Other credentials' common shapes, for text that leaves for the owner's journal.
_TOKEN_SHAPES = re.compile(
    r"\bwlt_[A-Za-z0-9_-]{8,}"                       # wakeline turn tokens
    r"|\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}"   # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bsk-[A-Za-z0-9_-]{20,}"                      # OpenAI / Anthropic (sk-ant-, sk-proj-)
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"               # Slack
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"                # AWS access key ids
    r"|\bsyt_[A-Za-z0-9_]{10,}"                      # Synapse (Matrix) access tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs
)
# Each pattern needs one of these; testing for them first keeps ordinary text cheap.
_TOKEN_MARKS = ("wlt_", "ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_", "sk-", "xox",
                "AKIA", "ASIA", "eyJ", "syt_")
_ASSIGNED_MARKS = ("token", "secret", "passw", "api")
_BEARER = re.compile(r"\b(Bearer\s+)([A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# `api_key=...`, `GITHUB_TOKEN: ...`, `"password": "..."`; bounded affixes keep this linear.
_ASSIGNED = re.compile(
    r"\b([A-Za-z0-9_-]{0,40}(?:token|secret|passw(?:or)?d|api[_-]?key)[A-Za-z0-9_-]{0,40}"
    r"[\"']?\s*([=:])\s*[\"']?)([^\s\"'&,;<>]{8,})", re.IGNORECASE)


@dataclass(frozen=True)
class Secrets:
    """Every secret the service holds; `values()` feeds the redactor.

    `values()` is one list, shared by everything that scrubs (the log formatter, the
    journal, the Linear client): secrets learned while running, the Linear app's rotating
    tokens, are added to it with `remember`, so each scrubber knows them from then on.
    """

    webhook_secret: SecretStr | None
    linear_api_key: SecretStr | None
    operator_token: SecretStr | None
    client_secret: SecretStr | None = None
    # Each Matrix connection's access token, by connection name (`[matrix.connections.NAME]`).
    matrix_tokens: dict[str, SecretStr] = field(default_factory=dict, hash=False)
    discord_token: SecretStr | None = None
    # The PostgreSQL URL (`scale.database_url`, or the environment's, which wins): its password.
    database_url: SecretStr | None = None
    _held: list[str] = field(default_factory=list, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._held[:] = self._fixed()

    def _fixed(self) -> list[str]:
        found = (self.webhook_secret, self.linear_api_key, self.operator_token, self.client_secret,
                 self.discord_token, *self.matrix_tokens.values())
        values = [s.get_secret_value() for s in found if s is not None and s.get_secret_value()]
        password = database_password(self.database_url)
        if password:
            values.append(password)
        return values

    def values(self) -> list[str]:
        """The raw secret strings, for scrubbing text that leaves the process (a live list)."""
        return self._held

    def remember(self, value: str) -> None:
        """Scrub `value` from now on too (a token learned at run time). The newest
        `LEARNED_KEPT` learned values are kept: older tokens were rotated out long ago."""
        if not value or value in self._held:
            return
        self._held.append(value)
        fixed = len(self._fixed())
        extra = len(self._held) - fixed - LEARNED_KEPT
        if extra > 0:
            del self._held[fixed:fixed + extra]


def read_secret_file(path: Path) -> SecretStr | None:
    """A secret file's stripped content, or None when absent or empty."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return SecretStr(value) if value else None


def load_secrets(config: Config, environ: dict[str, str]) -> Secrets:
    """Read every secret: the environment wins over files."""

    def pick(env: str, file: str) -> SecretStr | None:
        if environ.get(env, "").strip():
            return SecretStr(environ[env].strip())
        return read_secret_file(config.path(file))

    return Secrets(
        webhook_secret=pick(WEBHOOK_SECRET_ENV, config.linear.webhook_secret_file),
        linear_api_key=pick(API_KEY_ENV, config.linear.api_key_file),
        operator_token=read_secret_file(config.operator_token_path),
        client_secret=pick(CLIENT_SECRET_ENV, config.linear.client_secret_file),
        matrix_tokens={name: token for name, conn in config.matrix.connections.items()
                       if (token := read_secret_file(config.path(conn.access_token_file)))},
        discord_token=pick(DISCORD_TOKEN_ENV, config.discord.token_file),
        database_url=SecretStr(environ[DATABASE_URL_ENV].strip())
        if environ.get(DATABASE_URL_ENV, "").strip()
        else (SecretStr(config.scale.database_url) if config.scale.database_url else None),
    )


def database_password(url: SecretStr | str | None) -> str | None:
    """The password a database URL carries, if any (scrubbed like every other secret)."""
    if url is None:
        return None
    text = url.get_secret_value() if isinstance(url, SecretStr) else url
    try:
        password = urlsplit(text).password
    except ValueError:
        return None
    return unquote(password) if password else None


def new_token(nbytes: int = 32) -> str:
    """A fresh URL-safe random token."""
    return _random.token_urlsafe(nbytes)


def create_secret_file(path: Path, value: str, *, newline: bool = True, durable: bool = True) -> bool:
    """Write `value` (plus a newline, unless told not to) to `path` with mode 0600 unless the
    file exists.

    The write goes to a temporary file that is linked into place, so a reader
    never sees a half-written secret and a concurrent creator never clobbers one.

    Returns:
        True when the file was created, False when it already existed.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{new_token(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(value + ("\n" if newline else ""))
            fh.flush()
            if durable:  # a prompt file lives milliseconds: no need to reach the disk
                os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def write_private(path: Path, text: str) -> None:
    """Write `text` to a new owner-only file (0600), replacing a leftover of the same name.

    For short-lived files only a child reads (a turn's prompt): no fsync, no atomic link.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def redact(text: str, secret_values: list[str]) -> str:
    """Replace every held secret, and anything shaped like a Linear key, in `text`."""
    for value in sorted(secret_values, key=len, reverse=True):
        if len(value) >= 4 and value in text:
            text = text.replace(value, REDACTED)
    return _KEY_SHAPE.sub(REDACTED, text) if "lin_" in text else text


def scrub(text: str, secret_values: Sequence[str]) -> str:
    """Credentials out: held secret values, Linear keys, turn tokens, bearer values and the
    common token shapes (GitHub, OpenAI/Anthropic, Slack, AWS, JWT, `secret=...`)."""
    text = redact(text, list(secret_values))
    if _contains_any(text, _TOKEN_MARKS):
        text = _TOKEN_SHAPES.sub(REDACTED, text)
    lower = text.lower()
    if "bearer" in lower:
        text = _BEARER.sub(lambda m: _value_out(m[0], m[1], m[2]), text)
    if _contains_any(lower, _ASSIGNED_MARKS):
        # After `=` a value always goes; after `:` ("Secret: rotate it") only if it looks secret.
        text = _ASSIGNED.sub(lambda m: _value_out(m[0], m[1], m[3], always=m[2] == "="), text)
    return text


def _contains_any(text: str, marks: tuple[str, ...]) -> bool:
    # A plain loop: every log line and journal field passes here, and it costs a third of
    # `any()` over a generator.
    for mark in marks:
        if mark in text:
            return True
    return False


def _value_out(whole: str, prefix: str, value: str, always: bool = False) -> str:
    # "Bearer authentication" is prose; a credential has a digit or a symbol, or is long.
    if always or len(value) >= 20 or any(not c.isalpha() for c in value.rstrip(".")):
        return prefix + REDACTED
    return whole
