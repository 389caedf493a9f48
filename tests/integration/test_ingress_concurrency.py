"""Concurrent deliveries through the real waitress server: every durable outcome is exact.

Eight clients race fresh deliveries, replays of a delivery id, the same body under a new
delivery id, and delivery-id collisions. Whatever order the admission writer sees them in,
each body is admitted at most once, each 200 `accepted` has exactly one receipt with exactly
the FIFO entry and inbox message its type calls for, and no duplicate writes anything.
"""

from __future__ import annotations

import hashlib
import random
import threading
import uuid
from dataclasses import dataclass

import pytest
import requests
from pydantic import SecretStr

from tests.conftest import (
    OPERATOR_TOKEN,
    WEBHOOK_SECRET,
    comment_event,
    issue_event,
    session_event,
    signed,
)
from wakeline.app import Service
from wakeline.models.store import Store
from wakeline.secrets import Secrets

CLIENTS = 8
PER_CLIENT = 200
# Which kinds write what: (FIFO entry, inbox message).
WRITES = {"comment": (0, 1), "session": (1, 0), "issue": (1, 1)}
ENG_ISSUES = [f"eng-issue-{n}" for n in range(12)]
OPS_ISSUES = [f"ops-issue-{n}" for n in range(12)]

pytestmark = pytest.mark.slow


@pytest.fixture
def secrets() -> Secrets:
    """No Linear API key: the local backend, so nothing here ever calls api.linear.app."""
    return Secrets(webhook_secret=SecretStr(WEBHOOK_SECRET), linear_api_key=None,
                   operator_token=SecretStr(OPERATOR_TOKEN))


@dataclass(frozen=True)
class Body:
    """One distinct signed body and what it is about."""

    kind: str
    raw: bytes
    sha: str
    issue_id: str


@dataclass(frozen=True)
class Sent:
    """One request and its answer."""

    delivery_id: str
    body: Body
    status: int
    outcome: str | None


def fresh_body(kind: str, rng: random.Random) -> Body:
    """A body no other request has sent (each carries a unique id)."""
    unique = uuid.uuid4().hex
    if kind == "comment":
        n = rng.randrange(len(ENG_ISSUES))
        issue_id, payload = ENG_ISSUES[n], comment_event(ENG_ISSUES[n], f"ENG-{n}")
    elif kind == "session":
        n = rng.randrange(len(ENG_ISSUES))
        issue_id = ENG_ISSUES[n]
        payload = session_event(session_id=f"session-{unique}", issue_id=issue_id,
                                identifier=f"ENG-{n}")
    else:
        n = rng.randrange(len(OPS_ISSUES))
        issue_id = OPS_ISSUES[n]
        payload = issue_event(issue_id, f"OPS-{n}", updatedFrom={"title": f"old {unique}"})
    raw, _ = signed(payload)
    return Body(kind, raw, hashlib.sha256(raw).hexdigest(), issue_id)


class Pool:
    """What has been (or is being) sent, shared by every client so replays race originals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[str, Body]] = []

    def add(self, delivery_id: str, body: Body) -> None:
        with self._lock:
            self._items.append((delivery_id, body))

    def pick(self, rng: random.Random) -> tuple[str, Body] | None:
        with self._lock:
            return rng.choice(self._items) if self._items else None


def client(url: str, seed: int, pool: Pool, out: list[Sent], errors: list[BaseException]) -> None:
    """One client thread: a seeded mix of fresh deliveries and the three kinds of replay."""
    rng = random.Random(seed)
    try:
        with requests.Session() as session:
            for _ in range(PER_CLIENT):
                roll = rng.random()
                earlier = pool.pick(rng)
                if roll < 0.5 or earlier is None:
                    delivery_id, body = str(uuid.uuid4()), fresh_body(rng.choice(list(WRITES)), rng)
                    pool.add(delivery_id, body)  # before sending: a replay may overtake it
                elif roll < 0.7:
                    delivery_id, body = earlier  # the very same delivery again
                elif roll < 0.9:
                    delivery_id, body = str(uuid.uuid4()), earlier[1]  # same body, new id
                else:
                    delivery_id, body = earlier[0], fresh_body(rng.choice(list(WRITES)), rng)
                _, headers = signed(body.raw, delivery=delivery_id)
                resp = session.post(url, data=body.raw, headers=headers, timeout=30)
                outcome = resp.json().get("outcome") if resp.status_code == 200 else None
                out.append(Sent(delivery_id, body, resp.status_code, outcome))
    except BaseException as exc:  # noqa: BLE001 - surfaced by the test, not lost in the thread
        errors.append(exc)


def test_concurrent_deliveries_and_replays_admit_each_body_exactly_once(
    service: Service, store: Store
) -> None:
    """8 clients x 200 mixed deliveries: one receipt per accepted id, duplicates write nothing."""
    url = service.ingress.url + "/webhooks/linear"
    pool = Pool()
    results: list[list[Sent]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=client, args=(url, 1000 + i, pool, results[i], errors),
                         name=f"client-{i}")
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "clients did not finish"
    assert not errors, errors
    sent = [s for per_client in results for s in per_client]
    assert len(sent) == CLIENTS * PER_CLIENT

    # Every request got a 200: accepted or duplicate, nothing else under load.
    assert {(s.status, s.outcome) for s in sent} <= {(200, "accepted"), (200, "duplicate")}
    accepted = [s for s in sent if s.outcome == "accepted"]
    assert len({s.delivery_id for s in accepted}) == len(accepted), "a delivery id accepted twice"
    assert len({s.body.sha for s in accepted}) == len(accepted), "a body accepted twice"

    # The receipts are exactly the accepted deliveries: duplicates left no receipt.
    r = store.t.receipts
    receipts = {row.delivery_id: row for row in r.select()}
    assert {(d, row.body_sha256) for d, row in receipts.items()} == {
        (s.delivery_id, s.body.sha) for s in accepted
    }

    # Each accepted delivery wrote exactly the FIFO entry and inbox message its type calls for.
    fifo_by_receipt: dict[int, int] = {}
    for row in store.t.deliveries.select(store.t.deliveries.receipt_id):
        fifo_by_receipt[row.receipt_id] = fifo_by_receipt.get(row.receipt_id, 0) + 1
    inbox_by_receipt: dict[int, int] = {}
    for row in store.t.inbox.select(store.t.inbox.receipt_id):
        inbox_by_receipt[row.receipt_id] = inbox_by_receipt.get(row.receipt_id, 0) + 1
    conversations = {row.id: row.key for row in store.t.conversations.select()}
    for s in accepted:
        receipt = receipts[s.delivery_id]
        want_fifo, want_inbox = WRITES[s.body.kind]
        assert fifo_by_receipt.get(receipt.id, 0) == want_fifo, s
        assert inbox_by_receipt.get(receipt.id, 0) == want_inbox, s
        if want_fifo:
            assert conversations[receipt.conversation_id] == s.body.issue_id
        else:
            assert receipt.conversation_id is None

    # Totals match, and there is one conversation per issue that got FIFO work (+ the inbox).
    assert sum(fifo_by_receipt.values()) == sum(WRITES[s.body.kind][0] for s in accepted)
    assert sum(inbox_by_receipt.values()) == sum(WRITES[s.body.kind][1] for s in accepted)
    woken = {s.body.issue_id for s in accepted if WRITES[s.body.kind][0]}
    assert sorted(k for k in conversations.values() if k != "linear-inbox") == sorted(woken)

    # A body sent under an id never used for another body cannot have been lost.
    bodies_per_id: dict[str, set[str]] = {}
    for s in sent:
        bodies_per_id.setdefault(s.delivery_id, set()).add(s.body.sha)
    must_have = {s.body.sha for s in sent if len(bodies_per_id[s.delivery_id]) == 1}
    assert must_have <= {s.body.sha for s in accepted}
    # The mix really exercised every path.
    assert len(accepted) > 500 and len(sent) - len(accepted) > 500
    assert {s.body.kind for s in accepted} == set(WRITES)

