"""The naive baseline for bench/ingest.py: the least a durable webhook receiver does.

falcon + waitress (8 threads), an HMAC-SHA256 check with `hmac.compare_digest`,
`json.loads`, and ONE SQLite transaction per request (WAL, synchronous=FULL,
one row keyed by a unique delivery id), answering 200 {"outcome": "accepted"}.
The transaction goes through the standard `sqlite3` module (default), or through
peewee with `--db-layer peewee` (a model insert in `db.atomic()`), as a naive
service built on wakeline's own ORM would.
No freshness check, no schema validation, no routing, no group commit, no
metrics: whatever wakeline does on top of this is what the ratio measures.

Run by bench/ingest.py as a child process:

    python bench/baseline_server.py --db PATH [--host 127.0.0.1] [--port 0] [--threads 8]
                                    [--db-layer sqlite3|peewee]

The secret comes from $WAKELINE_LINEAR_WEBHOOK_SECRET. Once listening it prints
one line `baseline: listening on http://HOST:PORT` and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import signal
import sqlite3
import sys
import threading
import time

import falcon
from waitress.server import create_server

SECRET_ENV = "WAKELINE_LINEAR_WEBHOOK_SECRET"
SCHEMA = """CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    delivery_id TEXT NOT NULL UNIQUE,
    received_at INTEGER NOT NULL,
    body TEXT NOT NULL
)"""


def connect(path: str) -> sqlite3.Connection:
    """One connection per request thread; autocommit mode, explicit BEGIN IMMEDIATE."""
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


class Webhook:
    """POST /webhooks/linear: verify, parse, store one row, answer."""

    def __init__(self, secret: bytes, db_path: str) -> None:
        self._secret = secret
        self._db_path = db_path
        self._local = threading.local()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self._db_path)
        return conn

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = req.bounded_stream.read()
        expected = hmac.new(self._secret, body, hashlib.sha256).hexdigest().encode()
        given = (req.get_header("Linear-Signature") or "").encode("latin-1")
        if not hmac.compare_digest(expected, given):
            resp.status = falcon.HTTP_401
            resp.media = {"error": "signature_invalid"}
            return
        delivery = req.get_header("Linear-Delivery")
        try:
            json.loads(body)
        except ValueError:
            resp.status = falcon.HTTP_400
            resp.media = {"error": "malformed"}
            return
        if not delivery:
            resp.status = falcon.HTTP_400
            resp.media = {"error": "malformed"}
            return
        outcome = self._store(delivery, body)
        if outcome == "unavailable":
            resp.status = falcon.HTTP_503
            resp.media = {"error": "unavailable"}
        else:
            resp.media = {"outcome": outcome}

    def _store(self, delivery: str, body: bytes) -> str:
        """One transaction: insert the row. Returns accepted, duplicate or unavailable."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO deliveries (delivery_id, received_at, body) VALUES (?, ?, ?)",
                (delivery, int(time.time() * 1000), body.decode("utf-8")),
            )
            conn.execute("COMMIT")
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK")
            return "duplicate"
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return "unavailable"
        return "accepted"


class PeeweeWebhook(Webhook):
    """The same, with the insert going through a peewee model."""

    def __init__(self, secret: bytes, db_path: str) -> None:
        super().__init__(secret, db_path)
        import peewee

        self._peewee = peewee
        self._db = peewee.SqliteDatabase(
            db_path, timeout=10,
            pragmas={"journal_mode": "wal", "synchronous": "full", "busy_timeout": 10000},
        )

        class Delivery(peewee.Model):
            delivery_id = peewee.TextField(unique=True)
            received_at = peewee.IntegerField()
            body = peewee.TextField()

            class Meta:
                database = self._db
                table_name = "deliveries"

        self._model = Delivery

    def _store(self, delivery: str, body: bytes) -> str:
        try:
            with self._db.atomic("IMMEDIATE"):  # one connection per thread (peewee's default)
                self._model.insert(delivery_id=delivery, received_at=int(time.time() * 1000),
                                   body=body.decode("utf-8")).execute()
        except self._peewee.IntegrityError:
            return "duplicate"
        except self._peewee.DatabaseError:
            return "unavailable"
        return "accepted"


class Health:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"ok": True}


def create_app(secret: str, db_path: str, db_layer: str = "sqlite3") -> falcon.App:
    app = falcon.App()
    resource = (PeeweeWebhook if db_layer == "peewee" else Webhook)(secret.encode("utf-8"), db_path)
    app.add_route("/webhooks/linear", resource)
    app.add_route("/healthz", Health())
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="SQLite file (created).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port.")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--db-layer", choices=("sqlite3", "peewee"), default="sqlite3")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        parser.error("the baseline only listens on loopback")
    secret = os.environ.get(SECRET_ENV, "").strip()
    if not secret:
        parser.error(f"${SECRET_ENV} is not set")
    conn = connect(args.db)
    conn.execute(SCHEMA)
    conn.close()
    server = create_server(create_app(secret, args.db, args.db_layer), host=args.host, port=args.port,
                           threads=args.threads, ident="baseline")

    def on_signal(signum: int, frame: object) -> None:
        server.close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"baseline: listening on http://{server.effective_host}:{server.effective_port}",
          flush=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
