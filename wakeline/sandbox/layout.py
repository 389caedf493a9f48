"""What one confined turn sees and may write, and the bubblewrap argv that makes it so.

The order of bwrap's mount options is the whole design, because a later mount covers an
earlier one:

1. the host's root, read-only; a fresh `/dev` and `/proc` (of the turn's own PID namespace);
2. empty file systems over what must not be seen: the host's `/tmp`, `/var/tmp` and `/run`
   (their Unix sockets too: a docker or PostgreSQL socket reaches its daemon from any network
   namespace), the service user's home and the state dir;
3. read-only, what the agent runs on, wherever it lives (under the home, or `/tmp`):
   wakeline's interpreter and package, the agent CLI's install directory;
4. the hidden directories again where a tool directory holds one;
5. writable: the workspace, the route's home, its `writable` paths, what git needs;
6. read-only again: the repository's config and hooks, and the files that tie a worktree to
   its repository, whatever a writable path above covers;
7. `/dev/null` over the config file and every secret file, last, so nothing above shows one;
8. the covering file systems made read-only (all but `/tmp` and `/var/tmp`).

No socket of wakeline's is bound in: under `network = "off"`/`"allow"` the fork server listens
inside the turn's network namespace for its API and proxy (`netns.py`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wakeline.sandbox.gitdirs import DEV_NULL, GitDirs

NOBODY = 65534
SCRATCH = (Path("/tmp"), Path("/var/tmp"))  # private, empty and writable
COVERED = (Path("/run"),)  # private, empty and read-only (a resolver's files come back)
RESOLVER = Path("/run/systemd/resolve")  # /etc/resolv.conf points here on systemd-resolved hosts


@dataclass(frozen=True)
class Layout:
    """Everything that decides one turn's mounts; built by the sandbox part, per turn."""

    workspace: Path
    home: Path
    network: str  # "open", "off" or "allow"
    hidden: tuple[Path, ...]  # directories covered: the state dir, the service user's home
    secrets: tuple[Path, ...]  # files covered: the config file, every secret file
    tools: tuple[Path, ...]  # read-only wherever they are
    writable: tuple[Path, ...] = ()
    git: GitDirs | None = None


def bwrap_argv(bwrap: str, layout: Layout, command: Sequence[str]) -> list[str]:
    """`bwrap ... -- command`: the turn's whole process tree confined as `layout` says."""
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if os.getuid() == 0:
        # Root in a namespace without capabilities is neither: a CLI's own bwrap (its inner
        # sandbox) takes root's path there and fails to map its user. As `nobody` it works.
        argv += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    if layout.network != "open":
        argv.append("--unshare-net")  # bwrap brings up the namespace's loopback
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in SCRATCH:
        argv += ["--tmpfs", str(path)]
    covered = [*COVERED, *_outermost(layout.hidden)]
    for path in covered:
        argv += ["--tmpfs", str(path)]
    if layout.network == "open" and RESOLVER.is_dir():
        argv += ["--ro-bind", str(RESOLVER), str(RESOLVER)]
    # Only what a covering file system hides needs binding back.
    tools = _outermost([t for t in layout.tools
                        if any(within(t, c) for c in (*SCRATCH, *covered))])
    for path in tools:
        argv += ["--ro-bind", str(path), str(path)]
    # A tool directory may hold a hidden one: cover it again.
    again = [h for h in layout.hidden if any(within(h, tool) for tool in tools)]
    for path in again:
        argv += ["--tmpfs", str(path)]
    git = layout.git
    for path in (layout.workspace, layout.home, *layout.writable, *(git.writable if git else ())):
        argv += ["--bind", str(path), str(path)]
    if git is not None:
        for source, target in git.pinned:
            argv += ["--ro-bind", str(source), str(target)]
        for path in git.protected:
            argv += ["--ro-bind", str(path), str(path)]
    for path in layout.secrets:
        argv += ["--ro-bind", str(DEV_NULL), str(path)]
    for path in (*covered, *again):
        argv += ["--remount-ro", str(path)]
    argv += ["--chdir", str(layout.workspace), "--", *command]
    return argv


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """`paths` without repeats and without any that another one holds, shortest first."""
    out: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(within(path, kept) for kept in out):
            out.append(path)
    return out


def unseen(hidden: Sequence[Path]) -> tuple[Path, ...]:
    """Every directory a sandbox covers: the hidden ones, the scratch ones, `/run`."""
    return (*SCRATCH, *COVERED, *hidden)


def within(path: Path | str, parent: Path | str) -> bool:
    """Whether `path` is `parent` or lies under it (both absolute and normalised)."""
    inner, outer = str(path), str(parent)
    return inner == outer or inner.startswith(outer if outer.endswith("/") else outer + "/")
