"""`[sandbox]` and a route's network, allow_hosts, home and writable (CONTRACT section 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wakeline.cli import cli
from wakeline.config import load_config
from wakeline.errors import ConfigError


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "wakeline.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, required=True)


def error_of(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return info.value


def test_the_defaults_confine_when_they_can_with_the_hosts_network(tmp_path: Path) -> None:
    config = load(tmp_path, '[[routes]]\nname = "eng"\nteams = ["ENG"]\n')
    assert (config.sandbox.mode, config.sandbox.bwrap) == ("auto", "bwrap")  # type: ignore[attr-defined]
    route = config.routes[0]  # type: ignore[attr-defined]
    assert (route.network, route.allow_hosts, route.home, route.writable) == ("open", [], "", [])
    assert config.route_home(route) == tmp_path / "var" / "homes" / "eng"  # type: ignore[attr-defined]
    assert config.source == tmp_path / "wakeline.toml"  # type: ignore[attr-defined]


def test_every_sandbox_key_parses(tmp_path: Path) -> None:
    config = load(tmp_path, """\
[sandbox]
mode = "required"
bwrap = "/usr/local/bin/bwrap"

[[routes]]
name = "eng"
teams = ["ENG"]
network = "allow"
allow_hosts = ["api.anthropic.com", "Models.Example.com:8443"]
home = "/srv/agent-homes/eng"
writable = ["/srv/cache"]
""")
    route = config.routes[0]  # type: ignore[attr-defined]
    assert config.sandbox.mode == "required"  # type: ignore[attr-defined]
    assert route.allow_hosts == ["api.anthropic.com", "models.example.com:8443"]
    assert config.route_home(route) == Path("/srv/agent-homes/eng")  # type: ignore[attr-defined]


def test_a_route_name_that_is_no_file_name_gets_a_home_named_by_its_hash(tmp_path: Path) -> None:
    config = load(tmp_path, '[[routes]]\nname = "../../etc"\nteams = ["ENG"]\n')
    home = config.route_home(config.routes[0])  # type: ignore[attr-defined]
    assert home.parent == tmp_path / "var" / "homes" and home.name.startswith("route-")


@pytest.mark.parametrize(("text", "key", "said"), [
    ('[sandbox]\nmode = "maybe"\n', "sandbox.mode", "auto"),
    ('[sandbox]\nbwrap = ""\n', "sandbox.bwrap", "at least 1"),
    ('[[routes]]\nname = "a"\nnetwork = "some"\n', "routes.0.network", "open"),
    ('[[routes]]\nname = "a"\nnetwork = "allow"\nallow_hosts = ["ok.example", "https://x.example"]\n',
     "routes.0.allow_hosts.1", "not a host name"),
    ('[[routes]]\nname = "a"\nnetwork = "allow"\nallow_hosts = ["x.example:99999"]\n',
     "routes.0.allow_hosts.0", "port"),
    ('[[routes]]\nname = "a"\nallow_hosts = ["api.openai.com"]\n', "routes.0.allow_hosts",
     'network = "allow"'),
    ('[[routes]]\nname = "a"\nnetwork = "off"\nallow_hosts = ["api.openai.com"]\n',
     "routes.0.allow_hosts", 'network = "allow"'),
])
def test_bad_sandbox_values_are_refused_by_dotted_name(tmp_path: Path, text: str, key: str,
                                                       said: str) -> None:
    err = error_of(tmp_path, text)
    assert err.key == key and said in err.reason


@pytest.mark.parametrize(("line", "key"), [
    ('home = "{var}/journal"', "routes.0.home"),  # inside the state dir, not under homes/
    ('home = "{root}"', "routes.0.home"),  # holds the state dir
    ('writable = ["{var}"]', "routes.0.writable.0"),
    ('writable = ["/tmp/elsewhere", "{var}/workspaces"]', "routes.0.writable.1"),
    ('writable = ["{root}/secrets"]', "routes.0.writable.0"),  # holds the API key file
    ('writable = ["{root}/conf"]', "routes.0.writable.0"),  # holds the config file itself
])
def test_a_home_or_writable_path_that_reaches_the_state_or_a_secret_is_refused(
        tmp_path: Path, line: str, key: str) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "wakeline.toml"
    path.write_text(f'state_dir = "{tmp_path / "var"}"\n'
                    f'[linear]\napi_key_file = "{tmp_path / "secrets" / "key"}"\n'
                    '[[routes]]\nname = "eng"\n'
                    + line.format(var=tmp_path / "var", root=tmp_path) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, required=True)
    assert info.value.key == key, info.value


def test_a_home_shared_under_the_state_dirs_homes_is_fine(tmp_path: Path) -> None:
    config = load(tmp_path, '[[routes]]\nname = "eng"\nhome = "var/homes/shared"\n'
                            '[[routes]]\nname = "ops"\nhome = "var/homes/shared"\n')
    assert config.route_home(config.routes[1]) == tmp_path / "var" / "homes" / "shared"  # type: ignore[attr-defined]


def test_serve_with_a_bad_allow_host_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "wakeline.toml"
    path.write_text('[[routes]]\nname = "a"\nnetwork = "allow"\nallow_hosts = ["*.example.com"]\n')
    result = CliRunner().invoke(cli, ["--config", str(path), "serve"])
    assert result.exit_code == 2
    assert "routes.0.allow_hosts.0" in result.output


def test_every_secret_file_the_config_names_is_known(tmp_path: Path) -> None:
    """What a confined turn must never read: each `*_file` key, in any section, and the
    operator's and the Linear app's token files."""
    config = load(tmp_path, """\
[linear]
api_key_file = "/etc/wl/key"
[discord]
token_file = "/etc/wl/discord"
[matrix.connections.me]
homeserver = "https://matrix.example.org"
user_id = "@me:example.org"
access_token_file = "/etc/wl/matrix-me"
""")
    files = dict(config.secret_files())  # type: ignore[attr-defined]
    assert files["linear.api_key_file"] == Path("/etc/wl/key")
    assert files["linear.webhook_secret_file"] == tmp_path / "var/secrets/linear-webhook-secret"
    assert files["linear.client_secret_file"] == tmp_path / "var/secrets/linear-client-secret"
    assert files["discord.token_file"] == Path("/etc/wl/discord")
    assert files["matrix.connections.me.access_token_file"] == Path("/etc/wl/matrix-me")
    assert files["operator token"] == tmp_path / "var" / "operator.token"
    assert files["linear app token"] == tmp_path / "var" / "secrets" / "linear-oauth.json"
