"""The Linear app's tokens on disk: `<state_dir>/secrets/linear-oauth.json`, owner-only.

Linear rotates the refresh token on every use, so the file is the install: a new
pair is on disk (written to a temporary file, fsynced, renamed over the old one, the
directory fsynced) before the new access token is used, and a kill -9 at any moment
leaves either the old pair or the new one, never half of either. Whoever refreshes
holds an exclusive `flock` on a sidecar lock file and reads the file again first, so
two processes (the service and a CLI, or two services during a restart) never spend
the same refresh token twice. The file's content is an edge: it is validated on every
read, and a file edited into garbage is reported, never trusted.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from wakeline.secrets import new_token

Stamp = tuple[int, int, int]


class TokenFileInvalid(Exception):
    """The token file exists but cannot be used; the message says why (never its content)."""


class StoredTokens(BaseModel):
    """What the file holds: the current pair, when it expires (our clock), and the install."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    grant: Literal["authorization_code", "client_credentials"]
    client_id: str
    access_token: str
    refresh_token: str | None = None
    scope: str = ""
    received_ms: int
    expires_ms: int
    viewer_id: str | None = None
    viewer_name: str | None = None
    organization_id: str | None = None
    organization_name: str | None = None
    installed_ms: int | None = None

    def refresh_due_ms(self, fraction_left: float) -> int:
        """When to renew: once only `fraction_left` of the token's life remains."""
        life = max(self.expires_ms - self.received_ms, 0)
        return self.expires_ms - int(life * fraction_left)


class TokenFile:
    """Reads, replaces and locks one token file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> StoredTokens | None:
        """The stored tokens, or None when there is no file.

        Raises:
            TokenFileInvalid: unreadable, not JSON, or not the expected shape.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TokenFileInvalid(f"{self.path} cannot be read ({exc.strerror})") from None
        try:
            return StoredTokens.model_validate(json.loads(raw))
        except (ValueError, ValidationError):
            raise TokenFileInvalid(f"{self.path} is not a valid token file") from None

    def write(self, tokens: StoredTokens) -> None:
        """Replace the file atomically and durably (0600)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{new_token(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(tokens.model_dump_json(indent=2) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself must survive a crash too
        finally:
            os.close(dir_fd)

    def stamp(self) -> Stamp | None:
        """Identity and version of the file on disk (None when absent): cheap change checks."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def mode(self) -> int | None:
        """The file's permission bits, None when absent."""
        try:
            return stat.S_IMODE(self.path.stat().st_mode)
        except OSError:
            return None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the exclusive refresh lock, across threads and processes."""
        lock = self.path.with_name(self.path.name + ".lock")
        lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock
