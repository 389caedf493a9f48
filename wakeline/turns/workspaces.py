"""Workspaces: the directory each conversation's agent works in, or a git worktree.

A conversation works in `<root>/<conversation_id>`. When its route names a git
repository that directory is a worktree of it, on a branch named after the issue,
so agents of different issues never share a checkout. Only the `git` command line
is used, always with a timeout; every failure becomes `WorkspaceFailed` with a
detail an operator can act on. Retiring never throws work away: a worktree with
changed or untracked files is kept whole, and branches are never deleted.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import threading
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from wakeline.errors import WorkspaceFailed

log = logging.getLogger(__name__)

BRANCH_MAX_CHARS = 48
NAME_TRIES = 10
STDERR_MAX_CHARS = 300
# Variables that would point git at another repository than the one named with -C.
_FOREIGN_GIT_VARS = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
     "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE"}
)
# wakeline's own git runs as the service user, outside any sandbox, in worktrees agents write:
# it never runs a hook or an fsmonitor command, whatever a config (or a committed
# `core.hooksPath` directory) names. They are passed on to every git it starts, submodules too.
_NOTHING_RUNS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def _slug(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", folded.lower()).strip("-")


def branch_name(identifier: str | None, title: str | None, fallback: str) -> str:
    """`eng-123-short-title`: the issue identifier and a slug of its title, at most 48 chars.

    Without an identifier `fallback` (the conversation id) takes its place. Only ASCII
    letters, digits and single inner hyphens remain, so git always accepts the name.
    """
    head = _slug(identifier or "") or _slug(fallback) or "workspace"
    tail = _slug(title or "")
    name = f"{head}-{tail}" if tail else head
    if len(name) <= BRANCH_MAX_CHARS:
        return name
    # The character just past the limit counts: a "-" there is a clean cut.
    boundary = name[: BRANCH_MAX_CHARS + 1].rfind("-")
    return name[:boundary] if boundary > 0 else name[:BRANCH_MAX_CHARS].rstrip("-")


@dataclass(frozen=True)
class Placement:
    """Where a turn works: a plain directory, or a worktree on `branch`."""

    path: Path
    branch: str | None  # None for a plain directory


@dataclass(frozen=True)
class Retired:
    """What retiring a workspace did."""

    removed: bool
    detail: str  # "" when removed; otherwise why it was kept


@contextmanager
def _disk(what: str) -> Iterator[None]:
    """Turn a file system error into WorkspaceFailed that starts with `what`."""
    try:
        yield
    except OSError as exc:
        raise WorkspaceFailed(f"{what}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class Snapshot:
    """A git workspace's state: HEAD, the index's tree, and a tree of every file."""

    head: str | None
    index: str
    work: str


@dataclass
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


class Workspaces:
    """Prepares and retires the workspaces under `root`, one per conversation."""

    def __init__(self, root: Path, *, git: str = "git", timeout_seconds: float = 60.0) -> None:
        # Absolute, because git resolves a relative worktree path against the repository.
        self._root = Path(root).absolute()
        self._git_cmd = git
        self._timeout = timeout_seconds
        self._guard = threading.Lock()
        self._repo_slots: dict[str, _Slot] = {}
        self._conversation_slots: dict[str, _Slot] = {}

    def path_of(self, conversation_id: str) -> Path:
        """The workspace directory of a conversation: `root / conversation_id`."""
        if conversation_id in ("", ".", "..") or "/" in conversation_id or "\0" in conversation_id:
            raise WorkspaceFailed(f"conversation id {conversation_id!r} cannot name a directory")
        return self._root / conversation_id

    def check_repo(self, repo: Path, base: str = "") -> str | None:
        """None when `repo` is a usable git repository with `base` (or HEAD) in it; else why not."""
        try:
            return self._base_problem(repo, base)
        except WorkspaceFailed as exc:  # git hung or would not start: that is the reason
            return exc.detail

    def _base_problem(self, repo: Path, base: str) -> str | None:
        reason = self._repo_problem(repo)
        if reason is not None:
            return reason
        if base.startswith("-"):
            return f"base {base!r} is not a branch or commit name"
        start = base or "HEAD"
        if not self._ok(repo, "rev-parse", "--verify", "--quiet", f"{start}^{{commit}}"):
            return f"branch {base} does not exist in {repo}" if base else f"{repo} has no commits"
        return None

    def prepare(
        self,
        conversation_id: str,
        *,
        repo: Path | None,
        base: str = "",
        identifier: str | None = None,
        title: str | None = None,
        branch: str | None = None,
    ) -> Placement:
        """Make the conversation's workspace ready, reusing what an earlier turn left.

        `repo` None means a plain directory. Otherwise the workspace is a worktree on
        `branch` (recorded by an earlier turn) while that branch exists, else on a new
        branch named after the issue from `base` ("" for the repository's HEAD). The
        caller records the returned branch.

        Raises:
            WorkspaceFailed: The repository is unusable, the directory is in the way, or git
                failed or timed out.
        """
        path = self.path_of(conversation_id)
        with self._holding(self._conversation_slots, conversation_id):
            if repo is None:
                with _disk(f"cannot create {path}"):
                    try:  # one call in the common case: the root is there
                        path.mkdir(mode=0o700, exist_ok=True)
                    except FileNotFoundError:
                        self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
                        path.mkdir(mode=0o700, exist_ok=True)
                return Placement(path, None)
            with self._holding(self._repo_slots, str(Path(repo).resolve())):
                wanted = branch_name(identifier, title, conversation_id)
                return self._prepare_worktree(path, Path(repo), base, wanted, branch)

    def retire(self, conversation_id: str, *, repo: Path | None) -> Retired:
        """Remove the conversation's worktree if nothing in it would be lost; else keep it.

        Raises:
            WorkspaceFailed: git failed or timed out.
        """
        path = self.path_of(conversation_id)
        with self._holding(self._conversation_slots, conversation_id):
            if not path.exists() and not path.is_symlink():
                return Retired(True, "")
            if repo is None:
                return Retired(False, f"plain directory kept at {path}")
            repo = Path(repo)
            with self._holding(self._repo_slots, str(repo.resolve())):
                reason = self._repo_problem(repo)
                if reason is not None:
                    return Retired(False, f"{reason}; kept at {path}")
                if not self._is_worktree_of(path, repo):
                    return Retired(False, f"{path} is not a worktree of {repo}; kept")
                status = self._run(path, "status", "--porcelain", "--untracked-files=all")
                changed = len(status.splitlines())
                if changed:
                    files = "file" if changed == 1 else "files"
                    return Retired(False, f"{changed} changed or untracked {files}; kept at {path}")
                # No --force: git refuses on its own if something appeared since the status.
                self._run(repo, "worktree", "remove", str(path))
                self._run(repo, "worktree", "prune")
                log.info("worktree removed", extra={"path": str(path), "repo": str(repo)})
                return Retired(True, "")

    def _prepare_worktree(
        self, path: Path, repo: Path, base: str, wanted: str, branch: str | None
    ) -> Placement:
        if path.is_dir() and repo.is_dir() and self._is_worktree_of(path, repo):
            # The common case, a later turn: two git calls, not the whole repository check.
            current = self._run(path, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
            return Placement(path, current.strip() or branch)
        reason = self.check_repo(repo, base)
        if reason is not None:
            raise WorkspaceFailed(reason)
        if path.exists() or path.is_symlink():
            self._clear_leftover(path, repo)
        with _disk(f"cannot create {self._root}"):
            self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A worktree directory deleted by hand stays registered until pruned, and blocks re-adding.
        self._run(repo, "worktree", "prune")
        if branch and self._has_branch(repo, branch):
            self._run(repo, "worktree", "add", "--", str(path), branch)
            name = branch
        else:
            name = self._free_name(repo, wanted)
            start = base or "HEAD"
            # --no-track: an agent's branch must never pull from or push to its base.
            self._run(repo, "worktree", "add", "--no-track", "-b", name, "--", str(path), start)
        with _disk(f"cannot restrict {path}"):
            path.chmod(0o700)  # like a plain workspace: git made it with the umask's mode
        log.info("worktree ready", extra={"path": str(path), "repo": str(repo), "branch": name})
        return Placement(path, name)

    def _free_name(self, repo: Path, name: str) -> str:
        if not self._has_branch(repo, name):
            return name
        for _ in range(NAME_TRIES):
            candidate = f"{name}-{secrets.token_hex(2)}"
            if not self._has_branch(repo, candidate):
                return candidate
        raise WorkspaceFailed(f"no free branch name like {name} in {repo} after {NAME_TRIES} tries")

    def _repo_problem(self, repo: Path) -> str | None:
        if not repo.exists():
            return f"repo {repo} does not exist"
        if not repo.is_dir():
            return f"repo {repo} is not a directory"
        found = self._git(repo, "rev-parse", "--show-prefix")
        if found.returncode != 0:
            return f"{repo} is not a git repository"
        # A directory inside another checkout would silently use that checkout.
        if found.stdout.strip():
            return f"{repo} is inside a git repository but is not its top level"
        return None

    def _is_worktree_of(self, path: Path, repo: Path) -> bool:
        """True when `path` is the top of a worktree that shares `repo`'s git directory."""
        if not path.is_dir():
            return False
        mine = self._git(
            path, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-prefix"
        )
        lines = mine.stdout.splitlines()
        if mine.returncode != 0 or len(lines) != 2 or lines[1]:
            return False  # not in a checkout, or in a subdirectory of an enclosing one
        theirs = self._run(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
        return Path(lines[0]).resolve() == Path(theirs.strip()).resolve()

    def _has_branch(self, repo: Path, name: str) -> bool:
        return self._ok(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{name}")

    def _clear_leftover(self, path: Path, repo: Path) -> None:
        """Remove an empty leftover directory; anything else is someone's work."""
        with _disk(f"cannot clear {path}"):
            if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
                path.rmdir()
                return
        raise WorkspaceFailed(f"{path} is in the way: not empty and not a worktree of {repo}")

    # --- a planning turn's guard ---------------------------------------------------------------

    def snapshot(self, path: Path) -> Snapshot | None:
        """What a git workspace holds now (HEAD, the index, every file but ignored ones), to
        put back after a turn that must not change it; None for a plain directory."""
        if not (path / ".git").exists():
            return None
        head = self._run(path, "rev-parse", "--verify", "-q", "HEAD", check=False).strip() or None
        return Snapshot(head, self._run(path, "write-tree").strip(), self._work_tree(path, head))

    def restore(self, path: Path, snap: Snapshot) -> bool:
        """Put the workspace back as `snapshot` found it; True when something had changed.

        Commits made meanwhile leave the branch (their objects stay in the repository),
        changed and new files go back to what they were, the index too.
        """
        head = self._run(path, "rev-parse", "--verify", "-q", "HEAD", check=False).strip() or None
        if head == snap.head and self._work_tree(path, head) == snap.work:
            return False
        if snap.head and head != snap.head:
            self._run(path, "reset", "-q", "--soft", snap.head)
        with self._scratch_index(path) as index:
            env = {"GIT_INDEX_FILE": index}
            self._run(path, "read-tree", snap.work, env=env)
            self._run(path, "checkout-index", "-a", "-f", env=env)
            self._run(path, "clean", "-fdq", env=env)  # what the snapshot did not have
        self._run(path, "read-tree", snap.index)
        log.warning("workspace changes discarded", extra={"path": str(path)})
        return True

    def _work_tree(self, path: Path, head: str | None) -> str:
        """A tree object of every file in the workspace, untracked ones included."""
        with self._scratch_index(path) as index:
            env = {"GIT_INDEX_FILE": index}
            self._run(path, "read-tree", *([head] if head else ["--empty"]), env=env)
            self._run(path, "add", "-A", env=env)
            return self._run(path, "write-tree", env=env).strip()

    @contextmanager
    def _scratch_index(self, path: Path) -> Iterator[str]:
        """A throwaway index file in the repository's git directory."""
        name = f"wakeline-index-{secrets.token_hex(4)}"
        index = self._run(path, "rev-parse", "--git-path", name).strip()
        full = index if os.path.isabs(index) else str(path / index)
        try:
            yield full
        finally:
            Path(full).unlink(missing_ok=True)

    def _ok(self, cwd: Path, *args: str) -> bool:
        return self._git(cwd, *args).returncode == 0

    def _run(self, cwd: Path, *args: str, check: bool = True,
             env: dict[str, str] | None = None) -> str:
        """git's stdout; a non-zero exit raises with git's own stderr unless `check` is off."""
        done = self._git(cwd, *args, env=env)
        if check and done.returncode != 0:
            said = done.stderr.strip() or f"{self._label(args)} exited with {done.returncode}"
            raise WorkspaceFailed(said[:STDERR_MAX_CHARS])
        return done.stdout if done.returncode == 0 else ""

    def _git(self, cwd: Path, *args: str,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_GIT_VARS}
        env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", **extra)
        try:
            return subprocess.run(
                [self._git_cmd, *_NOTHING_RUNS, "-C", str(cwd), *args],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                env=env,
                timeout=self._timeout,
            )
        except subprocess.TimeoutExpired as exc:
            said = f"{self._label(args)} timed out after {self._timeout:g} s"
            raise WorkspaceFailed(said) from exc
        except OSError as exc:
            raise WorkspaceFailed(f"cannot run {self._git_cmd}: {exc.strerror or exc}") from exc

    @staticmethod
    def _label(args: tuple[str, ...]) -> str:
        return "git " + " ".join(args[:2] if args[0] == "worktree" else args[:1])

    @contextmanager
    def _holding(self, slots: dict[str, _Slot], key: str) -> Iterator[None]:
        """Hold `key`'s lock; a slot lives only while someone uses it, so the tables stay small."""
        with self._guard:
            slot = slots.setdefault(key, _Slot())
            slot.users += 1
        try:
            with slot.lock:
                yield
        finally:
            with self._guard:
                slot.users -= 1
                if slot.users == 0:
                    del slots[key]
