"""Doctor checks that need no service: routes, agent commands, ports, disk; and each says a fix."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Callable

from click.testing import CliRunner

from tests.helpers import free_port
from wakeline.service.checks import command_checks, disk_check, local_checks, port_checks, route_checks
from wakeline.cli import cli
from wakeline.config import Config

PROJECT = "5b1d0c2e-7a4d-4f7e-9d1a-000000000001"


def by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_well_formed_routes_pass(make_config: Callable[..., Config]) -> None:
    config = make_config(routes=[{"name": "ops", "teams": ["OPS", "WEB2"], "mode": "issue",
                                  "projects": [PROJECT], "done_state_id": PROJECT}])
    [check] = route_checks(config)
    assert check.ok and check.detail == f"teams OPS, WEB2, mode issue, projects {PROJECT}"


def test_route_mistakes_are_named_with_a_fix(make_config: Callable[..., Config]) -> None:
    config = make_config(routes=[
        {"name": "none", "teams": []},
        {"name": "lower", "teams": ["eng"], "projects": ["Backend"], "done_state_id": "Done"},
    ])
    checks = by_name(route_checks(config))
    assert not checks["route none"].ok and "routes.0.teams" in checks["route none"].fix
    lower = checks["route lower"]
    assert not lower.ok
    for problem in ("team 'eng' is not a team key", "project 'Backend' is not a Linear project id",
                    "has projects but mode", "done_state_id 'Done' is not a workflow state id"):
        assert problem in lower.detail
    assert "ENG in ENG-123" in lower.fix and "projects { nodes" in lower.fix


def test_agent_commands_must_exist_and_run(make_config: Callable[..., Config], tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n")
    config = make_config(agent={"command": ["definitely-not-installed-agent"]},
                         routes=[{"name": "a", "teams": ["A"], "command": [str(script)]},
                                 {"name": "b", "teams": ["B"], "command": ["python", "-V"]}])
    checks = by_name(command_checks(config))
    assert not checks["agent.command"].ok and "is not found" in checks["agent.command"].detail
    assert not checks["routes.0.command"].ok and checks["routes.0.command"].fix == f"chmod +x {script}"
    assert checks["routes.1.command"].ok
    script.chmod(0o755)
    assert by_name(command_checks(config))["routes.0.command"].ok


def test_a_port_in_use_is_reported(make_config: Callable[..., Config]) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        config = make_config(server={"webhook_port": port, "webhook_host": "127.0.0.1"})
        checks = by_name(port_checks(config))
    assert not checks["server.webhook_port"].ok and "server.webhook_port" in checks["server.webhook_port"].fix
    assert checks["server.operator_port"].ok  # 0: picked at start


def test_disk_space_is_measured_where_the_state_will_live(make_config: Callable[..., Config]) -> None:
    check = disk_check(make_config())
    assert check.ok and "GiB free at" in check.detail


def test_doctor_without_a_service_checks_the_config_and_exits_3(tmp_path: Path) -> None:
    config = tmp_path / "wakeline.toml"
    config.write_text(f'[server]\noperator_port = {free_port()}\n[[routes]]\nname = "x"\nteams = ["x"]\n')
    result = CliRunner().invoke(cli, ["--config", str(config), "doctor"], env={"WAKELINE_CONFIG": None})
    assert result.exit_code == 3
    assert "✗ route x: team 'x' is not a team key" in result.stdout
    assert "    fix: use the key from issue identifiers" in result.stdout
    assert "start it with `wakeline serve`" in result.stderr
    assert {c.name for c in local_checks(Config(base_dir=tmp_path))} >= {"agent.command", "disk"}
