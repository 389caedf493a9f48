"""`[matrix]`: connections by name, routes bound to one room each, refused with the key at fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wakeline.config import parse_config
from wakeline.errors import ConfigError
from wakeline.secrets import load_secrets, scrub

CONNECTION = {"homeserver": "https://matrix.example.org", "user_id": "@me:example.org",
              "access_token_file": "secrets/matrix-me"}


def config(routes: list[dict[str, Any]], **connection: Any) -> Any:
    return parse_config({"matrix": {"connections": {"me": {**CONNECTION, **connection}},
                                    "routes": routes}}, Path("/srv"))


def test_the_contract_s_example_loads_with_its_defaults() -> None:
    c = config([{"name": "alice", "connection": "me", "room_id": "!room:example.org"}])
    conn, route = c.matrix.connections["me"], c.matrix.routes[0]
    assert (conn.device_id, route.activation, route.bridge) == ("WAKELINE", "on_event", "")
    assert c.matrix_store_path("me") == Path("/srv/var/matrix/me")
    assert parse_config({}, Path(".")).matrix.connections == {}


@pytest.mark.parametrize("routes,connection,key,reason", [
    ([{"name": "a", "connection": "nobody", "room_id": "!r"}], {}, "matrix",
     "names no configured connection 'nobody'"),
    ([{"name": "a", "connection": "me", "room_id": "!r"},
      {"name": "a", "connection": "me", "room_id": "!s"}], {}, "matrix", "names must be unique"),
    ([{"name": "a", "connection": "me", "room_id": "!r"},
      {"name": "b", "connection": "me", "room_id": "!r"}], {}, "matrix", "at most one route"),
    ([{"name": "default", "connection": "me", "room_id": "!r"}], {}, "(root)",
     "a Matrix route has the name of a [[routes]] entry: default"),
    ([{"name": "a", "connection": "me", "room_id": "#alias:x"}], {}, "matrix.routes.0.room_id",
     "should match pattern"),
    ([{"name": "a", "connection": "me", "room_id": "!r", "activation": "sometimes"}], {},
     "matrix.routes.0.activation", "'on_event' or 'on_demand'"),
    ([{"name": "a", "connection": "me", "room_id": "!r", "bridge": "bridgebot"}], {},
     "matrix.routes.0.bridge", "should match pattern"),
    ([], {"user_id": "me"}, "matrix.connections.me.user_id", "should match pattern"),
    ([], {"homeserver": "matrix.example.org"}, "matrix.connections.me.homeserver",
     "should match pattern"),
    ([], {"access_token": "syt_inline"}, "matrix.connections.me.access_token", "unknown key"),
])
def test_a_wrong_matrix_config_names_the_key(routes: list[dict[str, Any]],
                                             connection: dict[str, Any], key: str,
                                             reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(routes, **connection)
    assert caught.value.key == key and reason in caught.value.reason


def test_the_token_is_a_secret_every_scrubber_knows(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    token = "syt_bWUtYWJj_NotAShapeAnyOneKnows_0a1b2c"
    (tmp_path / "secrets" / "matrix-me").write_text(token + "\n")
    c = parse_config({"matrix": {"connections": {"me": CONNECTION}}}, tmp_path)
    secrets = load_secrets(c, {})
    assert secrets.matrix_tokens["me"].get_secret_value() == token
    assert token in secrets.values()
    assert token not in repr(secrets)
    assert scrub(f"Authorization: Bearer {token}", []) == "Authorization: Bearer [redacted]"
    assert scrub(f"the token {token} leaked", []) == "the token [redacted] leaked"
    assert scrub("an opaque one: Qx9-opaque", ["Qx9-opaque"]) == "an opaque one: [redacted]"


def test_doctor_without_the_service_checks_each_token_file(tmp_path: Path) -> None:
    from wakeline.service.checks import matrix_checks

    c = parse_config({"matrix": {"connections": {
        "me": CONNECTION, "them": {**CONNECTION, "access_token_file": "secrets/them"}}}},
        tmp_path)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "matrix-me").write_text("syt_x_y_z\n")
    (tmp_path / "secrets" / "matrix-me").chmod(0o644)
    found = {check.name: check for check in matrix_checks(c)}
    assert found["matrix me token"].ok is False and "0644" in found["matrix me token"].detail
    assert found["matrix them token"].ok is False and "missing" in found["matrix them token"].detail
    (tmp_path / "secrets" / "matrix-me").chmod(0o600)
    assert {ch.name: ch.ok for ch in matrix_checks(c)}["matrix me token"] is True
    assert matrix_checks(parse_config({}, tmp_path)) == []
