"""What `git add` and `git commit` need in a worktree, and what must stay out of an agent's reach.

A worktree's own git directory (`<repo>/.git/worktrees/<name>`: its index, HEAD, logs) and the
repository's `objects`, `refs` and `logs` are writable; the repository's `config` and `hooks`
never are: git would run what they name as the service user, outside any sandbox. Nor are the
files that tell git where a worktree's repository is (the worktree's `.git` file, and
`gitdir`, `commondir` and `config.worktree` in its git directory): an agent that pointed them
at a directory of its own would choose the config of wakeline's next git command in that
worktree. Paths are read from the files, never from git, and every one must lie where a
worktree of the route's repository has it, or the turn does not run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from wakeline.errors import WorkspaceFailed

DEV_NULL = Path("/dev/null")


@dataclass(frozen=True)
class GitDirs:
    """The paths of one worktree that a confined turn gets, beside its working tree."""

    writable: tuple[Path, ...]
    # (source, target): files bound read-only over themselves; /dev/null where one is missing
    pinned: tuple[tuple[Path, Path], ...]
    protected: tuple[Path, ...]  # read-only even when a writable path or the home holds them


def worktree_dirs(workspace: Path, repo: Path) -> GitDirs:
    """The git paths of `workspace`, a worktree of `repo`.

    Raises:
        WorkspaceFailed: the workspace's `.git` does not name a worktree of `repo`.
    """
    common = _common_dir(repo)
    gitdir = _pointer(workspace / ".git", "gitdir: ")
    if gitdir is None or gitdir.parent != common / "worktrees":
        raise WorkspaceFailed(f"{workspace}/.git does not point into {common}/worktrees: not "
                              "confined, not run")
    logs = common / "logs"
    try:
        logs.mkdir(mode=0o700, exist_ok=True)  # a reflog written in the sandbox needs it there
    except OSError as exc:
        raise WorkspaceFailed(f"cannot create {logs}: {exc.strerror or exc}") from exc
    writable = tuple(p for p in (common / "objects", common / "refs", logs, gitdir) if p.is_dir())
    pinned = tuple((path if path.exists() else DEV_NULL, path) for path in (
        workspace / ".git", gitdir / "gitdir", gitdir / "commondir", gitdir / "config.worktree"))
    protected = tuple(p for p in (common / "config", common / "hooks", common / "info")
                      if p.exists())
    return GitDirs(writable, pinned, protected)


def _common_dir(repo: Path) -> Path:
    dot_git = Path(os.path.realpath(repo / ".git"))
    if dot_git.is_dir():
        return dot_git
    gitdir = _pointer(dot_git, "gitdir: ")
    if gitdir is None:
        raise WorkspaceFailed(f"{repo} has no git directory")
    common = _pointer(gitdir / "commondir", "", base=gitdir)
    return common or gitdir


def _pointer(path: Path, prefix: str, base: Path | None = None) -> Path | None:
    """The path a one-line git pointer file names (relative to `base`, else its directory)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith(prefix) or "\n" in text:
        return None
    target = Path(text[len(prefix):])
    return Path(os.path.realpath((base or path.parent) / target))
