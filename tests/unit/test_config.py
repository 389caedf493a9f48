"""The config: embedded defaults, every contract key, strict validation with dotted keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wakeline.cli import cli
from wakeline.config import Config, config_path, load_config
from wakeline.errors import ConfigError

# The key list of CONTRACT section 1, with a non-default value wherever that is possible.
CONTRACT_TOML = """\
state_dir = "data"

[server]
webhook_host = "127.0.0.2"
webhook_port = 9787
operator_host = "127.0.0.3"
operator_port = 9788
threads = 3
max_body_bytes = 2048

[linear]
webhook_secret_file = "secrets/hook"
api_key_file = "/etc/wakeline/key"
api_url = "https://linear.example/graphql"
organization_id = "org-1"
freshness_seconds = 30
echo_window_seconds = 45
owner_user_ids = ["u-1", "u-2"]
owner_emails = ["me@example.com"]

[inbox]
following = true

[store]
keep_days = 7.5
dedupe_hours = 48

[agent]
command = ["claude", "-p"]
timeout_seconds = 600
heartbeat_seconds = 120
max_concurrent_turns = 2

[[routes]]
name = "eng"
teams = ["ENG", "WEB"]
mode = "agent"
projects = []
repo = "/src/app"
done_state_id = "state-done"
proposed_state_id = "state-proposed"
trust = "private"
reply = "comment"

[[routes]]
name = "ops"
teams = ["OPS"]
mode = "issue"
projects = ["proj-1"]
trust = "public"
reply = "none"
"""


def write(tmp_path: Path, text: str, name: str = "wakeline.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), required=True)
    return info.value


def test_no_file_means_the_embedded_defaults(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing (not required) config file loads the defaults, rooted in the working directory."""
    monkeypatch.chdir(tmp_path)
    config = load_config(tmp_path / "absent.toml")
    assert config.model_dump() == Config().model_dump()
    assert config.server.webhook_port == 8787 and config.server.operator_port == 8788
    assert config.server.operator_host == "127.0.0.1"
    assert config.server.max_body_bytes == 1_048_576
    assert config.linear.freshness_seconds == 60 and config.linear.echo_window_seconds == 90
    assert config.inbox.following is False
    assert [(r.name, r.teams, r.mode, r.trust, r.reply) for r in config.routes] == [
        ("default", ["ENG"], "agent", "private", "comment")
    ]
    assert config.state_path == tmp_path / "var"


def test_an_explicit_config_path_must_exist(tmp_path: Path) -> None:
    """`required=True` (an explicit --config) refuses a missing file."""
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml", required=True)


def test_every_contract_key_parses(tmp_path: Path) -> None:
    """Each key of CONTRACT section 1 is accepted and read as written."""
    config = load_config(write(tmp_path, CONTRACT_TOML), required=True)
    s, lin, agent = config.server, config.linear, config.agent
    assert (s.webhook_host, s.webhook_port, s.operator_host, s.operator_port, s.threads,
            s.max_body_bytes) == ("127.0.0.2", 9787, "127.0.0.3", 9788, 3, 2048)
    assert lin.api_url == "https://linear.example/graphql" and lin.organization_id == "org-1"
    assert (lin.freshness_seconds, lin.echo_window_seconds) == (30, 45)
    assert lin.owner_user_ids == ["u-1", "u-2"] and lin.owner_emails == ["me@example.com"]
    assert config.inbox.following is True
    assert (config.store.keep_days, config.store.dedupe_hours) == (7.5, 48.0)
    assert agent.command == ["claude", "-p"]
    assert (agent.timeout_seconds, agent.heartbeat_seconds,
            agent.max_concurrent_turns) == (600, 120, 2)
    eng, ops = config.routes
    assert (eng.name, eng.teams, eng.mode, eng.repo, eng.done_state_id, eng.proposed_state_id) == (
        "eng", ["ENG", "WEB"], "agent", "/src/app", "state-done", "state-proposed")
    assert (ops.mode, ops.projects, ops.trust, ops.reply) == ("issue", ["proj-1"], "public", "none")
    assert config.route_for_team("WEB") is eng and config.route_for_team("OPS") is ops
    assert config.route_for_team("XYZ") is None


def test_relative_paths_resolve_against_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """state_dir and secret files are relative to the config file, not the working directory."""
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    write(conf_dir, CONTRACT_TOML)
    config = load_config(Path("etc") / "wakeline.toml")
    assert config.state_path == conf_dir / "data"
    assert config.database_path == conf_dir / "data" / "wakeline.db"
    assert config.operator_token_path == conf_dir / "data" / "operator.token"
    assert config.path(config.linear.webhook_secret_file) == conf_dir / "secrets" / "hook"
    assert config.path(config.linear.api_key_file) == Path("/etc/wakeline/key")  # absolute stays


def test_config_path_prefers_the_option_then_the_environment_then_the_default() -> None:
    """--config wins over $WAKELINE_CONFIG, which wins over ./wakeline.toml."""
    env = {"WAKELINE_CONFIG": "/env/w.toml"}
    assert config_path("/opt/w.toml", env) == Path("/opt/w.toml")
    assert config_path(None, env) == Path("/env/w.toml")
    assert config_path(None, {}) == Path("wakeline.toml")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('surprise = 1\n', "surprise"),
        ('base_dir = "/"\n', "base_dir"),
        ('[server]\nwebhook_prot = 1\n', "server.webhook_prot"),
        ('[linear]\nwebhook_secret = "inline"\n', "linear.webhook_secret"),
        ('[[routes]]\nname = "a"\nteam = ["ENG"]\n', "routes.0.team"),
        ('[[routes]]\nname = "a"\n[[routes]]\nname = "b"\nbogus = true\n', "routes.1.bogus"),
        ('[nonsense]\nx = 1\n', "nonsense"),
    ],
)
def test_unknown_keys_are_refused_by_dotted_name(tmp_path: Path, text: str, key: str) -> None:
    """An unknown key anywhere stops loading, naming the key."""
    err = error_of(tmp_path, text)
    assert (err.key, err.reason) == (key, "unknown key")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[server]\nwebhook_port = 70000\n", "server.webhook_port"),
        ("[server]\noperator_port = -1\n", "server.operator_port"),
        ("[server]\nthreads = 0\n", "server.threads"),
        ('[server]\nthreads = "many"\n', "server.threads"),
        ("[server]\nmax_body_bytes = 10\n", "server.max_body_bytes"),
        ("[linear]\nfreshness_seconds = 0\n", "linear.freshness_seconds"),
        ('[inbox]\nfollowing = "maybe"\n', "inbox.following"),
        ('[inbox]\nfollowing = "yes"\n', "inbox.following"),
        ('[server]\nwebhook_port = "8787"\n', "server.webhook_port"),
        ("[agent]\ntimeout_seconds = 1.5\n", "agent.timeout_seconds"),
        ("[agent]\ncommand = []\n", "agent.command"),
        ('log_level = "LOUD"\n', "log_level"),
        ('[[routes]]\nname = "a"\nmode = "x"\n', "routes.0.mode"),
        ('[[routes]]\nname = "a"\ntrust = "x"\n', "routes.0.trust"),
        ('[[routes]]\nname = "a"\n[[routes]]\nname = "b"\nreply = "x"\n', "routes.1.reply"),
        ('[[routes]]\nteams = ["ENG"]\n', "routes.0.name"),
        ('[[routes]]\nname = "a"\n[[routes]]\nname = "a"\n', "routes"),
        ("[store]\nkeep_days = 0\n", "store.keep_days"),
        ("[store]\nkeep_days = -1\n", "store.keep_days"),
        ("[store]\nkeep_days = 3651\n", "store.keep_days"),
        ('[store]\nkeep_days = "30"\n', "store.keep_days"),
        ("[store]\ndedupe_hours = 0\n", "store.dedupe_hours"),
    ],
)
def test_bad_values_are_refused_by_dotted_name(tmp_path: Path, text: str, key: str) -> None:
    """A bad value stops loading, naming the key and the reason."""
    err = error_of(tmp_path, text)
    assert err.key == key
    assert err.reason and err.reason != "unknown key"


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    """A file that is not TOML is refused, naming the file."""
    err = error_of(tmp_path, "[server\nport = \n")
    assert "not valid TOML" in err.reason
    assert err.key.endswith("wakeline.toml")


# --- through the CLI: exit code 2 and the dotted key ---------------------------------------------


def run(*args: str, env: dict[str, Any] | None = None) -> Any:
    return CliRunner(env={"WAKELINE_CONFIG": None, **(env or {})}).invoke(cli, list(args))


def test_cli_with_a_bad_value_exits_2_naming_the_key(tmp_path: Path) -> None:
    """`wakeline --config bad.toml status` exits 2 and prints the dotted key."""
    bad = write(tmp_path, "[server]\nwebhook_port = 70000\n", "bad.toml")
    result = run("--config", str(bad), "status")
    assert result.exit_code == 2
    assert "server.webhook_port" in result.stderr


def test_serve_with_a_bad_keep_days_stops_with_exit_2_naming_the_key(tmp_path: Path) -> None:
    """A bad `[store] keep_days` stops start-up, as every config error does."""
    bad = write(tmp_path, "[store]\nkeep_days = 0\n", "bad.toml")
    result = run("--config", str(bad), "serve")
    assert result.exit_code == 2
    assert "store.keep_days" in result.stderr
    assert not (tmp_path / "var").exists()  # nothing was created


def test_store_keeps_fractions_of_a_day(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[store]\nkeep_days = 0.25\ndedupe_hours = 0.5\n"))
    assert (config.store.keep_days, config.store.dedupe_hours) == (0.25, 0.5)
    assert (Config().store.keep_days, Config().store.dedupe_hours) == (30.0, 24.0)


def test_cli_with_an_unknown_route_key_exits_2_naming_the_key(tmp_path: Path) -> None:
    """An unknown key inside [[routes]] is reported as routes.N.key."""
    bad = write(tmp_path, '[[routes]]\nname = "a"\nmood = "x"\n', "bad.toml")
    result = run("--config", str(bad), "status")
    assert result.exit_code == 2
    assert "routes.0.mood" in result.stderr and "unknown key" in result.stderr


def test_cli_with_invalid_toml_exits_2(tmp_path: Path) -> None:
    """A config that is not TOML exits 2 before anything else happens."""
    bad = write(tmp_path, "this is = = not toml\n", "bad.toml")
    result = run("--config", str(bad), "status")
    assert result.exit_code == 2
    assert "not valid TOML" in result.stderr


def test_cli_reads_the_config_from_the_environment(tmp_path: Path) -> None:
    """$WAKELINE_CONFIG is used when --config is not given."""
    bad = write(tmp_path, "[server]\nthreads = 0\n", "env.toml")
    result = run("status", env={"WAKELINE_CONFIG": str(bad)})
    assert result.exit_code == 2
    assert "server.threads" in result.stderr


def test_cli_with_a_missing_explicit_config_exits_2(tmp_path: Path) -> None:
    """An explicit --config that does not exist is a usage error, not the defaults."""
    result = run("--config", str(tmp_path / "absent.toml"), "status")
    assert result.exit_code == 2
    assert "no such file" in result.stderr
