"""Where an agent CLI is installed: what must stay visible, read-only, in its sandbox.

The sandbox covers the service user's home and `/tmp`, where CLIs are often installed: npm's
prefix under `~/.cache` or `~/.npm-global`, nvm's node under `~/.nvm`, a pipx venv under
`~/.local`, a Claude Code binary under `~/.local/share/claude`. From the agent's executable
(as found on its PATH) this follows what it runs on: its directory and its real file's
directory, the npm prefix above a `node_modules` (a package's siblings and its platform
binaries live there), a Python venv (its `pyvenv.cfg` names the base interpreter), and the
interpreter its `#!` line names (through `env`), with that one's install directory in turn.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SHEBANG_MAX_BYTES = 256
MAX_DEPTH = 3  # an executable, its interpreter, that one's interpreter


def tool_paths(executable: Path, path_env: str) -> list[Path]:
    """The directories `executable` needs to run, as they are on this host."""
    found: list[Path] = []
    _follow(executable, path_env, found, MAX_DEPTH)
    return [p for p in dict.fromkeys(found) if p.exists()]


def _follow(executable: Path, path_env: str, found: list[Path], depth: int) -> None:
    if depth == 0:
        return
    real = Path(os.path.realpath(executable))
    found += [executable.parent, real.parent]
    for path in (executable, real):
        if "node_modules" in path.parts:
            parts = path.parts
            found.append(Path(*parts[:parts.index("node_modules")]))
    install = real.parent.parent
    if real.parent.name == "bin" and _prefix(install):
        found.append(install)  # node's or Python's install dir: lib/ is beside bin/
        home = _venv_home(install)
        if home is not None:
            found.append(home)
            if home.name == "bin":
                found.append(home.parent)
    interpreter = _shebang(real, path_env)
    if interpreter is not None:
        _follow(interpreter, path_env, found, depth - 1)


def _prefix(root: Path) -> bool:
    """Whether `root` is an interpreter's install directory (a venv, a Python or node
    prefix), not a catch-all such as `~/.local`."""
    lib = root / "lib"
    return (root / "pyvenv.cfg").is_file() or (lib / "node_modules").is_dir() or \
        any(lib.glob("python3*/os.py"))


def _venv_home(root: Path) -> Path | None:
    """A venv's base interpreter directory (`home` in its `pyvenv.cfg`)."""
    try:
        lines = (root / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip():
            return Path(os.path.realpath(value.strip()))
    return None


def _shebang(path: Path, path_env: str) -> Path | None:
    """The interpreter a script's `#!` line names (`env NAME` looked up on the PATH)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SHEBANG_MAX_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-")]
        found = shutil.which(names[0], path=path_env or os.defpath) if names else None
        return Path(found) if found else None
    return Path(words[0])
