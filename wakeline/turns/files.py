"""The issue's files in a turn's workspace: `.wakeline/files/`, fetched before the agent starts.

Every link under `linear.uploads_url` in what a turn reads (a description, a comment, a
session's prompt context) is fetched once per conversation into the workspace, so the
agent opens a screenshot as it opens any file (decision 0038). A file's name is a hash of
its link and a cleaned-up last path segment (no path traversal, whatever the link says),
with the extension its content type implies when it has none. A file there already is
not fetched again; one that cannot be fetched is named with the reason. `.wakeline/` holds
a `.gitignore` of `*`, so a worktree's `git status` stays clean without a change to any
file of the repository.

wakeline writes here as the service user, outside any sandbox, into a directory the agent
writes too: every step goes through directory descriptors opened without following
symbolic links, and a file appears under its name whole (written aside, then renamed), so
nothing an agent left there can redirect a write elsewhere.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
import os
import re
import secrets
import stat
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable
from urllib.parse import unquote, urlsplit

from wakeline.errors import UploadFailed
from wakeline.providers.linear.uploads import Uploads

log = logging.getLogger(__name__)

DIR = ".wakeline"
FILES = "files"
NAME_MAX_CHARS = 64
# More links than this in one turn are not listed one by one.
NOTES_MAX = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PARTIAL = ".partial-"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class FileNote:
    """One link of a turn: where its file is in the workspace, or why it is not there."""

    url: str
    path: str | None = None  # relative to the workspace
    reason: str | None = None


def link_key(url: str) -> str:
    """The first part of a link's file name: 16 hex digits of its SHA-256."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def base_name(url: str) -> str:
    """A link's last path segment, decoded and cut down to letters, digits, `.`, `_` and
    `-` (never a leading dot), or `file`."""
    segment = unquote(PurePosixPath(urlsplit(url).path).name)
    cleaned = _UNSAFE.sub("-", segment).strip(".-")[:NAME_MAX_CHARS].strip(".-")
    return cleaned or "file"


def file_name(url: str, content_type: str | None) -> str:
    """`<key>-<base name>`, with the extension `content_type` implies when it has none."""
    name = f"{link_key(url)}-{base_name(url)}"
    if not PurePosixPath(name).suffix and content_type:
        name += mimetypes.guess_extension(content_type.split(";")[0].strip()) or ""
    return name


class IssueFiles:
    """Fetches a turn's links into its workspace."""

    def __init__(self, uploads: Uploads, *, max_bytes: int, max_files: int) -> None:
        self._uploads = uploads
        self._max_bytes = max_bytes
        self._max_files = max_files

    def fetch(self, workspace: Path, texts: Iterable[str]) -> list[FileNote]:
        """Fetch the links under `uploads_url` in `texts` that the workspace lacks (at most
        `max_files` of them); a note for each link, in order (at most `NOTES_MAX`)."""
        if self._max_files == 0:
            return []
        links = self._uploads.url.links_in(texts)
        if not links:
            return []
        notes: list[FileNote] = []
        with ExitStack() as stack:
            try:
                folder = _open_files_dir(workspace)
            except OSError as exc:
                reason = f"{DIR}/{FILES} cannot be made in the workspace ({exc.strerror or exc})"
                return [FileNote(url, reason=reason) for url in links[:NOTES_MAX]]
            stack.callback(os.close, folder)
            present = {}
            for name in os.listdir(folder):
                if name.startswith(_PARTIAL):
                    os.unlink(name, dir_fd=folder)  # a download a crash cut short
                else:
                    present[name.split("-", 1)[0]] = name
            fetched = 0
            for url in links[:NOTES_MAX]:
                name = present.get(link_key(url))
                if name is not None and _is_file(folder, name):
                    notes.append(FileNote(url, f"{DIR}/{FILES}/{name}"))
                elif fetched >= self._max_files:
                    notes.append(FileNote(url, reason=f"this turn fetched {self._max_files} "
                                                      "files already (agent.max_files_per_turn)"))
                else:
                    fetched += 1
                    notes.append(self._fetch(folder, url))
        if len(links) > NOTES_MAX:
            notes.append(FileNote(f"{len(links) - NOTES_MAX} more links",
                                  reason="too many in one turn"))
        return notes

    def _fetch(self, folder: int, url: str) -> FileNote:
        """Download one link beside its final name, then rename it into place."""
        partial = f"{_PARTIAL}{secrets.token_hex(8)}"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as out:
                fetched = self._uploads.download(url, out, self._max_bytes)
            name = file_name(url, fetched.content_type)
            os.rename(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
        except UploadFailed as exc:
            os.unlink(partial, dir_fd=folder)
            log.info("a linked file was not fetched", extra={"key": link_key(url),
                                                              "reason": exc.detail})
            return FileNote(url, reason=exc.detail)
        except BaseException:
            os.unlink(partial, dir_fd=folder)
            raise
        log.info("a linked file was fetched", extra={"key": link_key(url), "bytes": fetched.size})
        return FileNote(url, f"{DIR}/{FILES}/{name}")


def _open_files_dir(workspace: Path) -> int:
    """A descriptor of `<workspace>/.wakeline/files`, made (0700) when missing, with the
    `.gitignore` that keeps `.wakeline/` out of git; never through a symbolic link.

    Raises:
        OSError: a part of the path is not a plain directory, or cannot be made.
    """
    top = os.open(workspace, _DIR_FLAGS)
    try:
        own = _subdir(top, DIR)
    finally:
        os.close(top)
    try:
        try:
            fd = os.open(".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=own)
        except FileExistsError:
            pass  # an earlier turn's (or whatever the agent made of it: its own workspace)
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("# wakeline's own: the issue's files, fetched for the agent\n*\n")
        return _subdir(own, FILES)
    finally:
        os.close(own)


def _subdir(parent: int, name: str) -> int:
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _is_file(folder: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False
