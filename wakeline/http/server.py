"""waitress listeners that start and stop on demand.

waitress buffers a whole request body before the app sees it, so the body
limit must be enforced by waitress itself: otherwise a huge Content-Length
with a short body would hold a connection open until the channel times out.
Its own 413 page is plain text; `_JsonLimitParser` makes it the contract's
JSON instead.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer, UnixWSGIServer
from waitress.task import ThreadedTaskDispatcher
from waitress.utilities import RequestEntityTooLarge


class _JsonTooLarge(RequestEntityTooLarge):
    def to_response(self, ident: str | None = None) -> tuple[str, list[tuple[str, str]], bytes]:
        body = json.dumps({"error": "too_large"}).encode()
        return f"{self.code} {self.reason}", [("Content-Type", "application/json")], body


class _JsonLimitParser(HTTPRequestParser):
    def received(self, data: bytes) -> int:
        consumed = super().received(data)
        if isinstance(self.error, RequestEntityTooLarge) and not isinstance(self.error, _JsonTooLarge):
            self.error = _JsonTooLarge(self.error.body)
        return consumed


class _Channel(HTTPChannel):
    parser_class = _JsonLimitParser


class _Server(TcpWSGIServer):
    channel_class = _Channel


class _UnixServer(UnixWSGIServer):
    channel_class = _Channel


class _NamedDispatcher(ThreadedTaskDispatcher):
    """waitress's request threads, named for their listener (waitress names every
    listener's `waitress-<n>`, so two listeners' threads could not be told apart)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def start_new_thread(self, target: Any, thread_no: int) -> None:
        threading.Thread(target=target, name=f"{self._name}-request-{thread_no}",
                         args=(thread_no,), daemon=True).start()


class Listener:
    """One waitress server on its own loop thread; a part of the service (`service.parts`).

    The socket is bound when the listener is made, so its `url` is known before the app
    that needs it is built; `mount` gives it that app before `start`.

    Args:
        app: the WSGI app (or None, mounted later).
        host, port: where to listen; port 0 picks a free port (see `port`).
        threads: request threads.
        max_body_bytes: bodies larger than this get 413 before they are read.
        name: thread name prefix, for logs and thread dumps.
        unix_socket: also serve on this Unix socket (owner-only), with the same threads
            (confined turns reach the operator API through it: decision 0034).
        watch_clients: keep reading a connection while its request runs, so a request sees
            its client leave (`waitress.client_disconnected`): the operator API's event
            streams give their thread back within a second of their page closing.


        name: thread name prefix (`<name>-loop`, `<name>-request-<n>`), for logs and
            thread dumps.
    """

    def __init__(
        self, app: Any, *, host: str, port: int, threads: int, max_body_bytes: int, name: str,
        unix_socket: str | None = None, watch_clients: bool = False,
    ) -> None:
        adj = Adjustments(
            host=host,
            port=port,
            threads=threads,
            # waitress refuses at content_length >= limit; ours refuses above max_body_bytes.
            max_request_body_size=max_body_bytes + 1,
            ident="wakeline",
            channel_timeout=60,
            connection_limit=1000,
            clear_untrusted_proxy_headers=False,
            channel_request_lookahead=int(watch_clients),
        )
        self._dispatcher = _NamedDispatcher(name)
        self._dispatcher.set_thread_count(threads)
        self._map: dict[int, Any] = {}
        self._server = _Server(app, map=self._map, dispatcher=self._dispatcher, adj=adj)
        self._unix: _UnixServer | None = None
        if unix_socket is not None:
            # In the same map: the one loop thread serves both sockets.
            unix_adj = Adjustments(unix_socket=unix_socket, unix_socket_perms="600",
                                   threads=threads, max_request_body_size=max_body_bytes + 1,
                                   ident="wakeline", channel_timeout=60, connection_limit=1000,
                                   channel_request_lookahead=int(watch_clients))
            self._unix = _UnixServer(app, map=self._map, dispatcher=self._dispatcher,
                                     adj=unix_adj)
        self._thread = threading.Thread(target=self._server.run, name=f"{name}-loop", daemon=True)
        self.name = name
        self._stopped = False

    def mount(self, app: Any) -> None:
        """Serve `app` (before `start`)."""
        self._server.application = app
        if self._unix is not None:
            self._unix.application = app

    def tick(self, count: int) -> None:
        """Nothing periodic: waitress's loop thread does the work."""

    def checks(self) -> list[Any]:
        """No doctor items of its own: that it answers is the check."""
        return []

    @property
    def host(self) -> str:
        """The bound address."""
        return str(self._server.effective_host)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.effective_port)

    @property
    def url(self) -> str:
        """Base URL of this listener, as a local client reaches it."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(self.host, self.host)
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Serve on a background thread."""
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let running requests finish and their answers leave, then close
        every connection (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if not self._thread.is_alive():
            self._server.close()
            if self._unix is not None:
                self._unix.close()
            self._dispatcher.shutdown(timeout=timeout)
            return
        # The asyncore map belongs to the loop thread: change it only from inside it.
        # Stop polling the listening sockets; they are closed with everything else below.
        self._server.accepting = False
        if self._unix is not None:
            self._unix.accepting = False
        self._server.trigger.pull_trigger()
        self._dispatcher.shutdown(timeout=timeout)
        deadline = time.monotonic() + min(timeout, 2.0)
        while time.monotonic() < deadline and any(
            getattr(ch, "total_outbufs_len", 0) for ch in list(self._map.values())
        ):
            time.sleep(0.01)

        def close_all() -> None:
            for channel in list(self._map.values()):
                channel.close()

        try:
            self._server.trigger.pull_trigger(close_all)
        except OSError:
            # The loop already closed its trigger: it is ending; close what is left ourselves.
            self._thread.join(timeout)
            close_all()
        self._thread.join(timeout)
