"""`wakeline init` and secret files: created 0600, never overwritten, never half-written."""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wakeline.cli import cli
from wakeline.config import Config, load_config
from wakeline.secrets import create_secret_file, load_secrets


def init(config_file: Path) -> Any:
    runner = CliRunner(env={"WAKELINE_CONFIG": None})
    return runner.invoke(cli, ["--config", str(config_file), "init"])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_a_commented_config_that_loads_and_both_secrets(tmp_path: Path) -> None:
    """init creates a commented, loadable wakeline.toml, the webhook secret and operator token."""
    config_file = tmp_path / "wakeline.toml"
    result = init(config_file)
    assert result.exit_code == 0, result.output
    text = config_file.read_text(encoding="utf-8")
    assert sum(1 for line in text.splitlines() if line.lstrip().startswith("#")) >= 3
    config = load_config(config_file, required=True)
    assert config.model_dump() == Config().model_dump()  # the template spells out the defaults
    secret = config.path(config.linear.webhook_secret_file)
    token = config.operator_token_path
    assert secret == tmp_path / "var" / "secrets" / "linear-webhook-secret"
    assert token == tmp_path / "var" / "operator.token"
    for path in (secret, token):
        assert mode(path) == 0o600
        assert len(path.read_text().strip()) >= 32
    assert secret.read_text() != token.read_text()
    loaded = load_secrets(config, {})
    assert loaded.webhook_secret is not None and loaded.operator_token is not None
    assert "created" in result.output


def test_init_without_config_option_writes_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no --config and no $WAKELINE_CONFIG, init writes ./wakeline.toml."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner(env={"WAKELINE_CONFIG": None}).invoke(cli, ["init"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "wakeline.toml").is_file()
    assert (tmp_path / "var" / "operator.token").is_file()


def test_a_second_init_keeps_the_config_and_both_secrets(tmp_path: Path) -> None:
    """Running init again overwrites nothing and says what it kept."""
    config_file = tmp_path / "wakeline.toml"
    assert init(config_file).exit_code == 0
    config = load_config(config_file, required=True)
    files = [config_file, config.path(config.linear.webhook_secret_file),
             config.operator_token_path]
    before = [p.read_bytes() for p in files]
    again = init(config_file)
    assert again.exit_code == 0, again.output
    assert [p.read_bytes() for p in files] == before
    assert again.output.count("(kept)") == 3 and "created" not in again.output


def test_init_keeps_an_edited_config_and_fills_in_missing_secrets(tmp_path: Path) -> None:
    """An existing config is kept as is; only the missing secrets are generated."""
    config_file = tmp_path / "wakeline.toml"
    config_file.write_text('state_dir = "state"\n[server]\nwebhook_port = 9999\n', encoding="utf-8")
    token = tmp_path / "state" / "operator.token"
    token.parent.mkdir()
    token.write_text("my-own-token\n")
    result = init(config_file)
    assert result.exit_code == 0, result.output
    assert config_file.read_text() == 'state_dir = "state"\n[server]\nwebhook_port = 9999\n'
    assert token.read_text() == "my-own-token\n"
    assert mode(tmp_path / "var" / "secrets" / "linear-webhook-secret") == 0o600


def test_init_with_a_broken_config_exits_2(tmp_path: Path) -> None:
    """init refuses to generate secrets for a config it cannot load."""
    config_file = tmp_path / "wakeline.toml"
    config_file.write_text("[server]\nthreads = 0\n", encoding="utf-8")
    result = init(config_file)
    assert result.exit_code == 2
    assert "server.threads" in result.stderr
    assert not (tmp_path / "var").exists()


def test_create_secret_file_never_overwrites(tmp_path: Path) -> None:
    """An existing secret file is left alone and reported as not created."""
    path = tmp_path / "s" / "secret"
    assert create_secret_file(path, "first") is True
    assert create_secret_file(path, "second") is False
    assert path.read_text() == "first\n"
    assert mode(path) == 0o600


@pytest.mark.parametrize("round_", range(5))
def test_concurrent_creators_have_exactly_one_winner_and_no_torn_file(tmp_path: Path,
                                                                      round_: int) -> None:
    """Racing create_secret_file calls: one returns True, the file is always one whole value."""
    path = tmp_path / "secrets" / "race"
    creators = 16
    values = [f"value-{n:02d}-" + "x" * 4096 for n in range(creators)]
    barrier = threading.Barrier(creators + 1)
    results: list[bool | None] = [None] * creators
    seen: set[str] = set()
    done = threading.Event()

    def create(n: int) -> None:
        barrier.wait()
        results[n] = create_secret_file(path, values[n])

    def read() -> None:
        barrier.wait()
        while not done.is_set():
            try:
                seen.add(path.read_text())
            except FileNotFoundError:
                pass

    reader = threading.Thread(target=read)
    threads = [threading.Thread(target=create, args=(n,)) for n in range(creators)]
    for t in [reader, *threads]:
        t.start()
    for t in threads:
        t.join(10)
    done.set()
    reader.join(10)
    assert results.count(True) == 1 and results.count(False) == creators - 1
    winner = values[results.index(True)]
    assert path.read_text() == winner + "\n"
    assert seen <= {winner + "\n"}, "a reader saw a partial or different secret"
    assert mode(path) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["race"], "temporary files were left behind"
