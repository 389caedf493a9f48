"""The limit for bench/ingest.py: wakeline's own HTTP server answering without doing anything.

The same waitress listener wakeline serves its webhooks with (`wakeline.http.server.Listener`:
the same adjustments, the same request threads), the same falcon app settings, and the
same CPU placement and scheduling as `wakeline serve` (its threads kept on one CPU and
batch-scheduled unless `--any-cpu`). The handler reads the body and answers 200
`{"outcome": "accepted"}`: no signature, no JSON, no validation, no store. Whatever a
durable ingest costs on top of HTTP is what the ratio to this server measures.

Run by bench/ingest.py as a child process:

    python bench/bare_server.py [--host 127.0.0.1] [--port 0] [--threads 8] [--any-cpu]

Once listening it prints one line `bare: listening on http://HOST:PORT` and serves until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import falcon

from wakeline.turns.cpus import pin_to_one_cpu
from wakeline.http.server import Listener


class Bare:
    """POST /webhooks/linear: read the body, answer accepted."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.bounded_stream.read()
        resp.media = {"outcome": "accepted"}


class Healthy:
    """GET /healthz, as bench/ingest.py waits for it."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"ok": True}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--any-cpu", action="store_true", help="leave the threads on every CPU")
    args = ap.parse_args()
    if not args.any_cpu:
        pin_to_one_cpu()  # one CPU, batch-scheduled, as `wakeline serve` by default (server.single_cpu)
    serve(Bare(), host=args.host, port=args.port, threads=args.threads, name="bare")
    return 0


def serve(webhooks: object, *, host: str, port: int, threads: int, name: str) -> None:
    """wakeline's listener with `webhooks` on the webhook route and `/healthz`; prints
    `NAME: listening on URL` once it listens, and returns after SIGTERM or SIGINT."""
    app = falcon.App(media_type=falcon.MEDIA_JSON)
    app.add_route("/webhooks/linear", webhooks)
    app.add_route("/healthz", Healthy())
    listener = Listener(app, host=host, port=port, threads=threads, max_body_bytes=1 << 20,
                        name=name)
    listener.start()
    print(f"{name}: listening on {listener.url}", flush=True)
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    done.wait()
    listener.stop()


if __name__ == "__main__":
    sys.exit(main())
