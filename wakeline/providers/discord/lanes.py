"""Lanes: one queue of thread jobs per conversation, one job running at a time.

A conversation's jobs run in the order they were asked for, so its thread is ensured
before an answer is posted in it, and different conversations never wait for each
other. A job that failed for a reason that may pass keeps its place at the head of
its lane until its backoff is over. Plain bookkeeping, owned by the DiscordControl
actor and only ever touched from its thread; `start` hands a job to the workers.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Callable, Sequence

from wakeline.errors import (
    DiscordError,
    DiscordRateLimited,
    DiscordUnauthorized,
    DiscordUnavailable,
)
from wakeline.providers.discord.keeper import Job

log = logging.getLogger(__name__)

LANE_MAX_JOBS = 200  # a conversation whose thread is unreachable keeps at most this many


class Lanes:
    """The conversations' job queues.

    Args:
        start: runs a job (on a worker); `finished` must be called when it ends.
        monotonic: the clock, in seconds.
        backoff_seconds: the waits before the attempts after a transient failure.
    """

    def __init__(self, start: Callable[[Job], None], monotonic: Callable[[], float],
                 backoff_seconds: Sequence[float]) -> None:
        self._start = start
        self._now = monotonic
        self._backoff = tuple(backoff_seconds)
        self._lanes: dict[str, deque[Job]] = {}
        self._running: set[str] = set()

    def add(self, job: Job) -> bool:
        """Queue `job` behind its conversation's work (a catch-up goes first: the thread's
        live messages wait for it, and it needs nothing that comes before it). False when
        it was dropped (too much waits for the thread)."""
        cid = job.conversation_id
        lane = self._lanes.setdefault(cid, deque())
        waiting = self._waiting(cid)
        if job.kind in ("ensure", "answers") and waiting and waiting[-1].kind == job.kind:
            return True  # the one that waits covers every reason to run it until it runs
        if len(lane) >= LANE_MAX_JOBS:
            log.warning("discord work dropped: too much waiting for one thread",
                        extra={"conversation_id": cid, "kind": job.kind})
            return False
        if job.kind == "catch_up":
            lane.insert(1 if cid in self._running else 0, job)
        else:
            lane.append(job)
        self.pump(cid)
        return True

    def waits(self, cid: str, kind: str) -> bool:
        """True when a job of this kind waits (not running) in the conversation's lane."""
        return any(job.kind == kind for job in self._waiting(cid))

    def pump(self, cid: str) -> None:
        """Start the lane's head job, unless one runs or the head's retry is not due."""
        if cid in self._running:
            return
        lane = self._lanes.get(cid)
        if not lane:
            self._lanes.pop(cid, None)
            return
        if lane[0].due > self._now():
            return  # a retry waits; a later pump starts it
        self._running.add(cid)
        self._start(lane[0])

    def pump_all(self) -> None:
        """Start every lane whose head is due (the ticker's beat)."""
        for cid in list(self._lanes):
            self.pump(cid)

    def finished(self, job: Job, error: DiscordError | None) -> bool:
        """`job` ended: True when it is done (or dropped), False when it waits for a retry.
        The lane's next job is not started here: call `pump`."""
        cid = job.conversation_id
        self._running.discard(cid)
        if error is not None and self._retry(job, error):
            return False
        lane = self._lanes.get(cid)
        if lane and lane[0] is job:
            lane.popleft()
        return True

    def size(self) -> int:
        """Jobs queued, the running ones included."""
        return sum(len(lane) for lane in self._lanes.values())

    def _waiting(self, cid: str) -> list[Job]:
        lane = list(self._lanes.get(cid, ()))
        return lane[1:] if cid in self._running else lane

    def _retry(self, job: Job, error: DiscordError) -> bool:
        """Keep `job` at the head of its lane for a later attempt when the failure may pass."""
        transient = isinstance(error, (DiscordUnavailable, DiscordRateLimited))
        if not transient or job.attempt >= len(self._backoff):
            level = logging.ERROR if isinstance(error, DiscordUnauthorized) else logging.WARNING
            log.log(level, "discord job dropped", extra={
                "kind": job.kind, "conversation_id": job.conversation_id, "error": error.code,
                "detail": error.detail, "attempts": job.attempt + 1})
            return False
        wait = self._backoff[job.attempt]
        if isinstance(error, DiscordRateLimited):
            wait = max(wait, error.retry_after)
        job.attempt += 1
        job.due = self._now() + wait
        log.info("discord job waits for a retry", extra={
            "kind": job.kind, "conversation_id": job.conversation_id, "error": error.code,
            "retry_in_seconds": wait})
        return True
