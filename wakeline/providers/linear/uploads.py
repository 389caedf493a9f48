"""Linear's file storage (`linear.uploads_url`): which links are its, and one bounded download.

A screenshot or a log pasted into an issue lives at `https://uploads.linear.app/...`, which
answers only with the workspace's credential, sent as for the GraphQL API (decision 0038).
`UploadsUrl.links_in` finds the links under the configured base in a turn's text: the same
scheme, host and port, a path under the base's, no user part and no `.` or `..` segment;
nothing else is ever requested, on anyone's behalf. `Uploads.download` streams one file to
a writer: the credential goes only to the base, a redirect is followed only while it stays
under it, and a file larger than the limit, or slower than the timeout, is given up
(`UploadFailed` says why) with at most one chunk of it in memory.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import BinaryIO, Iterable
from urllib.parse import unquote, urljoin, urlsplit

import requests
import urllib3

from wakeline.service.net import http_session
from wakeline.errors import LinearAuthUnavailable, UploadFailed
from wakeline.providers.linear.credentials import Credential

log = logging.getLogger(__name__)

# A link ends at whitespace, at what closes Markdown (`)`, `]`) or a quote, and at any
# character a URL never carries unescaped.
LINK = re.compile(r"""https?://[^\s<>()\[\]{}"'`\\|^]+""", re.IGNORECASE)
LINK_MAX_CHARS = 2_000
MAX_REDIRECTS = 3
CONNECT_TIMEOUT_SECONDS = 5.0
_TRAILING = ".,;:!?*_~"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 65_536


class UploadsUrl:
    """The base of Linear's file storage, and which links lie under it."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.base = base
        self._scheme = parts.scheme.lower()
        self._host = (parts.hostname or "").lower()
        self._port = parts.port or _DEFAULT_PORTS.get(self._scheme)
        self._prefix = parts.path.rstrip("/") + "/"

    def owns(self, url: str) -> bool:
        """True when `url` lies under the base: exact scheme, host and port, a path under the
        base's path, no user part, no `.` or `..` segment (escaped or not)."""
        try:
            parts = urlsplit(url)
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:  # a port that is no number
            return False
        if parts.username is not None or parts.password is not None:
            return False
        if (parts.scheme.lower(), (parts.hostname or "").lower(), port) != \
                (self._scheme, self._host, self._port):
            return False
        segments = [unquote(s) for s in parts.path.split("/")]
        return parts.path.startswith(self._prefix) and not any(s in (".", "..") for s in segments)

    def links_in(self, texts: Iterable[str]) -> list[str]:
        """The distinct links under the base in `texts`, in the order they first appear."""
        found: dict[str, None] = {}
        for text in texts:
            if "://" not in text:
                continue
            for match in LINK.finditer(text):
                link = match.group(0).rstrip(_TRAILING)
                if len(link) <= LINK_MAX_CHARS and self.owns(link):
                    found.setdefault(link, None)
        return list(found)


@dataclass(frozen=True)
class Fetched:
    """A file written whole: its size and what the storage said it is."""

    size: int
    content_type: str | None


class Uploads:
    """Downloads from Linear's file storage with the Linear credential (`None`: no credential,
    every download is refused and says so)."""

    def __init__(self, base: str, credential: Credential | None, *,
                 timeout_seconds: float) -> None:
        self.url = UploadsUrl(base)
        self._credential = credential
        self._timeout = timeout_seconds
        self._session = http_session(base)  # a stand-in on loopback: never via a proxy
        self._session.headers.update({"User-Agent": "wakeline", "Accept-Encoding": "identity"})

    def download(self, link: str, out: BinaryIO, max_bytes: int) -> Fetched:
        """Stream the file at `link` (under the base) into `out`.

        Raises:
            UploadFailed: with why (no credential, an HTTP status, too big, a timeout, a
                redirect away from the base, no answer); `out` may hold a part of the file.
        """
        if self._credential is None:
            raise UploadFailed("no Linear credential (the local backend fetches nothing)")
        try:
            header = self._credential.header()
        except LinearAuthUnavailable:
            raise UploadFailed("no working Linear token") from None
        deadline = time.monotonic() + self._timeout
        url = link
        try:
            for _ in range(MAX_REDIRECTS + 1):
                with self._get(url, header, deadline) as resp:
                    if resp.status_code not in _REDIRECTS:
                        return self._save(resp, out, max_bytes, deadline)
                    target = urljoin(url, resp.headers.get("Location", ""))
                    if not self.url.owns(target):
                        # The credential never leaves the base; nor does a request.
                        raise UploadFailed(f"redirected away from {self.url.base}")
                    url = target
        except (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError):
            raise UploadFailed(f"timed out after {self._timeout:g} s") from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise UploadFailed(f"no answer ({exc.__class__.__name__})") from None
        raise UploadFailed(f"more than {MAX_REDIRECTS} redirects")

    def _get(self, url: str, header: str, deadline: float) -> requests.Response:
        left = max(deadline - time.monotonic(), 0.001)
        return self._session.get(url, headers={"Authorization": header}, stream=True,
                                 allow_redirects=False,
                                 timeout=(min(CONNECT_TIMEOUT_SECONDS, left), left))

    def _save(self, resp: requests.Response, out: BinaryIO, max_bytes: int,
              deadline: float) -> Fetched:
        if resp.status_code != 200:
            raise UploadFailed(f"HTTP {resp.status_code}")
        too_big = f"larger than {max_bytes} bytes (agent.max_file_bytes)"
        declared = resp.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise UploadFailed(too_big)  # said up front: nothing is read
        raw = resp.raw
        read = getattr(raw, "read1", None) or raw.read  # read1: whatever has arrived (urllib3 2)
        size = 0
        while True:
            _shrink_timeout(raw, deadline)
            chunk = read(_CHUNK)
            if not chunk:
                return Fetched(size, resp.headers.get("Content-Type"))
            size += len(chunk)
            if size > max_bytes:
                raise UploadFailed(too_big)
            out.write(chunk)
            if time.monotonic() > deadline:
                raise TimeoutError


def _shrink_timeout(raw: object, deadline: float) -> None:
    """Let the next read wait only for what is left of the file's time: a server that
    trickles a byte at a time cannot stretch the timeout (where the socket is reachable)."""
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if sock is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
