"""The least a durable ingest can do, split across two processes or in one: A's ceilings.

The bare handler (bench/bare_server.py: wakeline's waitress listener, its falcon settings,
its CPU placement) reads each body and hands it, with the signature and delivery id, to a
second process over the request thread's own unix connection, then waits there for the
answer. The second process is not pinned, so it runs beside the load generators on the
other CPU. It gathers whatever frames are ready, verifies each HMAC, parses each body,
inserts the group with one `executemany` and commits it (WAL, `synchronous = FULL`), then
answers. That is a small part of wakeline's admission (no validation, no routing, no
receipts, no inbox or conversation rows): a ceiling for a split, not a rival to A.

Other modes, to show which part costs what:

  --echo          the second process answers at once: the hand-off alone
  --no-fsync      `synchronous = OFF`: the same work, not durable
  --one-process   no second process: the request thread verifies and parses, and
                  wakeline's own admission writer thread (`wakeline/admission/writer.py`)
                  group-commits the rows. The least a durable ingest can do in one
                  process, so the most A could reach: A also validates, routes and
                  writes receipts and inbox rows.

Run by bench/ingest.py (`--baseline-db split`, `split-echo`, `split-nofsync`, `one-process`)
in B's place:

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
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time

from typing import Callable

import falcon

from wakeline.admission.writer import AdmissionWriter
from wakeline.turns.cpus import pin_to_one_cpu
from wakeline.models.states import Outcome
from wakeline.models.store import AdmissionResult

from bare_server import serve  # run from bench/, beside it
from baseline_server import SCHEMA, SECRET_ENV  # the same table as the naive receiver's

# A frame: 4-byte length, then the signature (64 hex), the delivery id (36), the body.
SIG, DELIVERY = 64, 36
HEAD = struct.Struct("!I")
ACCEPTED, REFUSED = b"2", b"4"


def verified_row(secret: bytes, sig: bytes, delivery: bytes, body: bytes,
                 now: int) -> tuple[str, int, str] | None:
    """The row to store, or None when the signature does not match."""
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(expected, sig):
        return None
    json.loads(body)
    return delivery.decode(), now, body.decode()


def open_db(db: str, *, fsync: bool) -> sqlite3.Connection:
    """The deliveries table's connection: WAL, `synchronous` FULL (or OFF)."""
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'OFF'}")
    conn.execute(SCHEMA)
    return conn


def commit_rows(conn: sqlite3.Connection, rows: list[tuple[str, int, str]]) -> None:
    """One group: one `executemany`, one commit."""
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT OR IGNORE INTO deliveries (delivery_id, received_at, body)"
                     " VALUES (?, ?, ?)", rows)
    conn.execute("COMMIT")


class Committer:
    """The second process: verify, parse and group-commit whatever is ready, then answer."""

    def __init__(self, path: str, db: str, secret: bytes, *, echo: bool, fsync: bool) -> None:
        self._secret = secret
        self._echo = echo
        self._conn = open_db(db, fsync=fsync)
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
            row = verified_row(self._secret, frame[:SIG], frame[SIG:SIG + DELIVERY],
                               frame[SIG + DELIVERY:], now)
            if row is not None:
                rows.append(row)
            answers.append((sock, REFUSED if row is None else ACCEPTED))
        if rows:
            commit_rows(self._conn, rows)
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


class RowStore:
    """`--one-process`: what wakeline's own admission writer commits, a group of rows at a time."""

    def __init__(self, db: str, *, fsync: bool) -> None:
        self._conn = open_db(db, fsync=fsync)

    def admit(self, rows: list[tuple[str, int, str]]) -> list[AdmissionResult]:
        """Commit the group; every row accepted."""
        commit_rows(self._conn, rows)
        return [AdmissionResult(Outcome.ACCEPTED)] * len(rows)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


class Direct:
    """`--one-process` POST /webhooks/linear: verify, parse and hand the row to the writer."""

    def __init__(self, writer: AdmissionWriter, secret: bytes) -> None:
        self._writer = writer
        self._secret = secret

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = req.bounded_stream.read()
        row = verified_row(self._secret, (req.get_header("Linear-Signature") or "").encode(),
                           (req.get_header("Linear-Delivery") or "").encode(), body,
                           int(time.time() * 1000))
        if row is None:
            resp.status = falcon.HTTP_401
            resp.media = {"error": "signature_invalid"}
            return
        self._writer.submit(row, 10.0)  # type: ignore[arg-type]
        resp.media = {"outcome": "accepted"}


def serve_then(args: argparse.Namespace, webhooks: object, stop: Callable[[], None]) -> int:
    """The bare handler's listener with `webhooks` on its route until a signal, then `stop()`."""
    serve(webhooks, host=args.host, port=args.port, threads=args.threads, name="split")
    stop()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="SQLite file (created)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--echo", action="store_true", help="answer at once: the hand-off alone")
    ap.add_argument("--no-fsync", action="store_true", help="synchronous = OFF")
    ap.add_argument("--one-process", action="store_true",
                    help="no second process: wakeline's admission writer thread commits")
    ap.add_argument("--committer", metavar="SOCKET", help=argparse.SUPPRESS)
    args = ap.parse_args()
    secret = os.environ[SECRET_ENV].encode()
    if args.committer:
        Committer(args.committer, args.db, secret, echo=args.echo,
                  fsync=not args.no_fsync).serve()
        return 0
    if args.one_process:
        pin_to_one_cpu()
        writer = AdmissionWriter(RowStore(args.db, fsync=not args.no_fsync))  # type: ignore[arg-type]
        writer.start()
        return serve_then(args, Direct(writer, secret), writer.stop)
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

    def stop_committer() -> None:
        assert committer.stdin is not None
        committer.stdin.close()
        committer.wait(10)

    return serve_then(args, Forward(path), stop_committer)


if __name__ == "__main__":
    sys.exit(main())
