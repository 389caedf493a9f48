"""`kill -9` between a terminal delivery and its archive: the restart archives it, once.

A real `wakeline serve` child with a route whose parent channel lives on the fake Discord
(REST and Gateway in this test process). An issue opens (its thread is made and answered),
then closes; the fake refuses every archive, so the terminal intent is durable while the
thread is still open when serve is SIGKILLed. After the restart the control's start-up
reapplies the terminal intent: the thread is archived and locked by exactly one successful
edit, the closing line is not said twice, and a later comment neither posts nor unarchives.
"""

from __future__ import annotations

import sqlite3
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    # discord.py (the `discord` extra, which `make test` installs) imports the deprecated
    # `audioop`; without it these tests skip.
    warnings.filterwarnings("ignore", message="'audioop' is deprecated",
                            category=DeprecationWarning)
    pytest.importorskip("discord")

from tests.conftest import comment_event, issue_event
from tests.fakes.discord import FakeDiscord
from tests.fakes.linear import FakeLinear
from tests.helpers import wait_until
from tests.support.serve import FAKE_AGENT, Served, agent_toml

pytestmark = pytest.mark.slow

SECRET = "discord-crash-webhook-secret-Qe4w"
TOKEN = "discord-crash-bot-token-Zr81Ks"


class Serve(Served):
    """`wakeline serve` with a route whose parent channel is on the fake Discord."""

    def __init__(self, root: Path, linear: str, discord: FakeDiscord) -> None:
        super().__init__(
            root,
            agent_toml([sys.executable, str(FAKE_AGENT), "ok"])
            + f'[linear]\napi_url = "{linear}"\n'
            f'[discord]\napi_url = "{discord.api_url}"\n'
            f'[[routes]]\nname = "ops"\nteams = ["OPS"]\nmode = "issue"\n'
            f'discord_channel_id = "{discord.channel_id}"\n',
            secret=SECRET, env={"WAKELINE_DISCORD_TOKEN": TOKEN})

    def deliver(self, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.send(body)
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def binding(self) -> tuple[Any, ...] | None:
        db = sqlite3.connect(self.database, timeout=5)
        try:
            return db.execute("SELECT thread_id, archived, locked FROM control_bindings") \
                .fetchone()
        finally:
            db.close()


def archive_edits(fake: FakeDiscord) -> list[Any]:
    return [r for r in fake.requests_to("PATCH", "/channels/*")
            if (r.json or {}).get("archived") is True]


def test_a_kill_between_terminal_and_archive_archives_once_after_the_restart(
        tmp_path: Path) -> None:
    fake = FakeDiscord(token=TOKEN).start()
    linear = FakeLinear().start()
    serve = Serve(tmp_path, linear.url, fake)
    try:
        serve.start()
        serve.deliver(issue_event("issue-5", "OPS-5", "create"))
        thread_id = wait_until(lambda: (serve.binding() or [None])[0], timeout=30,
                               message="the thread")
        wait_until(lambda: len([m for m in fake.messages(thread_id)
                                if m["author"]["id"] == fake.bot_id]) == 2, timeout=30,
                   message="the opened line and the answer")

        fake.fail_next("PATCH", "/channels/*", 503, times=10_000)  # no archive gets through
        closing = issue_event("issue-5", "OPS-5", "update")
        closing["data"]["state"] = {"id": "state-done", "name": "Done", "type": "completed"}
        assert serve.deliver(closing)["outcome"] == "accepted"
        # Refused, and retried after its backoff (1 s): the closing line is said once anyway.
        wait_until(lambda: len(archive_edits(fake)) >= 2, timeout=30,
                   message="an archive attempted twice")
        assert serve.binding()[1:] == (0, 0)  # durable terminal intent, the thread still open
        serve.kill9()

        fake.clear_scripts()
        refused = len(archive_edits(fake))
        serve.start()
        wait_until(lambda: serve.binding()[1:] == (1, 1), timeout=30,
                   message="the binding archived and locked after the restart")
        meta = fake.channel(thread_id)["thread_metadata"]
        assert (meta["archived"], meta["locked"]) == (True, True)
        applied = [r for r in archive_edits(fake)[refused:] if r.status == 200]
        assert len(applied) == 1 and applied[0].json == {"archived": True, "locked": True}
        closed = [m for m in fake.messages(thread_id) if m["content"].startswith("The issue was")]
        assert len(closed) == 1

        # A comment on the closed issue neither posts nor unarchives, even after a restart.
        before = [r for r in fake.requests if r.method != "GET"]
        body = comment_event("issue-5", "OPS-5")
        body["data"]["issue"]["team"] = {"key": "OPS"}
        assert serve.deliver(body)["reason"] == "terminal"
        serve.stop()
        assert [r for r in fake.requests if r.method != "GET"] == before
        assert fake.channel(thread_id)["thread_metadata"]["archived"] is True
    finally:
        serve.stop()
        fake.stop()
        linear.stop()
