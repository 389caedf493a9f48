"""The connections' sync loops: nio's asyncio loop, in one thread of its own.

Every nio client of the process runs on one thread (`LoopThread`, named `matrix`): nio's
crypto store rebinds its peewee models, which are process-wide, around each call, so two
threads using two stores at once would pull the binding from under each other. One thread
serialises them for free, and costs less than one per connection.

Each connection's `SyncLoop` is a task there: it opens the connection's client, runs the
start-up checks, then syncs from the cursor wakeline keeps, hands each page to `handle`
(the connection actor, on another thread) and waits for its answer before it syncs again:
the answer is the cursor to sync from next, which the actor has committed with the page's
events, or the old one when the page must be fetched again. Nothing else runs on the loop
but the reads and sends other threads `submit` (they need the client, and its HTTP session
belongs to the loop).

Errors never end the loop: a homeserver that is down, slow or refusing is retried from the
same cursor after a wait that doubles from half a second up to `retry_max_seconds`, and
`state()` says what is wrong meanwhile. Only a client that cannot be opened, or a token that
belongs to someone else (`prepare` answers False), stops it for good: that takes a person.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

from wakeline.errors import MatrixUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
FIRST_RETRY_SECONDS = 0.5
HANDLE_TIMEOUT_SECONDS = 120.0  # a commit waits for SQLite's writer lock, never this long
STOP_TIMEOUT_SECONDS = 30.0
# aiohttp's DNS lookups (a homeserver's name) run on this many named threads, not on
# asyncio's default pool (unnamed, up to 32 with the CPUs).
MATRIX_IO_THREADS = 2


class LoopThread:
    """The thread and asyncio loop every Matrix connection of the process runs on."""

    def __init__(self, name: str = "matrix") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (run coroutines on it with `run`)."""
        assert self._loop is not None, "the loop thread has not started"
        return self._loop

    def start(self) -> None:
        """Start the thread (once); returns when its loop runs."""
        with self._lock:
            if self._thread is not None:
                return
            self._loop = asyncio.new_event_loop()
            # Shut down with the loop (`_run`).
            self._loop.set_default_executor(ThreadPoolExecutor(
                MATRIX_IO_THREADS, thread_name_prefix=f"{self._name}-io"))
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._running.wait(STOP_TIMEOUT_SECONDS)

    def alive(self) -> bool:
        """True while the loop runs."""
        return self._thread is not None and self._thread.is_alive() and self._running.is_set()

    def run(self, coro: Awaitable[T]) -> Future[T]:
        """Start a coroutine on the loop from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stop the loop (after its tasks were cancelled by their owners) and the thread."""
        if self._thread is not None and self._thread.is_alive() and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_TIMEOUT_SECONDS)

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._running.set)
        try:
            loop.run_forever()
        finally:
            self._running.clear()
            # Whatever is left (a task nobody cancelled) ends here, then the loop closes.
            left = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


@dataclass(frozen=True)
class PageAnswer:
    """The handler's answer: the cursor to sync from next, and whether the page was held
    (an undecryptable event): then the loop waits before it asks again."""

    cursor: str | None
    held: bool = False


@dataclass(frozen=True)
class LoopState:
    """What the loop is doing, for status and doctor."""

    state: str  # starting, ok, unreachable, failed, stopped
    detail: str = ""
    since_ms: int | None = None
    retry_in_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        """For status and doctor."""
        return {"state": self.state, "detail": self.detail, "retryInSeconds": self.retry_in_seconds}


class SyncLoop:
    """One connection's sync, a task on the shared `LoopThread`."""

    def __init__(self, name: str, thread: LoopThread, open_client: Callable[[], Any],
                 prepare: Callable[[Any], Awaitable[bool]],
                 handle: Callable[[Any], PageAnswer], cursor: str | None, *,
                 poll_ms: int, retry_max_seconds: float,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.name = name
        self._thread = thread
        self._open_client = open_client
        self._prepare = prepare
        self._handle = handle
        self._cursor = cursor
        self._poll_ms = poll_ms
        self._retry_max = retry_max_seconds
        self._now_ms = now_ms
        self._state = LoopState("starting")
        self._lock = threading.Lock()
        self._client: Any = None
        self._ready = threading.Event()  # the first page is handled: reads and sends may go
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._done: Future[None] | None = None
        self.pages = 0

    # --- other threads -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the connection's task; returns once it runs."""
        self._thread.start()
        self._done = self._thread.run(self._main())
        self._started.wait(STOP_TIMEOUT_SECONDS)

    def stop(self) -> None:
        """Cancel the connection's work (a long poll in flight too) and wait for it to end."""
        task, done = self._task, self._done
        if task is not None and self._thread.alive():
            try:
                self._thread.loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop ended on its own since
        if done is not None:
            try:
                done.result(STOP_TIMEOUT_SECONDS)
            except BaseException:  # cancelled, or what it ended with: it has ended
                pass
        self._set(LoopState("stopped"))

    def state(self) -> LoopState:
        """What the loop is doing now."""
        with self._lock:
            return self._state

    @property
    def ready(self) -> bool:
        """True once the first page was handled (nio knows the rooms and their members)."""
        return self._ready.is_set()

    def submit(self, work: Callable[[Any], Awaitable[T]], timeout: float) -> T:
        """Run `work(client)` on the loop and wait for it (a read, a check).

        Raises:
            MatrixUnavailable: the connection is not up yet, or the work timed out.
        """
        return self.schedule(work).result(timeout)  # type: ignore[no-any-return]

    def schedule(self, work: Callable[[Any], Awaitable[T]]) -> Future[T]:
        """Start `work(client)` on the loop; the future settles with its result or error."""
        client = self._client
        if client is None or not self._ready.is_set() or not self._thread.alive():
            future: Future[T] = Future()
            future.set_exception(MatrixUnavailable(f"the Matrix connection {self.name} is not "
                                                   f"up ({self.state().state})"))
            return future
        return self._thread.run(work(client))

    # --- the loop's own thread -----------------------------------------------------------------

    def _set(self, state: LoopState) -> None:
        with self._lock:
            before, self._state = self._state, state
        if state.state != before.state:
            log.info("matrix connection state", extra={"connection": self.name,
                                                       "state": state.state,
                                                       "detail": state.detail})

    async def _main(self) -> None:
        self._task = asyncio.current_task()
        self._started.set()
        try:
            await self._serve()
        except asyncio.CancelledError:
            pass  # stop() asked
        except Exception as exc:  # a bug: say so, never take the service down
            log.exception("matrix loop crashed", extra={"connection": self.name})
            self._set(LoopState("failed", f"crashed: {exc.__class__.__name__}"))
        finally:
            self._ready.clear()
            client, self._client = self._client, None
            if client is not None:
                try:
                    await client.close()
                except Exception:
                    log.warning("closing the matrix client failed", exc_info=True)

    async def _serve(self) -> None:
        try:
            client = self._open_client()
        except Exception as exc:
            log.error("matrix client cannot open", extra={"connection": self.name,
                                                          "error": str(exc)[:300]})
            self._set(LoopState("failed", f"cannot open the client: {exc}"))
            return
        self._client = client
        wait = 0.0
        while True:  # the start-up checks, until the homeserver answers them
            try:
                if not await self._prepare(client):
                    self._set(LoopState("failed", "the start-up checks refused the connection"))
                    return
                break
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                wait = await self._backoff(wait, f"start-up checks: {_why(exc)}")
        wait = 0.0
        while True:
            try:
                timeout = self._poll_ms / 1000 + 30.0  # the long poll plus a request's own bound
                page = await asyncio.wait_for(client.sync(self._cursor, self._poll_ms), timeout)
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                wait = await self._backoff(wait, f"sync: {_why(exc)}")
                continue
            try:
                answer = await asyncio.get_running_loop().run_in_executor(None, self._handle, page)
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                # Not committed (the store, the actor): the same page again from the old cursor.
                wait = await self._backoff(wait, f"admitting a page: {_why(exc)}")
                continue
            self.pages += 1
            self._cursor = answer.cursor if answer.cursor is not None else self._cursor
            self._ready.set()
            if answer.held:
                wait = await self._backoff(wait, "a page waits for the keys of an encrypted event",
                                           state="ok")
            else:
                wait = 0.0
                if self._state.state != "ok":
                    self._set(LoopState("ok", "syncing"))

    async def _backoff(self, wait: float, why: str, state: str = "unreachable") -> float:
        """Sleep the next wait of the doubling schedule, saying why; returns that wait."""
        wait = min(self._retry_max, max(FIRST_RETRY_SECONDS, wait * 2))
        current = self.state()
        since = current.since_ms if current.state == state and current.since_ms else self._now_ms()
        if state != "ok":
            self._set(LoopState(state, why, since, wait))
            log.warning("matrix retry", extra={"connection": self.name, "why": why,
                                               "retry_in_seconds": wait})
        await asyncio.sleep(wait)
        return wait


def _why(exc: BaseException) -> str:
    """An error in a line: its type and message (tokens never appear in nio's errors)."""
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text[:300]}" if text else exc.__class__.__name__
