"""The DiscordControl actor's ordering: live messages wait across a gap, catch-ups come
first, each thread's messages are admitted in order; jobs retry and lanes stay ordered.

The keeper is a stub (no Discord); the store is real; admission is a recorder.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.helpers import wait_until
from wakeline.clock import SystemClock
from wakeline.config import DiscordConfig
from wakeline.errors import DiscordUnavailable, Unavailable
from wakeline.models.admissions import AdmissionResult
from wakeline.models.bindings import Binding
from wakeline.models.plans import AdmissionPlan
from wakeline.models.states import Outcome
from wakeline.models.store import Store
from wakeline.providers.discord.control import DiscordControl
from wakeline.providers.discord.keeper import Job
from wakeline.providers.discord.messages import ThreadMessage

THREAD = "9000"


class StubRest:
    def close(self) -> None:
        pass


class StubKeeper:
    """Records the jobs it ran; a catch-up answers from `pages`; `fail` raises for a kind."""

    def __init__(self) -> None:
        self.rest = StubRest()
        self.desk = None  # no Matrix approvals here
        self.ran: list[tuple[str, str]] = []
        self.jobs: list[Job] = []
        self.pages: dict[str, list[ThreadMessage]] = {}
        self.fail: dict[str, int] = {}
        self.lock = threading.Lock()

    def channel_of(self, route: str | None) -> str | None:
        return "100" if route == "ops" else None

    def run(self, job: Job) -> list[ThreadMessage]:
        with self.lock:
            self.ran.append((job.kind, job.text))
            self.jobs.append(job)
            if self.fail.get(job.kind, 0) > 0:
                self.fail[job.kind] -= 1
                raise DiscordUnavailable("down")
        return self.pages.pop(job.text, []) if job.kind == "catch_up" else []


def message(n: int, *, bot: bool = False, author: str = "555", thread: str = THREAD,
            text: str = "hi") -> ThreadMessage:
    return ThreadMessage(thread, str(n), "1", author, "ada", bot, False, text)


@pytest.fixture
def control(store: Store) -> Any:
    store.db.execute_sql(
        "INSERT INTO conversations (id, namespace, key, kind, title, route, created_at,"
        " updated_at, issue_id, issue_identifier) VALUES ('cv_1', 'n', 'k', 'issue', 't', 'ops',"
        " 1, 1, 'issue-1', 'OPS-1')")
    store.bindings.bind(Binding("cv_1", "discord", THREAD, "100", "t", False, False), now=1)
    keeper = StubKeeper()
    admitted: list[str] = []
    refuse: list[str] = []  # message ids whose next admission the store cannot commit

    def admit(plan: AdmissionPlan) -> AdmissionResult:
        message_id = plan.delivery.delivery_id.removeprefix("discord:")
        if message_id in refuse:
            refuse.remove(message_id)
            raise Unavailable()
        admitted.append(message_id)
        return AdmissionResult(Outcome.ACCEPTED, conversation_id="cv_1", joined="cv_1")

    keeper.refuse = refuse  # type: ignore[attr-defined]

    proxy = DiscordControl.start(keeper, store, admit, DiscordConfig(allowed_user_ids=["555"]),
                                 SystemClock(), backoff_seconds=(0.05, 0.05)).proxy()
    yield proxy, keeper, admitted, store
    proxy.actor_ref.stop()


def idle(actor: Any) -> bool:
    """Nothing waits in the control: no job, no catch-up, nothing held."""
    return actor.backlog().get() == {"jobs": 0, "catchingUp": 0, "held": 0}


def cursor(store: Store) -> int | None:
    binding = store.bindings.of("cv_1")
    assert binding is not None
    return binding.last_message_id


def test_messages_before_the_first_session_is_ready_wait_for_its_catch_up(control: Any) -> None:
    actor, keeper, admitted, store = control
    keeper.pages[THREAD] = [message(101), message(102)]  # said while wakeline was down
    actor.gateway_message(message(103)).get()
    actor.gateway_message(message(104, bot=True)).get()
    assert admitted == [] and cursor(store) is None
    actor.gateway_ready().get()
    wait_until(lambda: admitted == ["101", "102", "103"], message="in order, each once")
    wait_until(lambda: cursor(store) == 104, message="the cursor past the bot's message")
    actor.gateway_message(message(105)).get()
    assert admitted[-1] == "105"


def test_a_live_message_after_a_gap_never_moves_the_cursor_past_what_was_missed(
        control: Any) -> None:
    actor, keeper, admitted, store = control
    actor.gateway_ready().get()
    wait_until(lambda: idle(actor), message="the first catch-up")
    actor.gateway_message(message(200)).get()
    assert admitted == ["200"] and cursor(store) == 200  # the actor's own call: done when told
    actor.gateway_disconnected().get()
    actor.gateway_message(message(230, bot=True)).get()  # the new session's first, live
    actor.gateway_message(message(231)).get()
    assert cursor(store) == 200  # held: the messages 201..229 may be missing
    keeper.pages[THREAD] = [message(210), message(220), message(230, bot=True), message(231)]
    actor.gateway_ready().get()
    wait_until(lambda: admitted == ["200", "210", "220", "231"], message="missed ones first")
    assert cursor(store) == 231


def test_a_resumed_session_releases_what_it_held(control: Any) -> None:
    actor, keeper, admitted, store = control
    actor.gateway_ready().get()
    wait_until(lambda: idle(actor), message="the first catch-up")
    actor.gateway_disconnected().get()
    actor.gateway_message(message(300)).get()  # replayed by Discord on RESUME
    assert admitted == [] and actor.backlog().get()["held"] == 1
    actor.gateway_resumed().get()
    assert admitted == ["300"]
    assert [k for k, _ in keeper.ran].count("catch_up") == 1  # no catch-up after a resume


def test_a_failing_catch_up_lets_live_messages_through_and_fetches_later(control: Any) -> None:
    actor, keeper, admitted, store = control
    store.bindings.seen("discord", THREAD, 390)
    keeper.fail["catch_up"] = 1
    keeper.pages[THREAD] = [message(400)]
    actor.gateway_message(message(401)).get()
    actor.gateway_ready().get()
    wait_until(lambda: "401" in admitted, message="released when the catch-up failed")
    wait_until(lambda: cursor(store) == 401, message="the live message moved the cursor")
    wait_until(lambda: actor.tick().get() is None and "400" in admitted,
               message="the retried catch-up")
    # Retried from where the gap began, not from the cursor the live message moved.
    assert [j.after for j in keeper.jobs if j.kind == "catch_up"] == [390, 390]


def test_other_people_bots_and_unbound_threads_are_not_admitted(
        control: Any, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="wakeline.providers.discord.control")
    actor, keeper, admitted, store = control
    actor.gateway_ready().get()
    wait_until(lambda: idle(actor), message="the first catch-up")
    actor.gateway_message(message(500, author="666")).get()
    actor.gateway_message(message(501, bot=True)).get()
    for n in (502, 503):
        actor.gateway_message(message(n, thread="7777")).get()
    actor.gateway_message(ThreadMessage(THREAD, "504", "1", "555", "a", False, True, "")).get()
    assert admitted == [] and cursor(store) == 501
    assert len([r for r in caplog.records if "no binding" in r.getMessage()]) == 1


def test_a_command_runs_only_when_first_admitted(control: Any) -> None:
    actor, keeper, admitted, store = control
    actor.gateway_ready().get()
    actor.gateway_message(message(600, text="!status")).get()
    wait_until(lambda: ("command", "") in keeper.ran, message="the command ran")


def test_jobs_of_a_conversation_run_in_order_and_retry_at_the_head(control: Any) -> None:
    actor, keeper, admitted, store = control
    keeper.fail["ensure"] = 1
    actor.admitted([("cv_1", True, ())]).get()
    actor.turn_finished("cv_1", "ops", "response").get()
    actor.turn_finished("cv_other", "quiet", "response").get()
    wait_until(lambda: actor.tick().get() is None and
               [k for k, _ in keeper.ran if k != "catch_up"] == ["ensure", "ensure", "answers"],
               message="the ensure retried before the post")


def test_a_message_the_store_could_not_take_is_fetched_again_in_order(control: Any) -> None:
    actor, keeper, admitted, store = control
    actor.gateway_ready().get()
    wait_until(lambda: idle(actor), message="the first catch-up")
    actor.gateway_message(message(700)).get()
    keeper.refuse.append("701")
    actor.gateway_message(message(701)).get()  # the store cannot commit it now
    actor.gateway_message(message(702)).get()  # waits behind it
    assert admitted == ["700"] and cursor(store) == 700
    keeper.pages[THREAD] = [message(701), message(702)]
    wait_until(lambda: actor.tick().get() is None and admitted == ["700", "701", "702"],
               message="fetched again a moment later, in order")
    assert [j.after for j in keeper.jobs if j.kind == "catch_up"][-1] == 700
    wait_until(lambda: cursor(store) == 702, message="the cursor after both")
