"""The DBOS engine: a DBOS Transact queue on PostgreSQL decides where and when each
conversation's next turn runs, on any of the hosts that share the database (decision 0025).

- One DBOS queue, `wakeline-turns`, partitioned by conversation id with
  `partition_concurrency = 1`: across every host, at most one job of a conversation runs
  at a time, and its waiting jobs keep their order. `worker_concurrency` is one host's
  turn slots (`agent.max_concurrent_turns`).
- A job is a *wake*, not a turn: its first step clears the conversation's waiting-turn
  flag (`models/wakes.py`), its second runs one turn on this host (`run_turn`: the
  supervisor's claim, the agent, the finalisation: wakeline's own transactions), and when
  more work waits it enqueues its successor at the back of the partition. The FIFO,
  batching, coalescing and exactly-once completion stay wakeline's; DBOS never sees a
  delivery.
- Coalescing: `wake` flips the flags of the conversations it is given and enqueues one
  job per flip, named `wake:<conversation>:<generation>`: a name enqueued twice is one
  job, so the start-up and takeover sweeps simply enqueue every flagged conversation again.
- Hosts: each host is a DBOS executor whose id is `scale.host_id`. It heartbeats in
  `wakeline_hosts` on the database's clock. A host silent for `host_timeout_seconds` is
  dead: one live host (an advisory lock picks it) repairs the store for that host's
  turns (`repair_host`: they are due for a re-run) and asks DBOS to recover that
  executor's unfinished jobs, which any host then runs. A restarted host with the same
  id recovers its own at launch (after `Supervisor.recover`, scoped to it).
- DBOS runs its own threads (queue workers, executor pool: at most the worker concurrency
  and `DBOS_SPARE_EXECUTORS`; the unnamed ones are named `dbos-<function>` at launch);
  `DbosScheduler` starts and stops it from a thread of its own and enqueues from another
  (the waker), so no actor and no request thread waits on DBOS.

DBOS is a process-wide singleton (one `DBOS(config=...)` per process, workflows
registered before `launch`): one scheduler per process, and the functions its workflow
reaches are bound in `_bound` before launch (the one piece of module state: DBOS
registers workflows by name, process-wide).

Pinned: `DBOS_VERSION` (the `wakeline[dbos]` extra) and `APPLICATION_VERSION`. DBOS
recovers and dequeues only workflows of its own application version; left to itself it
derives the version from a hash of the workflow's source, so two hosts on different
wakeline builds would never take over each other's turns. The version changes only when
the workflow's steps change shape.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from wakeline.scheduling.base import HostView
from wakeline.scheduling.roles import Roles
from wakeline.service.parts import Check
from wakeline.service.threads import DBOS_SPARE_EXECUTORS, name_new_threads

log = logging.getLogger(__name__)

DBOS_VERSION = "3.4.0"
# Change when `wake`'s sequence of steps changes: a recovered workflow replays its recorded
# steps, so a host must only recover workflows whose code has the same shape.
APPLICATION_VERSION = "wakeline-turns-2"
QUEUE_NAME = "wakeline-turns"
APP_NAME = "wakeline"
# How often a queue worker looks for runnable jobs: the longest a woken turn waits for it.
POLL_SECONDS = 0.05
# A job runs at most this many turns, then hands its conversation to a fresh job at the back
# of its partition (when work is left) and frees its slot: a newly woken conversation waits
# for a slot at most one turn of each busy one. More turns a job save DBOS's enqueue and
# dequeue per turn (`bench/hosts.py --turns-per-job`).
TURNS_PER_JOB = 1
# The doctor fails a host whose clock is further than this from the database's.
MAX_SKEW_MS = 2000

_NOW_MS = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
_BEAT = (
    "INSERT INTO wakeline_hosts (id, started_at, last_seen, running, skew_ms) VALUES"
    f" (%s, {_NOW_MS}, {_NOW_MS}, %s, %s - {_NOW_MS}) ON CONFLICT (id) DO UPDATE SET"
    f" last_seen = {_NOW_MS}, running = EXCLUDED.running, skew_ms = EXCLUDED.skew_ms"
)
_DEAD = (
    f"SELECT id, last_seen FROM wakeline_hosts WHERE id <> %s AND last_seen < {_NOW_MS} - %s"
    " AND (recovered_at IS NULL OR recovered_at < last_seen)"
)
_HOSTS = (
    f"SELECT id, last_seen, last_seen >= {_NOW_MS} - %s, running, skew_ms FROM wakeline_hosts"
    " ORDER BY id"
)

_bound: dict[str, Callable[..., Any]] = {}
_registered: dict[str, Any] = {}


def _register_workflow() -> Any:
    """Declare the wake workflow and its steps (once per process, before launch)."""
    if "wake" in _registered:
        return _registered["wake"]
    from dbos import DBOS

    @DBOS.step(name="wakeline.begin")
    def begin(conversation_id: str, generation: int) -> None:
        _bound["begin_wake"](conversation_id, generation)

    @DBOS.step(name="wakeline.turn")
    def turn(conversation_id: str) -> bool:
        return bool(_bound["run_turn"](conversation_id))

    @DBOS.workflow(name="wakeline.wake")
    def wake(conversation_id: str, generation: int, limit: int = TURNS_PER_JOB,
             link: int = 0) -> int:
        begin(conversation_id, generation)  # a wake after this needs a job of its own
        turns, more = 0, True
        while more and turns < limit:
            more = turn(conversation_id)
            turns += 1
        if more:
            # The successor (a recorded child: the same one on a replay) queues behind
            # whatever was enqueued for this conversation meanwhile.
            from dbos import SetEnqueueOptions, SetWorkflowID

            base = str(DBOS.workflow_id).rsplit("#", 1)[0]
            with SetWorkflowID(f"{base}#{link + 1}"), \
                    SetEnqueueOptions(queue_partition_key=conversation_id):
                DBOS.retrieve_queue(QUEUE_NAME).enqueue(wake, conversation_id, generation, limit,
                                                        link + 1)
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


def sqlalchemy_url(url: str) -> str:
    """DBOS takes a SQLAlchemy URL: psycopg 3 is the driver wakeline's store uses too."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    return url


class DbosScheduler:
    """One host of the DBOS engine: owns the DBOS runtime, the heartbeat and takeovers (one
    thread), and the enqueueing of wake jobs (the waker thread).

    `run_turn(conversation_id) -> bool` runs one turn here and says whether more work
    waits; it runs on DBOS's executor threads, and may run again for the same turn after
    a host died (the store resumes the surviving turn; completion stays exactly-once).
    `flags` (`WakeFlags`) coalesce wakes into jobs; `begin_wake(conversation_id,
    generation)` is a job's first step (default: the flags' `begin`). `repair_host(host)`
    makes a dead host's turns due again and returns their conversations. `running()`:
    this host's running turns, for the heartbeat.
    """

    def __init__(self, settings: DbosSettings, run_turn: Callable[[str], bool], *,
                 flags: Any = None,
                 begin_wake: Callable[[str, int], None] | None = None,
                 repair_host: Callable[[str], list[str]] | None = None,
                 running: Callable[[], int] | None = None,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.settings = settings
        self._run_turn = run_turn
        self._flags = flags
        self._begin_wake = begin_wake or (flags.begin if flags is not None else (lambda c, g: None))
        self._repair_host = repair_host or (lambda host: [])
        self._running = running or (lambda: 0)
        self._clock_ms = clock_ms
        self._thread: threading.Thread | None = None
        self._waker: threading.Thread | None = None
        self._woken: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._grace = 0
        self._failure: BaseException | None = None
        self._queue: Any = None
        self._wake_workflow: Any = None
        self.recoveries: list[tuple[str, float, int]] = []  # (dead host, seconds silent, jobs)
        self.roles = Roles(settings.database_url, settings.host_id)

    @property
    def host_id(self) -> str:
        """This host's id (its DBOS executor id)."""
        return self.settings.host_id

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Launch DBOS in the scheduler's thread, enqueue what a crash left flagged, and
        return once jobs are taken."""
        self._thread = threading.Thread(target=self._main, name="dbos", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._failure is not None:
            self._stopping.set()
            raise RuntimeError(f"DBOS did not start: {self._failure!r}")
        self._waker = threading.Thread(target=self._wake_loop, name="dbos-waker", daemon=True)
        self._waker.start()
        self._sweep_flags()

    def stop(self, grace_seconds: int = 0) -> None:
        """Stop taking jobs and shut DBOS down (running jobs get `grace_seconds`); a job
        still running stays DBOS's, recovered by this host's next start or a takeover."""
        self._grace = grace_seconds
        self._stopping.set()
        self._woken.put(None)
        for thread in (self._waker, self._thread):
            if thread is not None:
                thread.join(grace_seconds + 30)

    def _main(self) -> None:
        from dbos import DBOS

        s = self.settings
        try:
            _bound["run_turn"] = self._run_turn
            _bound["begin_wake"] = self._begin_wake
            self._wake_workflow = _register_workflow()
            DBOS(config={
                "name": APP_NAME,
                "system_database_url": sqlalchemy_url(s.system_database_url or s.database_url),
                "executor_id": s.host_id,
                "application_version": s.application_version,
                "log_level": "WARNING",
                # Unbounded by default: a thread per job running at once. Ours are at most
                # the queue's worker concurrency; the spare run DBOS's own writes.
                "max_executor_threads": s.worker_concurrency + DBOS_SPARE_EXECUTORS,
            })
            before = {t.ident for t in threading.enumerate()}
            DBOS.launch()
            name_new_threads(before, "dbos")
            self._queue = DBOS.register_queue(
                QUEUE_NAME,
                partition_concurrency=1,
                worker_concurrency=s.worker_concurrency,
                global_concurrency=s.global_concurrency,
                polling_interval_sec=s.poll_seconds,
                on_conflict="always_update",
            )
            self._beat()
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._failure = exc
            self._ready.set()
            return
        self.roles.poll()  # the parts this host runs start before `start` returns
        self._ready.set()
        beat = s.heartbeat_seconds or max(0.2, s.host_timeout_seconds / 5)
        while not self._stopping.wait(beat):
            try:
                self._beat()
                self._take_over_dead_hosts()
            except Exception:
                log.exception("heartbeat failed")
            self.roles.poll()  # a dead holder's roles are free: one live host takes each
        self.roles.release()
        DBOS.destroy(workflow_completion_timeout_sec=self._grace)
        # A job still running here ends when the supervisor stops (its turn stays for the
        # next start); DBOS, gone, could only log that it cannot record that ending.
        logging.getLogger("dbos").setLevel(logging.CRITICAL)

    # --- wakes -----------------------------------------------------------------------------

    def wake(self, conversation_ids: Iterable[str]) -> None:
        """These conversations need a turn: a job each, unless one is due already. Returns at
        once; the waker flips the flags and enqueues."""
        ids = list(conversation_ids)
        if ids:
            self._woken.put(ids)

    def enqueue(self, conversation_id: str, generation: int) -> None:
        """Enqueue the conversation's job of this generation (twice is once)."""
        from dbos import SetEnqueueOptions, SetWorkflowID

        with SetWorkflowID(f"wake:{conversation_id}:{generation}"), \
                SetEnqueueOptions(queue_partition_key=conversation_id):
            self._queue.enqueue(self._wake_workflow, conversation_id, generation,
                                self.settings.turns_per_job, 0)

    def _wake_loop(self) -> None:
        """The waker: every wake waiting is flipped in one transaction, then enqueued."""
        while True:
            batch = self._woken.get()
            ids: set[str] = set()
            while batch is not None:
                ids.update(batch)
                try:
                    batch = self._woken.get_nowait()
                except queue.Empty:
                    break
            if ids:
                self._flip_and_enqueue(ids)
            if batch is None or self._stopping.is_set():
                return

    def _flip_and_enqueue(self, ids: Iterable[str]) -> None:
        try:
            due = self._flags.flip(ids) if self._flags is not None else [(cid, 0) for cid in ids]
            for cid, generation in due:
                self.enqueue(cid, generation)
        except Exception:
            # The flags stay set: the next sweep (start-up, a takeover) enqueues them.
            log.exception("could not enqueue wake jobs")

    def _sweep_flags(self) -> None:
        """Enqueue the job of every flagged conversation: a flip whose enqueue a crash cut off
        (here or on a dead host). A job that exists already is not enqueued again."""
        if self._flags is None:
            return
        try:
            for cid, generation in self._flags.waiting():
                self.enqueue(cid, generation)
        except Exception:
            log.exception("could not sweep the waiting-turn flags")

    # --- hosts -----------------------------------------------------------------------------

    def hosts(self) -> list[HostView]:
        """Every host that ever joined, alive or not (a dead one until it returns)."""
        with self._connect() as conn:
            rows = conn.execute(_HOSTS, (int(self.settings.host_timeout_seconds * 1000),)).fetchall()
        return [HostView(r[0], int(r[1]), bool(r[2]), int(r[3]), int(r[4])) for r in rows]

    def checks(self) -> list[Check]:
        """The doctor's items: the hosts sharing the work, and their clocks against the
        database's (a skew past `MAX_SKEW_MS` fails: hosts order turns by the database's
        clock, but logs, journal times and token expiry use their own)."""
        try:
            hosts = self.hosts()
        except Exception as exc:  # noqa: BLE001 - the doctor reports, never raises
            return [Check("hosts", False, f"cannot read wakeline_hosts ({exc.__class__.__name__})",
                          "check scale.database_url and that PostgreSQL is up")]
        alive = [h for h in hosts if h.alive]
        dead = [h.id for h in hosts if not h.alive]
        skewed = [f"{h.id} {h.skew_ms:+d} ms" for h in alive if abs(h.skew_ms) > MAX_SKEW_MS]
        return [
            Check("hosts", bool(alive), f"{len(alive)} of {len(hosts)} alive (this one: "
                  f"{self.host_id})" + (f"; not alive: {', '.join(dead)}" if dead else "")),
            Check("clock_skew", not skewed,
                  "clocks within %d ms of the database's" % MAX_SKEW_MS if not skewed
                  else "off the database's clock: " + ", ".join(skewed),
                  "run NTP (systemd-timesyncd, chrony) on every host" if skewed else None),
        ]

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.settings.database_url, autocommit=True, connect_timeout=10)

    def _beat(self) -> None:
        with self._connect() as conn:
            conn.execute(_BEAT, (self.settings.host_id, int(self._running()), self._clock_ms()))

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
                    # The store first: its turns are due again, so the recovered jobs resume them.
                    conversations = self._repair_host(host)
                    handles = DBOS._recover_pending_workflows([host])
                    conn.execute(f"UPDATE wakeline_hosts SET recovered_at = {_NOW_MS}, running = 0"
                                 " WHERE id = %s", (host,))
                silent = conn.execute(f"SELECT ({_NOW_MS} - %s) / 1000.0", (last_seen,)).fetchone()[0]
                self.recoveries.append((host, float(silent), len(handles)))
                log.warning("took over a dead host's turns",
                            extra={"host": host, "silent_seconds": float(silent),
                                   "jobs": len(handles), "conversations": len(conversations)})
                self.wake(conversations)
                self._sweep_flags()  # what the dead host flipped and never enqueued


def _lock_key(name: str) -> int:
    return zlib.crc32(b"wakeline:" + name.encode()) | (0x5A18 << 32)
