"""The sandbox part's decisions and what it makes of bwrap's exit, without running bwrap."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from wakeline.config import Config, RouteConfig, parse_config
from wakeline.errors import ConfigError
from wakeline.sandbox.part import Confined, Sandbox, _inside_env
from wakeline.sandbox.probe import Probe

WORKS = Probe("/usr/bin/bwrap", True, "works")
BROKEN = Probe("bwrap", False, "bwrap: not found", "apt-get install bubblewrap")


def config(tmp_path: Path, mode: str) -> Config:
    raw: dict[str, Any] = {"sandbox": {"mode": mode},
                           "routes": [{"name": "eng", "teams": ["ENG"], "network": "off"}]}
    return parse_config(raw, tmp_path)


def test_a_confining_sandbox_names_each_turns_network(tmp_path: Path) -> None:
    sandbox = Sandbox(config(tmp_path, "auto"), WORKS)
    try:
        decision = sandbox.decide(sandbox.config.routes[0], public=True)
        assert (decision.label, decision.refused) == ("bwrap, network=off", None)
        assert decision.route is sandbox.config.routes[0]
        inbox = sandbox.decide(RouteConfig(name="inbox"), public=False)
        assert inbox.label == "bwrap, network=open"  # a route's defaults
    finally:
        sandbox.stop()


def test_auto_without_bubblewrap_refuses_public_turns_and_notes_the_others(tmp_path: Path) -> None:
    sandbox = Sandbox(config(tmp_path, "auto"), BROKEN)
    public = sandbox.decide(sandbox.config.routes[0], public=True)
    assert public.refused is not None and "apt-get install bubblewrap" in public.refused
    private = sandbox.decide(sandbox.config.routes[0], public=False)
    assert (private.label, private.route, private.refused) == ("unconfined", None, None)
    assert private.note is not None and "runs unconfined" in private.note
    assert sandbox.api_socket is None  # nothing to serve it for
    assert sandbox.status() == {"mode": "auto", "available": False,
                                "detail": "bubblewrap cannot run here (bwrap: not found): turns "
                                          "run unconfined and public routes' turns are refused"}


def test_none_never_confines_and_required_never_starts_without_it(tmp_path: Path) -> None:
    none = Sandbox(config(tmp_path, "none"), WORKS)
    assert none.decide(none.config.routes[0], public=True).label == "unconfined"
    assert none.checks()[0].ok is True and "unconfined" in none.checks()[0].detail
    with pytest.raises(ConfigError) as info:
        Sandbox(config(tmp_path, "required"), BROKEN)
    assert info.value.key == "sandbox.bwrap"


def test_bwraps_exit_says_whether_the_agent_ran() -> None:
    assert Confined.exit_code(143) == -signal.SIGTERM  # bwrap reports a signal as 128 + it
    assert Confined.exit_code(2) == 2 and Confined.exit_code(0) == 0
    assert Confined.failure(1, "", "bwrap: Can't find source path /x: No such file") == \
        "not confined, not run: bwrap: Can't find source path /x: No such file"
    assert Confined.failure(1, "an error answer", "bwrap: said by the agent") is None
    assert Confined.failure(1, "", "the agent's own error") is None


def test_the_environment_inside_names_nothing_it_cannot_see(tmp_path: Path) -> None:
    state, home = tmp_path / "state", tmp_path / "state" / "homes" / "eng"
    inside = _inside_env({"HOME": "/home/svc", "XDG_RUNTIME_DIR": "/run/user/1000",
                          "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "CACHE": str(state / "cache"),
                          "TOOLS": "/opt/tools", "PATH": "/usr/bin:/home/svc/bin",
                          "SHOWN": str(home / "x")}, home, (state, Path("/home/svc")), (home,))
    assert inside == {"HOME": str(home), "TMPDIR": "/tmp", "TOOLS": "/opt/tools",
                      "PATH": "/usr/bin:/home/svc/bin", "SHOWN": str(home / "x")}
