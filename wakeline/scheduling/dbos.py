"""The DBOS engine (prototype, issue 25): a DBOS Transact queue on PostgreSQL decides
where and when each conversation's next turn runs.

The design, as measured by `bench/dbos_hosts.py`:

- One DBOS queue, `wakeline-turns`, partitioned by conversation id with
  `partition_concurrency = 1`: across every host, at most one workflow of a
  conversation is PENDING (running) at a time, and its ENQUEUED ones wait in
  (priority, created_at, workflow id) order. `worker_concurrency` caps one host's
  turns (`agent.max_concurrent_turns`), `global_concurrency` the cluster's.
- A workflow is a *wake job*, not a turn: `wake(conversation)` runs the caller's
  `run_turn(conversation)` as a DBOS step, again and again, until it says there is
  no more runnable work. The FIFO order, batching, coalescing of deliveries, the
  runner and exactly-once completion stay wakeline's (the store); DBOS never sees
  a delivery.
- Coalescing: the caller enqueues a wake job only when its waiting-turn flag flips
  (in the admission transaction), and names it `wake:<conversation>:<generation>`:
  enqueueing the same name again is a no-op, so a sweep after a crash (flag set,
  job never enqueued) can simply enqueue again.
- Hosts: each host is a DBOS executor whose id is `scale.host_id`. It heartbeats in
  `wakeline_hosts` (database time, so host clocks may differ). A host silent for
  `host_timeout_seconds` is dead: one live host (an advisory lock picks it) asks
  DBOS to recover that executor's PENDING workflows (re-enqueued in place, so the
  partition's order and exclusion hold); any host then runs them. A restarted host
  with the same id recovers its own at launch.
- DBOS runs its own threads (queue workers, notification listener, executor pool);
  `DbosScheduler` starts and stops it from one thread of its own, and DBOS reaches
  wakeline only through the `run_turn` function it is given.

DBOS is a process-wide singleton (one `DBOS(config=...)` per process, workflows
registered before `launch`): one scheduler per process.

Pinned: `DBOS_VERSION` (the `wakeline[dbos]` extra) and `APPLICATION_VERSION`.
DBOS recovers and dequeues only workflows of its own application version; left to
itself it derives the version from a hash of the workflow functions' source, so two
hosts on different wakeline builds would never take over each other's turns. The
version is pinned here and changes only when the workflow's steps change shape.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from wakeline.scheduling import HostView

log = logging.getLogger(__name__)

DBOS_VERSION = "3.4.0"
# Change when `_wake`'s sequence of steps changes: a recovered workflow replays its recorded
# steps, so a host must only recover workflows whose code has the same shape.
APPLICATION_VERSION = "wakeline-turns-1"
QUEUE_NAME = "wakeline-turns"
APP_NAME = "wakeline"
# How often a queue worker looks for runnable workflows: the latency a woken turn waits at most.
POLL_SECONDS = 0.05
# A wake job runs at most this many turns, then hands its conversation to a fresh job at the
# back of its partition (when work is left) and frees its worker slot. One turn a job bounds
# how long a recovered or newly woken conversation waits for a slot to one turn; more turns a
# job save DBOS's enqueue and dequeue per turn (see bench/dbos_hosts.py, --turns-per-job).
TURNS_PER_JOB = 1

_HOSTS_DDL = (
    "CREATE TABLE IF NOT EXISTS wakeline_hosts (id TEXT PRIMARY KEY, started_at BIGINT NOT NULL,"
    " last_seen BIGINT NOT NULL, running BIGINT NOT NULL DEFAULT 0, recovered_at BIGINT)"
)
_NOW_MS = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
_BEAT = (
    "INSERT INTO wakeline_hosts (id, started_at, last_seen, running) VALUES"
    f" (%s, {_NOW_MS}, {_NOW_MS}, %s) ON CONFLICT (id) DO UPDATE SET last_seen = {_NOW_MS},"
    " running = EXCLUDED.running"
)
_DEAD = (
    f"SELECT id, last_seen FROM wakeline_hosts WHERE id <> %s AND last_seen < {_NOW_MS} - %s"
    " AND (recovered_at IS NULL OR recovered_at < last_seen)"
)
_HOSTS = f"SELECT id, last_seen, last_seen >= {_NOW_MS} - %s, running FROM wakeline_hosts ORDER BY id"

# The one set of callables DBOS's workflow reaches: bound by the (single) scheduler of
# this process before launch.
_bound: dict[str, Callable[[str], Any]] = {}
_registered: dict[str, Any] = {}


def _register_workflow() -> Any:
    """Declare the wake workflow and its step (once per process, before launch)."""
    if "wake" in _registered:
        return _registered["wake"]
    from dbos import DBOS

    @DBOS.step(name="wakeline.begin")
    def begin(conversation_id: str) -> None:
        _bound["begin_wake"](conversation_id)

    @DBOS.step(name="wakeline.turn")
    def turn(conversation_id: str) -> bool:
        return _bound["run_turn"](conversation_id)

    @DBOS.workflow(name="wakeline.wake")
    def wake(conversation_id: str, limit: int = TURNS_PER_JOB, link: int = 0) -> int:
        begin(conversation_id)  # clears the waiting-turn flag: a wake after this enqueues anew
        turns = 0
        while turns < limit and turn(conversation_id):
            turns += 1
        if turns >= limit:
            # Maybe more work: the next job (a recorded child: the same on a replay) queues
            # behind whatever was enqueued for this conversation meanwhile.
            from dbos import SetEnqueueOptions, SetWorkflowID

            base = str(DBOS.workflow_id).rsplit("#", 1)[0]
            with SetWorkflowID(f"{base}#{link + 1}"), \
                    SetEnqueueOptions(queue_partition_key=conversation_id):
                DBOS.retrieve_queue(QUEUE_NAME).enqueue(wake, conversation_id, limit, link + 1)
        return turns

    _registered["wake"] = wake
    return wake


@dataclass(frozen=True)
class DbosSettings:
    """What a host needs to join: the database, its id, and its share of the turns."""

    database_url: str  # the store's database; the hosts table lives here
    host_id: str
    worker_concurrency: int
    system_database_url: str | None = None  # DBOS's own tables: default the same database
    global_concurrency: int | None = None
    host_timeout_seconds: float = 30.0
    heartbeat_seconds: float | None = None  # default: a fifth of the timeout
    application_version: str = APPLICATION_VERSION
    poll_seconds: float = POLL_SECONDS
    turns_per_job: int = TURNS_PER_JOB


def _sqlalchemy_url(url: str) -> str:
    """DBOS takes a SQLAlchemy URL: psycopg 3 is the driver wakeline's store uses too."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    return url


class DbosScheduler:
    """A host of the DBOS engine: owns the DBOS runtime (in a thread of its own) and the
    heartbeat, and enqueues wake jobs.

    `begin_wake(conversation_id)` clears the conversation's waiting-turn flag (the job's
    first step). `run_turn(conversation_id) -> bool` runs one turn (claim, run the agent, finalise:
    each wakeline's own transaction) and says whether one ran; it may run again for the
    same turn after a host died (the store resumes the surviving turn, and completion
    stays exactly-once). It runs on DBOS's executor threads.
    """

    def __init__(self, settings: DbosSettings, run_turn: Callable[[str], bool],
                 begin_wake: Callable[[str], None] | None = None,
                 running: Callable[[], int] | None = None) -> None:
        self.settings = settings
        self._run_turn = run_turn
        self._begin_wake = begin_wake or (lambda _cid: None)
        self._running = running or (lambda: 0)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._queue: Any = None
        self._wake_workflow: Any = None
        self.recoveries: list[tuple[str, float, int]] = []  # (dead host, seconds silent, count)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Launch DBOS in the scheduler's thread; return once it takes work."""
        self._thread = threading.Thread(target=self._main, name="dbos", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            raise RuntimeError(f"DBOS did not start: {self._failure!r}")

    def stop(self, grace_seconds: int = 0) -> None:
        """Stop taking wake jobs and shut DBOS down (running steps get `grace_seconds`)."""
        self._grace = grace_seconds
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(grace_seconds + 30)

    def _main(self) -> None:
        from dbos import DBOS

        s = self.settings
        try:
            _bound["run_turn"] = self._run_turn
            _bound["begin_wake"] = self._begin_wake  # type: ignore[assignment]
            self._wake_workflow = _register_workflow()
            url = _sqlalchemy_url(s.system_database_url or s.database_url)
            DBOS(config={
                "name": APP_NAME,
                "system_database_url": url,
                "executor_id": s.host_id,
                "application_version": s.application_version,
                "log_level": "WARNING",
            })
            DBOS.launch()
            self._queue = DBOS.register_queue(
                QUEUE_NAME,
                partition_concurrency=1,
                worker_concurrency=s.worker_concurrency,
                global_concurrency=s.global_concurrency,
                polling_interval_sec=s.poll_seconds,
                on_conflict="always_update",
            )
            self._hosts_table()
            self._beat()
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        beat = s.heartbeat_seconds or max(0.2, s.host_timeout_seconds / 5)
        while not self._stopping.wait(beat):
            try:
                self._beat()
                self._take_over_dead_hosts()
            except Exception:
                log.exception("heartbeat failed")
        DBOS.destroy(workflow_completion_timeout_sec=getattr(self, "_grace", 0))

    # --- the scheduler ---------------------------------------------------------------------

    def wake(self, conversation_ids: Iterable[str], generation: int | str = 0) -> None:
        """Enqueue a wake job per conversation; the same (conversation, generation) twice
        is one job."""
        from dbos import SetEnqueueOptions, SetWorkflowID

        for cid in conversation_ids:
            with SetWorkflowID(f"wake:{cid}:{generation}"), \
                    SetEnqueueOptions(queue_partition_key=cid):
                self._queue.enqueue(self._wake_workflow, cid, self.settings.turns_per_job, 0)

    def hosts(self) -> list[HostView]:
        with self._connect() as conn:
            rows = conn.execute(_HOSTS, (int(self.settings.host_timeout_seconds * 1000),)).fetchall()
        return [HostView(r[0], int(r[1]), bool(r[2]), int(r[3])) for r in rows]

    # --- heartbeats and takeover -----------------------------------------------------------

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=10)

    def _hosts_table(self) -> None:
        with self._connect() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_lock_key("hosts-ddl"),))
            try:
                conn.execute(_HOSTS_DDL)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_lock_key("hosts-ddl"),))

    def _beat(self) -> None:
        with self._connect() as conn:
            conn.execute(_BEAT, (self.settings.host_id, int(self._running())))

    def _take_over_dead_hosts(self) -> None:
        from dbos import DBOS

        timeout_ms = int(self.settings.host_timeout_seconds * 1000)
        with self._connect() as conn:
            dead = conn.execute(_DEAD, (self.settings.host_id, timeout_ms)).fetchall()
            for host, last_seen in dead:
                with conn.transaction():
                    # One taker per dead host: the others skip it while the lock is held.
                    got = conn.execute("SELECT pg_try_advisory_xact_lock(%s)",
                                       (_lock_key("recover:" + host),)).fetchone()[0]
                    if not got:
                        continue
                    still = conn.execute(
                        "SELECT 1 FROM wakeline_hosts WHERE id = %s AND last_seen = %s"
                        " AND (recovered_at IS NULL OR recovered_at < last_seen)",
                        (host, last_seen)).fetchone()
                    if still is None:
                        continue  # it came back, or another host took over meanwhile
                    handles = DBOS._recover_pending_workflows([host])
                    conn.execute(f"UPDATE wakeline_hosts SET recovered_at = {_NOW_MS} WHERE id = %s",
                                 (host,))
                silent = conn.execute(f"SELECT ({_NOW_MS} - %s) / 1000.0", (last_seen,)).fetchone()[0]
                self.recoveries.append((host, float(silent), len(handles)))
                log.warning("took over a dead host's turns",
                            extra={"host": host, "silent_seconds": float(silent),
                                   "workflows": len(handles)})


def _lock_key(name: str) -> int:
    return zlib.crc32(b"wakeline:" + name.encode()) | (0x5A18 << 32)


def now_ms() -> int:
    return int(time.time() * 1000)
