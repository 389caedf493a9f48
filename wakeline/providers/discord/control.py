"""DiscordControl: the actor that owns the control bindings and every Discord REST call.

One per process. Its messages come from the composition root's hooks (an admission
joined or changed a conversation, a turn ended, a reset) and from the Gateway thread
(a message, a new session). Thread work runs as `Job`s on a small worker pool, at
most one at a time per conversation and in the order it was asked for (a thread is
ensured before the answer is posted in it); a job that fails for a reason that may
pass (Discord down, a 5xx, a rate limit still holding) waits at the head of its
conversation's lane and is retried with backoff. A thread message is admitted here,
on the actor's thread, through the same admission writer as a webhook; the actor
never blocks on Discord.

Live messages wait while the Gateway may have missed some: before the first session
is ready and from a disconnect until Discord resumes the session or a new one is
ready. After every new session the actor catches up on each open thread's messages
after the last one it saw, and that thread's live messages wait until the catch-up is
in, so a thread's messages are admitted in order, each once, and its cursor never
moves past a message it has not seen.

A Matrix route's proposed sends are shown in its room's thread: each change of an
approval (told by the approvals service) becomes a lane job that shows the post or
updates it and says what changed; every `APPROVALS_EVERY_TICKS` (and at start) the
pending approvals whose post is not known are shown again (the desk looks for it in the
thread before posting). A click (an interaction) does not wait in a lane: Discord wants
its answer within 3 s, so it goes to a pool of its own.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

import pykka

from wakeline.clock import Clock, to_ms
from wakeline.config import DiscordConfig
from wakeline.errors import DiscordError, Unavailable
from wakeline.models.admissions import AdmissionResult
from wakeline.models.approvals import Approval, ApprovalStatus
from wakeline.models.plans import AdmissionPlan
from wakeline.models.states import Outcome
from wakeline.models.store import Store
from wakeline.providers.discord import PROVIDER, buttons, texts
from wakeline.providers.discord.buttons import Click
from wakeline.providers.discord.keeper import OWED_KINDS, Job, Keeper
from wakeline.providers.discord.lanes import Lanes
from wakeline.providers.discord.messages import ThreadMessage, plan, to_delivery

log = logging.getLogger(__name__)

# Waits before the attempts after a transient failure (seconds); past the last, a job is
# dropped (an ensure comes again with the next delivery; a close with the sweep).
BACKOFF_SECONDS: tuple[float, ...] = (1, 2, 5, 10, 30, 60, 120, 300)
WORKERS = 4
SWEEP_EVERY_TICKS = 120  # about a minute at the ticker's 0.5 s
ADMIT_RETRY_SECONDS = 1.0  # a thread whose message could not be admitted is fetched again
HELD_MAX = 10_000  # live messages held across a reconnect; older ones are left to the catch-up
APPROVALS_EVERY_TICKS = 20  # about ten seconds: pending approvals whose post is not known
CLICK_WORKERS = 2


class DiscordControl(pykka.ThreadingActor):
    """Owns the bindings and every REST call; admits thread messages.

    Args:
        keeper: does the thread work (REST and bindings).
        store: read here for bindings and conversations.
        admit: commits one plan through the admission writer and returns its result.
        settings: the `[discord]` section (guild, allowed users).
        backoff_seconds: the waits between attempts of a failing job.
    """

    def __init__(self, keeper: Keeper, store: Store,
                 admit: Callable[[AdmissionPlan], AdmissionResult], settings: DiscordConfig,
                 clock: Clock, *, backoff_seconds: Sequence[float] = BACKOFF_SECONDS,
                 workers: int = WORKERS, sweep_every_ticks: int = SWEEP_EVERY_TICKS) -> None:
        super().__init__()
        self._keeper = keeper
        self._store = store
        self._admit = admit
        self._guild = settings.guild_id
        self._allowed = frozenset(settings.allowed_user_ids)
        self._clock = clock
        self._workers = workers
        self._sweep_every = sweep_every_ticks
        self._lanes = Lanes(self._start, clock.monotonic, backoff_seconds)
        self._catching: dict[str, list[ThreadMessage]] = {}  # thread id -> live messages held
        # Until the first session is ready (what was said while wakeline was down is caught
        # up then) and after each disconnect, live messages wait in `_held`.
        self._gap = True
        self._held: list[ThreadMessage] = []
        self._unbound_logged: set[str] = set()
        self._ticks = 0
        self._pool: ThreadPoolExecutor | None = None
        self._clicks: ThreadPoolExecutor | None = None
        self._showing: set[str] = set()  # approvals whose show job waits or runs
        self._me: Any = None

    def on_start(self) -> None:
        """Open the worker pool, then reapply terminal intent to every binding that is not
        archived and locked yet (a crash between a terminal delivery and its archive)."""
        threading.current_thread().name = "discord-control"
        self._me = self.actor_ref.proxy()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="discord")
        self._clicks = ThreadPoolExecutor(CLICK_WORKERS, thread_name_prefix="discord-click")
        self.sweep()
        self.show_pending()

    def on_stop(self) -> None:
        """Cut the REST client's waits short and let calls on the wire finish; what is
        queued is dropped (terminal intent is reapplied at the next start)."""
        self._keeper.rest.close()
        for pool in (self._pool, self._clicks):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._store.close()

    def on_failure(self, *args: Any) -> None:
        """A message that raised (pykka has logged it): the control goes on."""

    # --- hooks from the rest of wakeline ---------------------------------------------------

    def admitted(self, changes: list[tuple[str, bool, tuple[tuple[str, str], ...]]]) -> None:
        """Admissions committed: (conversation, joined its FIFO, lifecycle events) each.

        A delivery of an open conversation reconciles its thread; terminal intent closes
        it (never an ensure); an explicit open state reopens it.
        """
        for cid, joined, events in changes:
            kinds = {event for event, _ in events}
            if not self._controlled(cid):
                continue
            if "terminal" in kinds:
                # Said first, then archived and locked: a retried archive never says it twice.
                self._enqueue(Job("post", cid, texts.CLOSED, "closing"))
                self._enqueue(Job("close", cid))
            elif "reopened" in kinds:
                self._enqueue(Job("ensure", cid))
                self._enqueue(Job("post", cid, texts.REOPENED))
            elif joined:
                self._enqueue(Job("ensure", cid))

    def turn_finished(self, conversation_id: str, route: str | None, result: str) -> None:
        """A turn ended: its response, error, question or stop goes to the thread (read from
        the store, where the result is durable and so is whether the thread showed it)."""
        if self._keeper.channel_of(route) is not None and result in OWED_KINDS:
            self._enqueue(Job("answers", conversation_id))

    def turn_stalled(self, conversation_id: str, route: str | None, attempts: int,
                     error: str) -> None:
        """A turn that will not run again without an operator."""
        if self._keeper.channel_of(route) is not None:
            self._enqueue(Job("post", conversation_id,
                              texts.STALLED.format(attempts=attempts, error=error[:300])))

    def lifecycle(self, conversation_id: str, event: str) -> None:
        """The supervisor's lifecycle events: a reset, an abandoned turn."""
        line = {"reset": texts.RESET, "abandoned": texts.ABANDONED}.get(event)
        if line and self._controlled(conversation_id):
            self._enqueue(Job("post", conversation_id, line))

    def approval_changed(self, approval: Approval) -> None:
        """A Matrix send was proposed, decided, expired, sent or failed: the conversation's
        thread shows the proposal, or updates its post and says what changed."""
        if not self._controlled(approval.conversation_id):
            return
        if approval.status is ApprovalStatus.PENDING:
            self._show(approval.conversation_id, approval.id)
            return
        self._enqueue(Job("approval_update", approval.conversation_id,
                          text=buttons.outcome_line(approval) or "", approval_id=approval.id))

    def show_pending(self) -> None:
        """Show every pending approval whose post is not known in its conversation's current
        thread (after a restart, a dropped job, a replaced thread)."""
        desk = self._keeper.desk
        if desk is None:
            return
        try:
            pending = self._store.approvals.recent(status=ApprovalStatus.PENDING, limit=1000)
        except Exception:
            log.exception("cannot read the pending approvals")
            return
        for approval in pending:
            cid = approval.conversation_id
            if approval.id in self._showing or not self._controlled(cid):
                continue
            post, binding = desk.shown.get(approval.id), self._store.bindings.of(cid)
            if post is None or binding is None or post.thread_id != binding.thread_id:
                self._show(cid, approval.id)

    # --- the Gateway ------------------------------------------------------------------------

    def gateway_message(self, message: ThreadMessage) -> None:
        """A message the Gateway saw: held while the session may have missed some (from a
        disconnect until Discord resumed it, or until a new session's catch-up is in),
        so a thread's messages are admitted in order and its cursor never skips a gap."""
        if self._gap:
            if len(self._held) >= HELD_MAX:
                # Never lost: not admitted, so the cursor stays and the catch-up fetches it.
                log.warning("discord message held too long: left to the catch-up",
                            extra={"message_id": self._held.pop(0).message_id})
            self._held.append(message)
            return
        held = self._catching.get(message.thread_id)
        if held is not None:
            held.append(message)
        else:
            self._receive(message)

    def gateway_click(self, click: Click) -> None:
        """A click on a button: decided and answered at once, beside the lanes."""
        if self._keeper.desk is None or self._clicks is None:
            return
        self._clicks.submit(self._keeper.desk.click, click)

    def gateway_disconnected(self) -> None:
        """The connection dropped: what comes next may follow a gap, until it is closed."""
        self._gap = True

    def gateway_ready(self) -> None:
        """A new Gateway session (the first, or after one was refused): what was sent while
        none was open is fetched, thread by thread, after the last message seen; that
        thread's live messages wait for it."""
        try:
            bindings = self._store.bindings.open_bindings(PROVIDER)
        except Exception:
            log.exception("cannot list the threads to catch up")
            bindings = []
        for binding in bindings:
            if binding.thread_id not in self._catching:
                self._catching[binding.thread_id] = []
                # From the cursor as it stands now: a retry after live messages went in
                # (they move the cursor) still fetches from where the gap began.
                self._enqueue(Job("catch_up", binding.conversation_id, text=binding.thread_id,
                                  after=binding.last_message_id or int(binding.thread_id)))
        log.info("discord gateway ready", extra={"catching_up": len(bindings)})
        self._close_gap()

    def gateway_resumed(self) -> None:
        """The session went on after a drop: Discord replayed what was missed."""
        log.info("discord gateway resumed")
        self._close_gap()

    def gateway_failed(self, reason: str) -> None:
        """The Gateway gave up for good (a refused token, an intent the app may not use)."""
        log.error("discord gateway stopped", extra={"reason": reason})

    # --- upkeep -----------------------------------------------------------------------------

    def tick(self) -> None:
        """Start jobs whose retry is due; now and then, sweep terminal intent again."""
        self._ticks += 1
        self._lanes.pump_all()
        if self._ticks % self._sweep_every == 0:
            self.sweep()
        if self._ticks % APPROVALS_EVERY_TICKS == 0:
            self.show_pending()

    def sweep(self) -> None:
        """Close every thread whose conversation has terminal intent and that is still open
        (a failed or interrupted archive); post the answers a thread still owes (a restart,
        an outage longer than the retries, a lane that was full)."""
        try:
            due = self._store.bindings.terminal_unclosed(PROVIDER)
        except Exception:
            log.exception("cannot read the threads owed an archive")
            return
        for cid in due:
            self._close_once(cid)
        try:
            owing = self._store.bindings.owing_answers(PROVIDER, OWED_KINDS)
        except Exception:
            log.exception("cannot read the answers owed to threads")
            return
        for cid in owing:
            if not self._lanes.waits(cid, "answers"):
                self._enqueue(Job("answers", cid))

    def backlog(self) -> dict[str, int]:
        """What waits: jobs (in lanes, running included), threads being caught up, and live
        messages held across a gap (for the doctor)."""
        return {"jobs": self._lanes.size(), "catchingUp": len(self._catching),
                "held": len(self._held)}

    def diagnose(self, check: Callable[[], Any]) -> Future[Any]:
        """Run `check` (the doctor's REST calls) on the pool; the caller waits on the future."""
        assert self._pool is not None
        return self._pool.submit(check)

    def job_done(self, job: Job, error: DiscordError | None, found: list[ThreadMessage]) -> None:
        """A worker finished `job`: the lane's next job, or this one again later."""
        if error is not None and job.kind == "catch_up":
            # Live messages are not held behind a failing catch-up: they go in now, and the
            # catch-up, when it gets through, admits what is still missing.
            self._caught_up(job.text, [])
        done = self._lanes.finished(job, error)
        if done and job.kind == "catch_up":
            self._caught_up(job.text, found)
        if done and job.kind == "approval_show":
            # Shown, or given up on: a later `show_pending` tries again while it is pending.
            self._showing.discard(job.approval_id)
        self._lanes.pump(job.conversation_id)

    # --- internals --------------------------------------------------------------------------

    def _controlled(self, conversation_id: str) -> bool:
        target = self._store.bindings.target(conversation_id)
        return target is not None and self._keeper.channel_of(target.route) is not None

    def _enqueue(self, job: Job) -> bool:
        return self._lanes.add(job)

    def _show(self, cid: str, approval_id: str) -> None:
        if approval_id not in self._showing and \
                self._enqueue(Job("approval_show", cid, approval_id=approval_id)):
            self._showing.add(approval_id)

    def _close_once(self, cid: str) -> None:
        """A close, unless one already waits in the conversation's lane."""
        if not self._lanes.waits(cid, "close"):
            self._enqueue(Job("close", cid))

    def _start(self, job: Job) -> None:
        assert self._pool is not None
        self._pool.submit(self._work, job)

    def _work(self, job: Job) -> None:
        """On a worker: do the job, then tell the actor."""
        error: DiscordError | None = None
        found: list[ThreadMessage] = []
        try:
            found = self._keeper.run(job)
        except DiscordError as exc:
            error = exc
        except Exception:
            log.exception("discord job failed", extra={"kind": job.kind,
                                                       "conversation_id": job.conversation_id})
        try:
            self._me.job_done.defer(job, error, found)
        except pykka.ActorDeadError:
            pass  # stopping: terminal intent is reapplied at the next start

    def _close_gap(self) -> None:
        self._gap = False
        held, self._held = self._held, []
        for message in held:
            self.gateway_message(message)  # to a thread's catch-up, or admitted now

    def _caught_up(self, thread_id: str, found: list[ThreadMessage]) -> None:
        """Admit what the catch-up fetched and what arrived live meanwhile, in id order,
        each once (receipts make any message seen before a duplicate)."""
        held = self._catching.pop(thread_id, [])
        merged = sorted({m.message_id: m for m in [*found, *held]}.values(),
                        key=lambda m: m.id_number)
        for index, message in enumerate(merged):
            waiting = self._catching.get(thread_id)
            if waiting is not None:  # an admission failed: the rest waits for its catch-up
                waiting.extend(merged[index:])
                return
            self._receive(message)

    def _receive(self, message: ThreadMessage) -> None:
        """Admit a person's message of a bound thread; ignore everything else."""
        if message.is_system or (self._guild and message.guild_id != self._guild):
            return
        bindings = self._store.bindings
        binding = bindings.by_thread(PROVIDER, message.thread_id)
        if binding is None:
            if message.thread_id not in self._unbound_logged:
                if len(self._unbound_logged) > 10_000:
                    self._unbound_logged.clear()
                self._unbound_logged.add(message.thread_id)
                log.info("message in a channel with no binding: ignored",
                         extra={"channel_id": message.thread_id})
            return
        if message.is_bot or (self._allowed and message.author_id not in self._allowed):
            bindings.seen(PROVIDER, message.thread_id, message.id_number)
            return
        target = bindings.target(binding.conversation_id)
        if target is None:
            return
        delivery = to_delivery(message, target)
        try:
            result = self._admit(plan(delivery, to_ms(self._clock.now())))
        except Unavailable:
            # Not durable: the thread waits (its cursor stays before this message) for a
            # catch-up a little later, which brings it and what follows it again.
            log.warning("thread message not admitted", extra={"message_id": message.message_id})
            if message.thread_id not in self._catching:
                self._catching[message.thread_id] = []
                self._enqueue(Job("catch_up", binding.conversation_id, text=message.thread_id,
                                  after=binding.last_message_id or int(message.thread_id),
                                  due=self._clock.monotonic() + ADMIT_RETRY_SECONDS))
            return
        bindings.seen(PROVIDER, message.thread_id, message.id_number)
        if result.outcome is Outcome.ACCEPTED and message.command:
            self._enqueue(Job("command", binding.conversation_id, message=message))
        elif result.reason == "terminal":
            # Someone could post, so the closed issue's thread is open again (a moderator
            # unlocked it): it is archived and locked once more, without a word.
            bindings.mirror(binding.conversation_id, binding.thread_id, archived=False,
                            locked=False, now=to_ms(self._clock.now()))
            self._close_once(binding.conversation_id)

