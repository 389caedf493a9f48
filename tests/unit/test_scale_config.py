"""`[scale]`: the engine, the database URL (a secret), and where the store lives."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from wakeline.config import parse_config
from wakeline.errors import ConfigError
from wakeline.scheduling.engine import store_target
from wakeline.secrets import DATABASE_URL_ENV, Secrets, load_secrets, redact


def test_local_is_the_default_and_keeps_sqlite(tmp_path: Path) -> None:
    config = parse_config({}, tmp_path)
    assert (config.scale.engine, config.scale.database_url, config.scale.host_id,
            config.scale.host_timeout_seconds) == ("local", "", "", 30)
    assert store_target(config) == config.database_path


def test_dbos_needs_a_postgresql_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"scale": {"database_url": "mysql://x/y"}}, tmp_path)
    assert err.value.key == "scale.database_url"
    config = parse_config({"scale": {"engine": "dbos"}}, tmp_path)
    with pytest.raises(ConfigError):
        store_target(config, load_secrets(config, {}))
    url = "postgresql://wl:pw-from-env-123@db:5432/wakeline"
    assert store_target(config, load_secrets(config, {DATABASE_URL_ENV: url})) == url


def test_the_environment_wins_and_the_password_is_scrubbed(tmp_path: Path) -> None:
    config = parse_config({"scale": {"engine": "dbos", "database_url":
                                     "postgresql://wl:file-pass-456@db/wakeline"}}, tmp_path)
    assert store_target(config, load_secrets(config, {})) == "postgresql://wl:file-pass-456@db/wakeline"
    secrets = load_secrets(config, {DATABASE_URL_ENV: "postgresql://wl:env-pass-789@db/wakeline"})
    assert store_target(config, secrets).endswith("env-pass-789@db/wakeline")
    assert "env-pass-789" in secrets.values()
    assert "env-pass-789" not in redact("connecting to postgresql://wl:env-pass-789@db", secrets.values())
    assert "env-pass-789" not in repr(secrets)
    # A URL without a password holds no secret to scrub.
    assert Secrets(None, None, None, database_url=SecretStr("postgresql://wl@db/x")).values() == []
