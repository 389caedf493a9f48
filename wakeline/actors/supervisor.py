"""Supervisor: which conversations have live actors, and how many turns run at once.

A conversation is a row in the store, not a thread: only conversations that
hold one of the `max_concurrent_turns` slots have a live ConversationActor.
Others with work wait in a FIFO queue, so 10,000 busy conversations cost
10,000 queue entries, not 10,000 threads. A conversation that finishes a turn
keeps its slot only while nobody else is waiting.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Iterable

import pykka

from wakeline.actors.conversation import ConversationActor, TurnEnv
from wakeline.clock import to_ms
from wakeline.errors import Conflict, NotFound
from wakeline.providers.linear import replies

log = logging.getLogger(__name__)

# Every this many ticks the supervisor rescans the store for work nobody woke
# (a wake lost to a busy database, a claim that failed): nothing waits forever.
SWEEP_EVERY_TICKS = 20


class Supervisor(pykka.ThreadingActor):
    """Owns the map conversation id -> live actor and the turn slots."""

    def __init__(self, env: TurnEnv, max_concurrent_turns: int) -> None:
        super().__init__()
        self._env = env
        self._slots = max_concurrent_turns
        self._live: dict[str, Any] = {}
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._ticks = 0

    def on_start(self) -> None:
        """Name the thread."""
        threading.current_thread().name = "supervisor"

    def on_stop(self) -> None:
        """Stop every conversation actor (their children get SIGTERM)."""
        for ref in self._live.values():
            ref.stop(block=False)
        self._live.clear()
        self._env.store.close()

    # --- messages ----------------------------------------------------------------------------

    def recover(self) -> int:
        """Startup: repair the store, then wake every conversation with work. Returns how many."""
        now = to_ms(self._env.clock.now())
        ids = self._env.store.fifo.recover(
            now, lambda cid, sessions: replies.for_sessions(sessions, "thought", replies.RERUN, cid))
        self._env.kick_tracker()
        self.wake(ids)
        log.info("recovered", extra={"conversations_with_work": len(ids)})
        return len(ids)

    def wake(self, conversation_ids: Iterable[str]) -> None:
        """New work for these conversations (told by the admission writer and the ticker)."""
        for cid in conversation_ids:
            live = self._live.get(cid)
            if live is not None:
                live.proxy().wake()
            elif cid not in self._queued:
                self._queued.add(cid)
                self._ready.append(cid)
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
        for ref in self._live.values():
            ref.proxy().tick()

    def turn_ended(self, conversation_id: str) -> None:
        """A live actor has nothing running: run it again, queue it behind others, or stop it."""
        ref = self._live.get(conversation_id)
        if ref is None:
            return
        runnable = self._runnable(conversation_id)
        if runnable and not self._ready:
            ref.proxy().run_next()
            return
        del self._live[conversation_id]
        ref.stop(block=False)
        if runnable and conversation_id not in self._queued:
            self._queued.add(conversation_id)
            self._ready.append(conversation_id)
        self._fill()

    def operate(self, conversation_id: str, operation: str) -> dict[str, Any]:
        """Operator commands: stop, reset, retry, abandon. Asked by HTTP threads, never actors."""
        fifo, now = self._env.store.fifo, to_ms(self._env.clock.now())
        if not self._env.store.conversation_exists(conversation_id):
            raise NotFound(f"no conversation {conversation_id}")
        live = self._live.get(conversation_id)
        if operation == "stop":
            stopped = live is not None and live.proxy().stop_turn().get(timeout=10)
            if not stopped:
                raise Conflict("no turn is running")
            return {"stopped": True}
        if operation == "reset":
            if live is not None:
                answer = live.proxy().reset().get(timeout=10)
            else:
                outcome = fifo.reset(conversation_id, now)
                answer = {"sessionId": outcome.session_id if outcome else None,
                          "completed": outcome.completed if outcome else 0}
            self.wake([conversation_id])
            self._env.kick_tracker()  # the reset answered the sessions whose work it dropped
            return answer
        if operation == "retry":
            if not fifo.retry(conversation_id, now):
                raise Conflict("the conversation is not stalled")
            self.wake([conversation_id])
            return {"retried": True}
        if operation == "abandon":
            if not fifo.abandon(conversation_id, now):
                raise Conflict("the conversation is not stalled")
            self.wake([conversation_id])
            return {"abandoned": True}
        raise NotFound(f"no operation {operation}")

    # --- internals ---------------------------------------------------------------------------

    def _runnable(self, conversation_id: str) -> bool:
        try:
            return self._env.store.fifo.runnable(conversation_id, to_ms(self._env.clock.now()))
        except Exception:
            log.exception("runnable check failed", extra={"conversation_id": conversation_id})
            return False

    def _fill(self) -> None:
        me = self.actor_ref.proxy()
        while self._ready and len(self._live) < self._slots:
            cid = self._ready.popleft()
            self._queued.discard(cid)
            if cid in self._live:
                continue
            ref = ConversationActor.start(cid, self._env, me)
            self._live[cid] = ref
            ref.proxy().run_next()
