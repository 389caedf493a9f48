"""The ingest split across two processes: what the one design left untried could reach.

The bare handler (bench/bare_server.py: wakeline's waitress listener, its falcon settings,
its CPU placement) reads each body and hands it, with the signature and delivery id, to a
second process over the request thread's own unix connection, then waits there for the
answer. The second process is not pinned, so it runs beside the load generators on the
other CPU. It gathers whatever frames are ready, verifies each HMAC, parses each body,
inserts the group with one `executemany` and commits it (WAL, `synchronous = FULL`), then
answers. That is a small part of wakeline's admission (no validation, no routing, no
receipts, no inbox or conversation rows): a ceiling for a split, not a rival to A.

Two modes take parts out, to show which part costs what:

  --echo       the second process answers at once: the hand-off alone
  --no-fsync   `synchronous = OFF`: the same work, not durable

Run by bench/ingest.py (`--baseline-db split`, `split-echo`, `split-nofsync`) in B's place:

    python bench/split_server.py --db FILE [--host 127.0.0.1] [--port 0] [--threads 32]

Once listening it prints `split: listening on http://HOST:PORT` and serves until SIGTERM or
SIGINT. The second process ends when its parent does (it watches its stdin pipe).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import selectors
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time

import falcon

from wakeline.cpus import pin_to_one_cpu
from wakeline.http.server import Listener

SECRET_ENV = "WAKELINE_LINEAR_WEBHOOK_SECRET"
SCHEMA = """CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    delivery_id TEXT NOT NULL UNIQUE,
    received_at INTEGER NOT NULL,
    body TEXT NOT NULL
)"""
# A frame: 4-byte length, then the signature (64 hex), the delivery id (36), the body.
SIG, DELIVERY = 64, 36
HEAD = struct.Struct("!I")
ACCEPTED, REFUSED = b"2", b"4"


class Committer:
    """The second process: verify, parse and group-commit whatever is ready, then answer."""

    def __init__(self, path: str, db: str, secret: bytes, *, echo: bool, fsync: bool) -> None:
        self._secret = secret
        self._echo = echo
        self._conn = sqlite3.connect(db, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'OFF'}")
        self._conn.execute(SCHEMA)
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(path)
        self._server.listen(256)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ)
        self._sel.register(sys.stdin, selectors.EVENT_READ)
        self._buffers: dict[socket.socket, bytes] = {}

    def serve(self) -> None:
        """Until the parent's pipe closes."""
        while True:
            frames = self._gather()
            if frames is None:
                return
            if frames:
                self._answer(frames)

    def _gather(self) -> list[tuple[socket.socket, bytes]] | None:
        frames: list[tuple[socket.socket, bytes]] = []
        for key, _ in self._sel.select():
            sock = key.fileobj
            if sock is sys.stdin:
                return None  # the parent is gone
            if sock is self._server:
                conn, _ = self._server.accept()
                self._sel.register(conn, selectors.EVENT_READ)
                self._buffers[conn] = b""
                continue
            data = sock.recv(1 << 20)
            if not data:
                self._sel.unregister(sock)
                self._buffers.pop(sock, None)
                sock.close()
                continue
            buf = self._buffers[sock] + data
            while len(buf) >= HEAD.size:
                (n,) = HEAD.unpack_from(buf)
                if len(buf) < HEAD.size + n:
                    break
                frames.append((sock, buf[HEAD.size:HEAD.size + n]))
                buf = buf[HEAD.size + n:]
            self._buffers[sock] = buf
        return frames

    def _answer(self, frames: list[tuple[socket.socket, bytes]]) -> None:
        answers: list[tuple[socket.socket, bytes]] = []
        rows: list[tuple[str, int, str]] = []
        now = int(time.time() * 1000)
        for sock, frame in frames:
            if self._echo:
                answers.append((sock, ACCEPTED))
                continue
            sig, delivery, body = frame[:SIG], frame[SIG:SIG + DELIVERY], frame[SIG + DELIVERY:]
            expected = hmac.new(self._secret, body, hashlib.sha256).hexdigest().encode()
            if not hmac.compare_digest(expected, sig):
                answers.append((sock, REFUSED))
                continue
            json.loads(body)
            rows.append((delivery.decode(), now, body.decode()))
            answers.append((sock, ACCEPTED))
        if rows:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany("INSERT OR IGNORE INTO deliveries (delivery_id, received_at, "
                                   "body) VALUES (?, ?, ?)", rows)
            self._conn.execute("COMMIT")
        for sock, answer in answers:
            sock.sendall(answer)


class Forward:
    """POST /webhooks/linear: read the body, hand it over, answer what comes back."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._local = threading.local()

    def _sock(self) -> socket.socket:
        sock = getattr(self._local, "sock", None)
        if sock is None:
            sock = self._local.sock = socket.socket(socket.AF_UNIX)
            sock.connect(self._path)
        return sock

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = req.bounded_stream.read()
        sig = (req.get_header("Linear-Signature") or "").encode().ljust(SIG)[:SIG]
        delivery = (req.get_header("Linear-Delivery") or "").encode().ljust(DELIVERY)[:DELIVERY]
        sock = self._sock()
        sock.sendall(HEAD.pack(SIG + DELIVERY + len(body)) + sig + delivery + body)
        answer = sock.recv(1)
        if not answer:
            raise falcon.HTTPServiceUnavailable(description="the committer is gone")
        if answer == ACCEPTED:
            resp.media = {"outcome": "accepted"}
        else:
            resp.status = falcon.HTTP_401
            resp.media = {"error": "signature_invalid"}


class Healthy:
    """GET /healthz, as bench/ingest.py waits for it."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"ok": True}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="SQLite file (created)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--echo", action="store_true", help="answer at once: the hand-off alone")
    ap.add_argument("--no-fsync", action="store_true", help="synchronous = OFF")
    ap.add_argument("--committer", metavar="SOCKET", help=argparse.SUPPRESS)
    args = ap.parse_args()
    secret = os.environ[SECRET_ENV].encode()
    if args.committer:
        Committer(args.committer, args.db, secret, echo=args.echo,
                  fsync=not args.no_fsync).serve()
        return 0
    path = args.db + ".sock"
    # Started before this process pins itself, so the committer keeps every CPU.
    committer = subprocess.Popen(
        [sys.executable, __file__, "--db", args.db, "--committer", path,
         *(["--echo"] if args.echo else []), *(["--no-fsync"] if args.no_fsync else [])],
        stdin=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if committer.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("split: the committer did not start")
        time.sleep(0.01)
    pin_to_one_cpu()
    app = falcon.App(media_type=falcon.MEDIA_JSON)
    app.add_route("/webhooks/linear", Forward(path))
    app.add_route("/healthz", Healthy())
    listener = Listener(app, host=args.host, port=args.port, threads=args.threads,
                        max_body_bytes=1 << 20, name="split")
    listener.start()
    print(f"split: listening on {listener.url}", flush=True)
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    done.wait()
    listener.stop()
    committer.stdin.close()
    committer.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
