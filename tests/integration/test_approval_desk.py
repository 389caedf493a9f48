"""The approval desk against the fake Discord (its real REST client) and a real store: a post
is made once and found again, long bodies are split with the buttons last, decisions in a
thread go through the approvals service with the hash shown, and who may decide."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="'audioop' is deprecated",
                            category=DeprecationWarning)
    pytest.importorskip("aiohttp", reason="the fake Discord needs aiohttp (the discord extra)")

from tests.fakes.discord import FakeDiscord  # noqa: E402
from tests.unit.models.test_matrix_store import event  # noqa: E402
from wakeline.clock import SystemClock  # noqa: E402
from wakeline.config import Config, DiscordConfig  # noqa: E402
from wakeline.models.approvals import Approval, ApprovalStatus  # noqa: E402
from wakeline.models.bindings import Binding  # noqa: E402
from wakeline.models.store import Store  # noqa: E402
from wakeline.providers.discord import texts  # noqa: E402
from wakeline.providers.discord.buttons import Click, post_parts  # noqa: E402
from wakeline.providers.discord.desk import Desk, Shown, nonce  # noqa: E402
from wakeline.providers.discord.messages import ThreadMessage  # noqa: E402
from wakeline.providers.discord.rest import DiscordRest  # noqa: E402
from wakeline.providers.matrix.approvals import ApprovalsService  # noqa: E402

TOKEN = "desk-test-bot-token-1a2b3c4d"
PERSON = "555000000000000001"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    server = FakeDiscord(token=TOKEN).start()
    yield server
    server.stop()


class World:
    """A room's conversation bound to a thread of the fake, its approvals, and a desk."""

    def __init__(self, fake: FakeDiscord, store: Store, settings: DiscordConfig) -> None:
        self.fake = fake
        self.store = store
        self.rest = DiscordRest(fake.api_url, TOKEN, max_wait_seconds=5)
        self.sent: list[str] = []
        self.approvals = ApprovalsService(store, SystemClock(), lambda a: self.sent.append(a.id))
        admitted = store.rooms.admit_page("me", [event(1)], "c", 1000)[0]
        assert admitted.conversation_id is not None
        self.conversation = admitted.conversation_id
        self.thread = self.rest.create_thread(fake.channel_id, "[matrix] alice").id
        self.binding = Binding(self.conversation, "discord", self.thread, fake.channel_id,
                               "[matrix] alice", False, False)
        store.bindings.bind(self.binding, 1000)
        self.settings = settings
        self.desk = self.new_desk()

    def new_desk(self) -> Desk:
        """A desk as after a restart: nothing known of earlier posts."""
        return Desk(self.rest, self.store.bindings, self.store.approvals, self.approvals,
                    self.settings, [TOKEN], Shown())

    def propose(self, body: str = "hello") -> Approval:
        return self.approvals.propose(connection="me", route="alice",
                                      conversation_id=self.conversation, room_id="!room",
                                      body=body, turn_id=None)

    def posts(self) -> list[dict[str, Any]]:
        return [m for m in self.fake.messages(self.thread) if m["author"]["id"] == self.fake.bot_id]

    def says(self, author: str, content: str) -> ThreadMessage:
        return ThreadMessage(self.thread, "1", self.fake.guild_id, author, "ada", False, False,
                             content)


@pytest.fixture
def world(fake: FakeDiscord, store: Store) -> Callable[..., World]:
    def make(**settings: Any) -> World:
        return World(fake, store, DiscordConfig(**{"allowed_user_ids": [PERSON], **settings}))

    return make


def test_a_post_is_made_once_and_found_again_after_a_restart(world: Callable[..., World]) -> None:
    w = world()
    a = w.propose("z" * 4500)
    w.desk.show(w.binding, a.id)
    w.desk.show(w.binding, a.id)  # known: nothing asked
    w.new_desk().show(w.binding, a.id)  # not known: looked for, found, not made again

    posts = w.posts()
    # The header, two parts of the 4,500-character line, and its end with the buttons.
    assert len(posts) == len(post_parts(a)) == 4
    assert all(len(m["content"]) <= 2000 for m in posts)
    assert [bool(m["components"]) for m in posts] == [False, False, False, True]
    assert "".join(m["content"] for m in posts).count("z") == 4500
    made = [r.json for r in w.fake.requests_to("POST", f"/channels/{w.thread}/messages")]
    assert [m["nonce"] for m in made] == [nonce(a.id, i) for i in range(4)]
    assert all(m["allowed_mentions"] == {"parse": []} for m in made)
    assert all(len(m["nonce"]) <= 25 for m in made)


def test_a_post_shown_again_after_a_lost_answer_lands_once(world: Callable[..., World]) -> None:
    w = world()
    a = w.propose()
    w.desk.show(w.binding, a.id)
    # The same post sent again with the same nonce (a retry whose first answer was lost):
    # Discord answers with the first message instead of a second.
    again = w.rest.post(w.thread, "again", nonce(a.id, 0))
    assert again == w.posts()[-1]["id"] and len(w.posts()) == 1


def test_an_update_disables_the_buttons_and_a_deleted_post_is_left_alone(
        world: Callable[..., World]) -> None:
    w = world()
    a = w.propose()
    w.desk.show(w.binding, a.id)
    w.approvals.approve(a.id, "operator")
    w.desk.update(w.binding, a.id)
    [post] = w.posts()
    [button] = post["components"][0]["components"]
    assert button["disabled"] and button["label"] == "Approved: sending · by the operator"
    other = w.propose("never shown")
    w.desk.update(w.binding, other.id)  # no post: nothing to change
    assert len(w.posts()) == 1


def test_bang_approve_takes_the_hash_the_thread_showed(world: Callable[..., World]) -> None:
    w = world()
    unseen = w.propose("not shown yet")
    assert w.desk.command(w.binding, w.conversation, w.says(PERSON, f"!approve {unseen.id}")) \
        == texts.NOT_SHOWN.format(id=f"`{unseen.id}`")
    shown = w.propose("shown")
    w.desk.show(w.binding, shown.id)
    w.store.db.execute_sql("UPDATE approvals SET body = 'changed', body_sha256 = ? WHERE id = ?",
                           ("0" * 64, shown.id))
    assert "is not the one shown here" in str(w.new_desk().command(
        w.binding, w.conversation, w.says(PERSON, f"!approve {shown.id}")))
    assert w.sent == [] and w.approvals.get(shown.id).status is ApprovalStatus.PENDING

    fine = w.propose("fine")
    w.desk.show(w.binding, fine.id)
    assert w.desk.command(w.binding, w.conversation, w.says(PERSON, f"!approve {fine.id}")) \
        is None
    assert w.sent == [fine.id]
    assert w.approvals.get(fine.id).decided_by == f"discord:{PERSON}"
    assert "already approved" in str(w.desk.command(w.binding, w.conversation,
                                                    w.says(PERSON, f"!approve {fine.id}")))
    assert w.desk.command(w.binding, "cv_other", w.says(PERSON, f"!deny {fine.id}")) == \
        texts.OTHER_THREAD.format(id=f"`{fine.id}`")
    assert w.desk.command(w.binding, w.conversation, w.says(PERSON, "!deny nonsense")) == \
        texts.NO_APPROVAL.format(id="that")


@pytest.mark.parametrize(("allowed", "user", "bot", "can_post", "may"), [
    ([PERSON], PERSON, False, False, True),
    ([PERSON], "555000000000000009", False, True, False),
    ([PERSON], PERSON, True, True, False),
    ([], "555000000000000009", False, True, True),
    ([], "555000000000000009", False, False, False),
    ([], "555000000000000009", True, True, False),
])
def test_who_may_decide(world: Callable[..., World], allowed: list[str], user: str, bot: bool,
                        can_post: bool, may: bool) -> None:
    assert world(allowed_user_ids=allowed).desk.may_decide(user, bot, can_post) is may


def test_a_click_from_another_guild_is_refused_and_answered(
        world: Callable[..., World], fake: FakeDiscord) -> None:
    w = world(guild_id="42")
    a = w.propose()
    w.desk.show(w.binding, a.id)
    [post] = w.posts()
    custom = post["components"][0]["components"][0]["custom_id"]
    interaction = fake.click(w.thread, post["id"], custom, PERSON)
    w.desk.click(Click(interaction.id, interaction.token, custom, w.thread, post["id"],
                       fake.guild_id, PERSON, False, True))
    [answered] = [i.answered for i in fake.interactions]
    assert answered is not None and answered["data"]["content"] == texts.NOT_ALLOWED
    assert w.approvals.get(a.id).status is ApprovalStatus.PENDING


def test_an_answer_discord_refuses_is_logged_without_the_interaction_s_token(
        world: Callable[..., World], fake: FakeDiscord, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="wakeline")
    w = world()
    a = w.propose()
    w.desk.show(w.binding, a.id)
    [post] = w.posts()
    custom = post["components"][0]["components"][1]["custom_id"]
    fake.interaction_deadline_s = 0.0  # too late for Discord
    interaction = fake.click(w.thread, post["id"], custom, PERSON)
    w.desk.click(Click(interaction.id, interaction.token, custom, w.thread, post["id"],
                       fake.guild_id, PERSON, False, True))
    # Denied all the same: the outcome line (the control's) still says so in the thread.
    assert w.approvals.get(a.id).status is ApprovalStatus.DENIED
    assert "interaction not answered" in caplog.text
    assert interaction.token not in caplog.text and TOKEN not in caplog.text
    assert interaction.token not in repr(Click(interaction.id, interaction.token))


def test_config_names_the_control_channel_of_either_kind_of_route(
        make_config: Callable[..., Config], tmp_path: Any) -> None:
    secret = tmp_path / "t"
    secret.write_text("t")
    config = make_config(
        routes=[{"name": "eng", "teams": ["ENG"], "discord_channel_id": "1"}],
        matrix={"connections": {"me": {"homeserver": "http://127.0.0.1:9", "user_id": "@me:x",
                                       "access_token_file": str(secret)}},
                "routes": [{"name": "alice", "connection": "me", "room_id": "!r",
                            "discord_channel_id": "2"},
                           {"name": "bob", "connection": "me", "room_id": "!s"}]})
    assert [config.control_channel(n) for n in ("eng", "alice", "bob", "nope", None)] == \
        ["1", "2", None, None, None]


def test_the_desk_remembers_a_bounded_number_of_posts(monkeypatch: pytest.MonkeyPatch) -> None:
    from wakeline.providers.discord import desk

    monkeypatch.setattr(desk, "SHOWN_KEPT", 3)
    shown = Shown()
    for n in range(5):
        shown.put(f"apr_{n:016x}", desk.Post("1", str(n), ""))
    shown.put(f"apr_{2:016x}", desk.Post("1", "again", ""))  # put again: newest
    assert [shown.get(f"apr_{n:016x}") is not None for n in range(5)] == \
        [False, False, True, True, True]
