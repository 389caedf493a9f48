"""The thread budget: what a config allows, and what a list of thread names breaks."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wakeline.config import parse_config
from wakeline.service.threads import budget, name_new_threads, over_budget, total

MATRIX = {"connections": {"me": {"homeserver": "https://matrix.example.org",
                                 "user_id": "@me:example.org",
                                 "access_token_file": "secrets/matrix-me"}}}


def test_the_default_budget_is_the_documented_sum(tmp_path: Path) -> None:
    """Two listeners (their loops and request threads), the main thread, the writer, the
    ticker, four actors, a slot and a runner per turn, the Linear pool, the janitor."""
    config = parse_config({}, tmp_path)
    assert total(budget(config)) == (1 + 32) + (1 + 8) + 1 + 1 + 1 + 4 + 2 * 4 + 8 + 1 == 66


def test_every_number_follows_its_config_key(tmp_path: Path) -> None:
    small = parse_config({"server": {"threads": 2, "ingress_threads": 3},
                          "agent": {"max_concurrent_turns": 1},
                          "linear": {"max_concurrent_requests": 1}}, tmp_path)
    assert total(budget(small)) == (1 + 3) + (1 + 2) + 1 + 1 + 1 + 4 + 2 * 1 + 1 + 1


def test_optional_parts_add_their_threads_only_when_configured(tmp_path: Path) -> None:
    plain = {k.pattern for k in budget(parse_config({}, tmp_path))}
    matrix = {k.pattern for k in budget(parse_config({"matrix": MATRIX}, tmp_path))} - plain
    assert matrix == {"matrix", r"matrix-io_\d+", "matrix-connection-.+"}
    dbos = {k.pattern for k in budget(parse_config({"scale": {"engine": "dbos"}}, tmp_path))}
    assert {"dbos", "dbos-waker", r"dbos-executor-_\d+"} <= dbos - plain
    app = {k.pattern for k in budget(parse_config({"linear": {"client_id": "c"}}, tmp_path))}
    assert app - plain == {"linear-token-renewal"}
    allow = {"routes": [{"name": "r", "teams": ["ENG"], "network": "allow",
                         "allow_hosts": ["api.example.com"]}]}
    proxy = budget(parse_config(allow, tmp_path))
    assert {k.pattern for k in proxy} - plain == {"sandbox-proxy", "sandbox-proxy-.+"}
    # A turn's proxied connections are bounded: two threads each, a few per turn.
    assert next(k.most for k in proxy if k.pattern == "sandbox-proxy-.+") == 2 * 16 * 4
    unconfined = budget(parse_config({**allow, "sandbox": {"mode": "none"}}, tmp_path))
    assert "sandbox-proxy" not in {k.pattern for k in unconfined}


def test_over_budget_names_each_unknown_thread_and_each_kind_past_its_most(
        tmp_path: Path) -> None:
    kinds = budget(parse_config({"agent": {"max_concurrent_turns": 1}}, tmp_path))
    fine = ["MainThread", "ingress-request-0", "turn-slot-0-cv_1", "turn-runner_0"]
    assert over_budget(fine, kinds) == []
    problems = over_budget([*fine, "Thread-7 (poll)", "turn-runner_1"], kinds)
    assert problems == [
        "thread 'Thread-7 (poll)' is in no budget",
        r"2 threads 'turn-runner_\\d+' (at most 1): ['turn-runner_0', 'turn-runner_1']",
    ]


def test_a_library_s_unnamed_threads_are_named_after_their_owner() -> None:
    before = {t.ident for t in threading.enumerate()}
    release = threading.Event()

    def poll() -> None:
        release.wait(5)

    mine = threading.Thread(target=poll)
    named = threading.Thread(target=poll, name="kept")
    for thread in (mine, named):
        thread.start()
    try:
        name_new_threads(before, "lib")
        assert (mine.name, named.name) == ("lib-poll", "kept")
    finally:
        release.set()
        for thread in (mine, named):
            thread.join(5)


@pytest.mark.parametrize("name", ["ingress-request-31", "operator-request-0", "linear_7"])
def test_pool_threads_match_their_kind(tmp_path: Path, name: str) -> None:
    assert over_budget([name], budget(parse_config({}, tmp_path))) == []
