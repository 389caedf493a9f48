"""A route's repository is checked before anything runs: `serve` refuses, the doctor says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner
from falcon import testing

from tests.conftest import OPERATOR_TOKEN
from wakeline.app import check_routes
from wakeline.cli import cli
from wakeline.config import Config
from wakeline.errors import ConfigError
from wakeline.http.operator import create_operator_app
from wakeline.models.inbox import Inbox
from wakeline.service.metrics import Metrics
from wakeline.models.store import Store
from wakeline.turns.tokens import TokenRegistry


def route(repo: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"name": "ops", "teams": ["OPS"], "mode": "issue", "repo": repo, **extra}]


def test_a_good_repo_passes(make_config: Callable[..., Config], repo: Path) -> None:
    config = make_config(routes=route(str(repo), default_branch="main"))
    check_routes(config)


@pytest.mark.parametrize(("where", "branch", "reason"), [
    ("missing", "", "does not exist"),
    ("plain", "", "is not a git repository"),
    ("repo", "release", "branch release does not exist"),
])
def test_a_bad_repo_names_the_key_and_the_reason(make_config: Callable[..., Config], repo: Path,
                                                 tmp_path: Path, where: str, branch: str,
                                                 reason: str) -> None:
    (tmp_path / "plain").mkdir()
    config = make_config(routes=route(str(tmp_path / where), default_branch=branch))
    with pytest.raises(ConfigError) as caught:
        check_routes(config)
    assert caught.value.key == "routes.0.repo" and reason in caught.value.reason


def test_serve_refuses_a_route_whose_repo_is_not_git(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    config = tmp_path / "wakeline.toml"
    config.write_text('[[routes]]\nname = "ops"\nteams = ["OPS"]\nmode = "issue"\nrepo = "plain"\n')
    result = CliRunner().invoke(cli, ["--config", str(config), "serve"])
    assert result.exit_code == 2
    assert "config error: routes.0.repo:" in result.output
    assert "is not a git repository" in result.output
    assert not (tmp_path / "var").exists()  # refused before creating anything


def test_the_doctor_reports_each_routes_repo(make_config: Callable[..., Config], store: Store,
                                             repo: Path, tmp_path: Path) -> None:
    config = make_config(routes=[*route(str(repo)),
                                 {"name": "gone", "teams": ["X"], "repo": str(tmp_path / "nope")}])
    app = create_operator_app(config, store, Inbox(store), TokenRegistry(OPERATOR_TOKEN),
                              store.clock, Metrics())
    client = testing.TestClient(app, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    data = client.simulate_get("/v1/doctor").json
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["route ops repo"]["ok"] is True
    assert checks["route gone repo"]["ok"] is False
    assert "does not exist" in checks["route gone repo"]["detail"]
    assert data["ok"] is False


# --- a route's repos (CONTRACT section 14) ----------------------------------------------------


def two_repos(first: str, second: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"name": "eng", "teams": ["ENG"], **extra,
             "repos": [{"name": "api", "path": first, "labels": ["backend"]},
                       {"name": "web", "path": second, "projects": ["project-web"]}]}]


def test_good_repos_pass(make_config: Callable[..., Config], tmp_path: Path) -> None:
    from tests.helpers import make_repo

    config = make_config(routes=two_repos(str(make_repo(tmp_path / "api")),
                                          str(make_repo(tmp_path / "web"))))
    check_routes(config)
    assert [r.name for r in config.routes[0].repos] == ["api", "web"]


@pytest.mark.parametrize(("routes", "key", "reason"), [
    (two_repos("a", "b", repo="c"), "routes.0.repos", "repo and repos exclude each other"),
    ([{"name": "eng", "teams": ["ENG"], "repos": [{"name": "api", "path": "a"},
                                                  {"name": "api", "path": "b"}]}],
     "routes.0.repos.1.name", "'api' is already the name of routes.0.repos.0"),
    ([{"name": "eng", "teams": ["ENG"], "repos": [{"name": "a b", "path": "a"}]}],
     "routes.0.repos.0.name", "should match pattern"),
])
def test_bad_repos_name_the_key(make_config: Callable[..., Config], routes: list[dict[str, Any]],
                                key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(routes=routes)
    assert caught.value.key == key and reason in caught.value.reason


def test_a_repos_path_that_is_not_git_names_its_key(make_config: Callable[..., Config],
                                                    repo: Path, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    config = make_config(routes=two_repos(str(repo), str(tmp_path / "plain")))
    with pytest.raises(ConfigError) as caught:
        check_routes(config)
    assert caught.value.key == "routes.0.repos.1.path"
    assert "is not a git repository" in caught.value.reason


@pytest.mark.parametrize(("repos", "message"), [
    ('repo = "api"\nrepos = [{ name = "api", path = "api" }]\n', "routes.0.repos:"),
    ('repos = [{ name = "api", path = "api" }, { name = "api", path = "plain" }]\n',
     "routes.0.repos.1.name:"),
    ('repos = [{ name = "api", path = "api" }, { name = "web", path = "plain" }]\n',
     "routes.0.repos.1.path:"),
])
def test_serve_refuses_bad_repos_with_exit_2(tmp_path: Path, repos: str, message: str) -> None:
    from tests.helpers import make_repo

    make_repo(tmp_path / "api")
    (tmp_path / "plain").mkdir()
    config = tmp_path / "wakeline.toml"
    config.write_text('[[routes]]\nname = "eng"\nteams = ["ENG"]\n' + repos)
    result = CliRunner().invoke(cli, ["--config", str(config), "serve"])
    assert result.exit_code == 2
    assert f"config error: {message}" in result.output
    assert not (tmp_path / "var").exists()


def test_the_doctor_reports_each_of_a_routes_repos(make_config: Callable[..., Config],
                                                   store: Store, repo: Path,
                                                   tmp_path: Path) -> None:
    config = make_config(routes=two_repos(str(repo), str(tmp_path / "nope")))
    app = create_operator_app(config, store, Inbox(store), TokenRegistry(OPERATOR_TOKEN),
                              store.clock, Metrics())
    client = testing.TestClient(app, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    checks = {c["name"]: c for c in client.simulate_get("/v1/doctor").json["checks"]}
    assert checks["route eng repo api"]["ok"] is True
    assert checks["route eng repo web"]["ok"] is False
    assert "routes.0.repos.1.path" in checks["route eng repo web"]["fix"]
