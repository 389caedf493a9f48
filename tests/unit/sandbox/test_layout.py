"""The bubblewrap argv of a turn: what is covered, shown, writable and hidden, in that order.

The order is the design (a later mount covers an earlier one), so it is checked position by
position; what each mount does to an agent is checked from the outside, with real agents, in
tests/integration/actors/test_sandbox_*.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wakeline.errors import WorkspaceFailed
from wakeline.sandbox.gitdirs import DEV_NULL, worktree_dirs
from wakeline.sandbox.layout import Layout, bwrap_argv
from wakeline.sandbox.tools import tool_paths
from wakeline.turns.workspaces import Workspaces

STATE = Path("/srv/wl/state")
WORKSPACE = STATE / "workspaces" / "cv_1"
HOME = STATE / "homes" / "eng"


def layout(**kw: object) -> Layout:
    base: dict[str, object] = {
        "workspace": WORKSPACE, "home": HOME, "network": "off",
        "hidden": (STATE, Path("/home/svc")), "secrets": (Path("/etc/wl/wakeline.toml"),),
        "tools": (Path("/home/svc/.pyenv/versions/3.11"), Path("/usr/lib/python3")),
        "writable": (Path("/srv/cache"),)}
    base.update(kw)
    return Layout(**base)  # type: ignore[arg-type]


def pairs(argv: list[str]) -> list[tuple[str, ...]]:
    """The mount options as (option, args...) in order."""
    takes = {"--ro-bind": 2, "--bind": 2, "--tmpfs": 1, "--remount-ro": 1, "--dev": 1,
             "--proc": 1, "--chdir": 1, "--uid": 1, "--gid": 1, "--cap-drop": 1}
    out, i = [], 1
    while argv[i] != "--":
        n = takes.get(argv[i], 0)
        out.append(tuple(argv[i:i + 1 + n]))
        i += 1 + n
    return out


def at(steps: list[tuple[str, ...]], *step: str) -> int:
    return steps.index(tuple(step))


def test_what_is_covered_comes_first_then_tools_then_writable_then_secrets_are_hidden() -> None:
    steps = pairs(bwrap_argv("bwrap", layout(), ["agent", "-x"]))
    root = at(steps, "--ro-bind", "/", "/")
    tmp = at(steps, "--tmpfs", "/tmp")
    state = at(steps, "--tmpfs", str(STATE))
    home = at(steps, "--tmpfs", "/home/svc")
    tool = at(steps, "--ro-bind", "/home/svc/.pyenv/versions/3.11", "/home/svc/.pyenv/versions/3.11")
    workspace = at(steps, "--bind", str(WORKSPACE), str(WORKSPACE))
    route_home = at(steps, "--bind", str(HOME), str(HOME))
    cache = at(steps, "--bind", "/srv/cache", "/srv/cache")
    secret = at(steps, "--ro-bind", str(DEV_NULL), "/etc/wl/wakeline.toml")
    sealed = at(steps, "--remount-ro", str(STATE))
    assert root < tmp < state < tool < workspace < route_home < cache < secret < sealed
    assert home < tool
    assert ("--tmpfs", "/run") in steps and ("--remount-ro", "/run") in steps
    assert ("--remount-ro", "/tmp") not in steps  # the private /tmp stays writable
    # /usr is the host's, read-only already: only what a covered directory hides comes back.
    assert not any(s[0] == "--ro-bind" and s[1] == "/usr/lib/python3" for s in steps)


def test_every_turn_gets_its_own_namespaces_and_dies_with_wakeline() -> None:
    argv = bwrap_argv("/usr/bin/bwrap", layout(), ["agent", "-x"])
    for option in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
                   "--new-session", "--unshare-net"):
        assert option in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-3:] == ["--", "agent", "-x"]
    assert argv[argv.index("--chdir") + 1] == str(WORKSPACE)
    assert ("--uid" in argv) == (os.getuid() == 0)  # root inside would break inner sandboxes


def test_only_open_keeps_the_hosts_network() -> None:
    assert "--unshare-net" not in bwrap_argv("bwrap", layout(network="open"), ["a"])
    assert "--unshare-net" in bwrap_argv("bwrap", layout(network="allow"), ["a"])


def test_a_hidden_directory_inside_a_tool_directory_is_covered_again() -> None:
    tool = Path("/home/svc/wl")
    steps = pairs(bwrap_argv("bwrap", layout(hidden=(tool / "var", Path("/home/svc")),
                                             tools=(tool,), workspace=tool / "var" / "w",
                                             home=tool / "var" / "h"), ["a"]))
    shown = at(steps, "--ro-bind", str(tool), str(tool))
    again = [i for i, s in enumerate(steps) if s == ("--tmpfs", str(tool / "var"))]
    assert at(steps, "--tmpfs", "/home/svc") < shown  # the home covers it first
    assert len(again) == 1 and shown < again[0] < at(
        steps, "--bind", str(tool / "var" / "w"), str(tool / "var" / "w"))


def test_a_worktree_gets_what_git_commit_needs_and_never_the_repositorys_config(
        repo: Path, tmp_path: Path) -> None:
    workspaces = Workspaces(tmp_path / "workspaces")
    placement = workspaces.prepare("cv_1", repo=repo, identifier="ENG-1", title="Fix it")
    common = (repo / ".git").resolve()
    own = common / "worktrees" / "cv_1"
    dirs = worktree_dirs(placement.path, repo)
    assert set(dirs.writable) == {common / "objects", common / "refs", common / "logs", own}
    pinned = {target: source for source, target in dirs.pinned}
    assert pinned[placement.path / ".git"] == placement.path / ".git"
    assert pinned[own / "commondir"] == own / "commondir"
    assert pinned[own / "config.worktree"] == DEV_NULL  # none yet: an empty one, read-only
    assert {common / "config", common / "hooks"} <= set(dirs.protected)
    steps = pairs(bwrap_argv("bwrap", layout(workspace=placement.path, git=dirs), ["a"]))
    objects = at(steps, "--bind", str(common / "objects"), str(common / "objects"))
    assert objects < at(steps, "--ro-bind", str(common / "hooks"), str(common / "hooks"))
    assert objects < at(steps, "--ro-bind", str(own / "commondir"), str(own / "commondir"))


def test_a_worktree_that_points_elsewhere_is_not_confined(repo: Path, tmp_path: Path) -> None:
    workspaces = Workspaces(tmp_path / "workspaces")
    placement = workspaces.prepare("cv_1", repo=repo, identifier="ENG-1", title="Fix it")
    fake = tmp_path / "fake-gitdir"
    fake.mkdir()
    (placement.path / ".git").write_text(f"gitdir: {fake}\n")
    with pytest.raises(WorkspaceFailed, match="does not point into"):
        worktree_dirs(placement.path, repo)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorkspaceFailed):
        worktree_dirs(plain, repo)


def test_an_npm_cli_brings_its_prefix_and_the_node_its_shebang_names(tmp_path: Path) -> None:
    prefix = tmp_path / "npm-prefix"
    package = prefix / "node_modules" / "@acme" / "cli" / "bin"
    package.mkdir(parents=True)
    script = package / "cli.js"
    script.write_text("#!/usr/bin/env node\n")
    bin_dir = prefix / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "acme").symlink_to(script)
    node = tmp_path / "nvm" / "versions" / "v20" / "bin" / "node"
    node.parent.mkdir(parents=True)
    (node.parent.parent / "lib" / "node_modules").mkdir(parents=True)
    node.write_text("")
    node.chmod(0o755)
    found = tool_paths(bin_dir / "acme", str(node.parent))
    assert {bin_dir, package, prefix, node.parent, node.parent.parent} <= set(found)


def test_a_scripts_bin_directory_is_not_taken_for_an_install(tmp_path: Path) -> None:
    local = tmp_path / ".local"
    tool = local / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    (local / "share" / "keyrings").mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    assert local not in tool_paths(tool, "/usr/bin:/bin")  # not ~/.local whole
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {local / 'bin'}\n")
    (venv / "bin" / "aider").write_text(f"#!{venv / 'bin' / 'python'}\n")
    assert {venv, local / "bin"} <= set(tool_paths(venv / "bin" / "aider", ""))
