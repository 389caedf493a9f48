"""Supervisor: which conversations have live actors, and how many turns run at once.

A conversation is a row in the store, not a thread: the supervisor starts
`max_concurrent_turns` turn slots (ConversationActors) once, and binds a free
one to each conversation it runs. Others with work wait in a FIFO queue, so
10,000 busy conversations cost 10,000 queue entries, not 10,000 threads. A
conversation that finishes a turn keeps its slot only while nobody else is
waiting; then the slot serves the next one.

It also retires worktrees: a terminal or reset conversation owes its workspace
a cleanup, done on a small janitor thread once no actor of it is live (a
running agent is never pulled out from under), and again at start-up.

Where hosts share the database, an engine (`scheduling/`) decides which
conversation runs where: wakes of conversations with no live slot here go to
`engine.wake`, and the engine's job asks for one turn here with `serve_one`; the
supervisor's own queue then only holds such requests while every slot is busy.
Recovery at start-up repairs only this host's turns: another host's are its own
until it is found dead (`repair_host`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Iterable

import pykka

from wakeline.actors.conversation import ConversationActor
from wakeline.clock import to_ms
from wakeline.errors import Conflict, NotFound, WorkspaceFailed
from wakeline.providers.linear import replies
from wakeline.turns.env import TurnEnv

log = logging.getLogger(__name__)

# Every this many ticks the supervisor rescans the store for work nobody woke
# (a wake lost to a busy database, a claim that failed): nothing waits forever.
SWEEP_EVERY_TICKS = 20

# How often an engine's job waiting for its turn checks that the supervisor still lives.
JOB_POLL_SECONDS = 1.0


class Supervisor(pykka.ThreadingActor):
    """Owns the map conversation id -> live actor and the turn slots."""

    def __init__(self, env: TurnEnv, max_concurrent_turns: int, engine: Any = None) -> None:
        super().__init__()
        self._env = env
        self._engine = engine  # None: this supervisor decides (one host); else `wake`, `host_id`
        self._waiters: dict[str, Future[bool]] = {}  # the engine's jobs, by conversation
        self._slot_count = max_concurrent_turns
        self._live: dict[str, Any] = {}  # conversation id -> the slot bound to it
        self._free: list[Any] = []  # idle slots' proxies (made once: a proxy is costly)
        self._slots: list[Any] = []
        self._me: Any = None
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._woken: set[str] = set()  # bound conversations woken since their slot last looked
        self._ticks = 0
        self._retiring: set[str] = set()
        self._janitor: ThreadPoolExecutor | None = None

    def on_start(self) -> None:
        """Name the thread; start the janitor that retires worktrees."""
        threading.current_thread().name = "supervisor"
        self._me = self.actor_ref.proxy()
        self._janitor = ThreadPoolExecutor(1, thread_name_prefix="workspaces")
        self._slots = [ConversationActor.start(self._env, self._me, n).proxy()
                       for n in range(self._slot_count)]
        self._free = list(reversed(self._slots))

    def on_stop(self) -> None:
        """Stop every turn slot (running children get SIGTERM) and the janitor; the engine's
        jobs waiting here end (their turns stay for recovery)."""
        for waiter in self._waiters.values():
            waiter.set_exception(RuntimeError("wakeline is stopping"))
        self._waiters.clear()
        for slot in self._slots:
            slot.actor_ref.stop(block=False)
        self._live.clear()
        self._woken.clear()
        self._free.clear()
        if self._janitor is not None:
            self._janitor.shutdown(wait=True, cancel_futures=True)
        self._env.store.close()

    # --- messages ----------------------------------------------------------------------------

    def recover(self) -> int:
        """Startup: repair the store, then wake every conversation with work. Returns how many."""
        now = to_ms(self._env.clock.now())
        hosts = [self._engine.host_id] if self._engine is not None else None
        ids = self._env.store.fifo.recover(now, replies.RERUN_REPLY, replies.INTERRUPTED_REPLY,
                                           hosts=hosts)
        self._env.kick_tracker()
        self.wake(ids)
        self._retire_workspaces()  # a crash between a retirement and its cleanup: redo it
        log.info("recovered", extra={"conversations_with_work": len(ids)})
        return len(ids)

    def repair_host(self, host: str) -> list[str]:
        """A dead host's turns are due again here or anywhere (the engine's takeover);
        returns their conversations. Asked by the engine's thread, never an actor."""
        now = to_ms(self._env.clock.now())
        ids = self._env.store.fifo.recover(now, replies.RERUN_REPLY, replies.INTERRUPTED_REPLY,
                                           hosts=[host])
        self._env.kick_tracker()
        return ids

    def wake(self, conversation_ids: Iterable[str]) -> None:
        """New work for these conversations (told by the admission writer and the ticker)."""
        elsewhere = []
        for cid in conversation_ids:
            live = self._live.get(cid)
            if live is not None:
                live.wake.defer()
                self._woken.add(cid)
            elif self._engine is not None:
                elsewhere.append(cid)
            elif cid not in self._queued:
                self._queued.add(cid)
                self._ready.append(cid)
        if elsewhere:
            self._engine.wake(elsewhere)  # returns at once: the engine enqueues on its thread
        self._fill()

    def serve_one(self, conversation_id: str, done: Future[bool]) -> None:
        """The engine's job: run one turn of the conversation on a slot here; `done` gets
        whether more work waits after it."""
        if conversation_id in self._waiters or conversation_id in self._live:
            # The engine runs one job of a conversation at a time: this is a job a takeover
            # gave back while the first still runs here. It ends; the first one carries on.
            done.set_result(False)
            return
        self._waiters[conversation_id] = done
        self._ready.append(conversation_id)
        self._fill()

    def tick(self) -> None:
        """Periodic: due retries wake, live actors check their timeouts, a rescan now and then."""
        now = to_ms(self._env.clock.now())
        self._ticks += 1
        fifo = self._env.store.fifo
        try:
            due = fifo.conversations_with_work(now) if self._ticks % SWEEP_EVERY_TICKS == 0 \
                else fifo.due_retries(now)
        except Exception:
            log.exception("tick could not read the store")
            due = []
        self.wake(cid for cid in due if cid not in self._live)
        if self._ticks % SWEEP_EVERY_TICKS == 0:
            self._retire_workspaces()
        for live in self._live.values():
            live.tick.defer()

    def turn_ended(self, conversation_id: str, step: tuple[bool, bool] | None = None) -> None:
        """A live actor has nothing running: run it again, queue it behind others, or stop it.

        `step` is what the slot read as it finalised the turn (may it run again, is a cleanup
        owed); a wake since then may have brought more work, and then the store is read.
        """
        live = self._live.get(conversation_id)
        if live is None:
            return
        if step is None or conversation_id in self._woken:
            step = self._next_step(conversation_id)
        self._woken.discard(conversation_id)
        runnable, cleanup_owed = step
        waiter = self._waiters.pop(conversation_id, None)
        if waiter is not None:  # the engine's job: one turn, then the engine decides
            del self._live[conversation_id]
            self._free.append(live)
            waiter.set_result(runnable)
            if cleanup_owed and not runnable:
                self._retire_workspaces([conversation_id])
            self._fill()
            return
        if runnable and not self._ready:
            live.run_next.defer()
            return
        del self._live[conversation_id]
        self._free.append(live)
        if runnable and conversation_id not in self._queued:
            self._queued.add(conversation_id)
            self._ready.append(conversation_id)
        elif cleanup_owed:
            self._retire_workspaces([conversation_id])
        self._fill()

    def workspace_retired(self, conversation_id: str) -> None:
        """The janitor finished with this conversation's worktree."""
        self._retiring.discard(conversation_id)

    def operate(self, conversation_id: str, operation: str) -> dict[str, Any]:
        """Operator commands: stop, reset, retry, abandon. Asked by HTTP threads, never actors."""
        fifo, now = self._env.store.fifo, to_ms(self._env.clock.now())
        if not self._env.store.conversation_exists(conversation_id):
            raise NotFound(f"no conversation {conversation_id}")
        live = self._live.get(conversation_id)
        if operation == "stop":
            if live is not None:
                stopped = live.stop_turn().get(timeout=10)
            else:  # another host may run it: the flag reaches it on its next tick
                stopped = self._engine is not None and fifo.request_stop(conversation_id)
            if not stopped:
                raise Conflict("no turn is running")
            return {"stopped": True}
        if operation == "reset":
            if live is not None:
                answer = live.reset().get(timeout=10)
            else:
                outcome = fifo.reset(conversation_id, now, replies.RESET_REPLY)
                answer = {"sessionId": outcome.session_id if outcome else None,
                          "completed": outcome.completed if outcome else 0}
            self.wake([conversation_id])
            self._env.kick_tracker()  # the reset answered the sessions whose work it dropped
            self._env.events.lifecycle(conversation_id, "reset",
                             "The operator reset the conversation: a new session.")
            return answer
        if operation == "retry":
            if not fifo.retry(conversation_id, now):
                raise Conflict("the conversation is not stalled")
            self.wake([conversation_id])
            return {"retried": True}
        if operation == "abandon":
            if not fifo.abandon(conversation_id, now):
                raise Conflict("the conversation is not stalled")
            self._env.events.lifecycle(conversation_id, "abandoned",
                             "The operator abandoned the stalled turn.")
            self.wake([conversation_id])
            return {"abandoned": True}
        raise NotFound(f"no operation {operation}")

    # --- internals ---------------------------------------------------------------------------

    def _next_step(self, conversation_id: str) -> tuple[bool, bool]:
        try:
            return self._env.store.fifo.next_step(conversation_id, to_ms(self._env.clock.now()))
        except Exception:
            log.exception("runnable check failed", extra={"conversation_id": conversation_id})
            return False, False

    def _retire_workspaces(self, ids: list[str] | None = None) -> None:
        """Hand the janitor every owed cleanup of a conversation with no live actor."""
        try:
            due = self._env.store.conversations.cleanups_due(ids)
        except Exception:
            log.exception("cannot read the workspace cleanups owed")
            return
        for cleanup in due:
            cid = cleanup.conversation_id
            if cid in self._live or cid in self._queued or cid in self._waiters \
                    or cid in self._retiring:
                continue  # a turn may run there: it is retired when the conversation is idle
            self._retiring.add(cid)
            assert self._janitor is not None
            self._janitor.submit(self._retire, cid,
                                 self._env.repo_of(self._env.route(cleanup.route), cleanup.repo))

    def _retire(self, conversation_id: str, repo: Path | None) -> None:
        """On the janitor thread: remove a clean worktree, keep a dirty one and say why."""
        env = self._env
        try:
            retired = env.workspaces.retire(conversation_id, repo=repo)
            kept = None if retired.removed else retired.detail
        except WorkspaceFailed as exc:
            kept = f"cleanup failed: {exc.detail}"
        except Exception:
            log.exception("workspace cleanup crashed", extra={"conversation_id": conversation_id})
            kept = "cleanup failed: see the log"
        if kept:
            log.warning("workspace kept", extra={"conversation_id": conversation_id, "why": kept})
        try:
            env.store.conversations.workspace_retired(conversation_id, kept)
        except Exception:
            log.exception("cannot record a workspace cleanup", extra={"conversation_id": conversation_id})
        finally:
            env.store.close()
        try:
            self._me.workspace_retired(conversation_id)
        except pykka.ActorDeadError:
            pass  # stopping: the next start retires it again if it is still owed

    def _fill(self) -> None:
        while self._ready and self._free:
            cid = self._ready.popleft()
            self._queued.discard(cid)
            if cid in self._live:
                continue
            slot = self._live[cid] = self._free.pop()
            slot.serve.defer(cid)


def run_one_turn(supervisor: Any, conversation_id: str) -> bool:
    """On an engine's thread: one turn of the conversation here, waited for; returns whether
    more work waits after it."""
    done: Future[bool] = Future()
    supervisor.serve_one.defer(conversation_id, done)
    # A message still queued when the actor stops is dropped unanswered (pykka answers only
    # asks): poll, so the job ends with the supervisor instead of holding its thread forever
    # (the engine's pool is joined at interpreter exit, and would hang it).
    while True:
        try:
            return done.result(timeout=JOB_POLL_SECONDS)
        except FutureTimeout:
            if not supervisor.actor_ref.is_alive():
                raise RuntimeError("wakeline is stopping") from None
