"""The approvals service: how a proposed Matrix send meets the human who decides.

A route's turn proposes (`propose`, from `wakeline matrix send`): an approval bound to the
connection, route, conversation, room and the body. A human decides: the operator through
`POST /v1/approvals/{id}/approve|deny` (`wakeline approvals approve|deny ID`), and, once the
Discord control threads exist, a button or `!approve ID` in the conversation's thread. Both
call the same two methods, from any thread:

    approvals.approve(approval_id, approver="discord:<user id>", body_sha256=shown_hash)
    approvals.deny(approval_id, denier="discord:<user id>")

`approver` names the human for the journal (the operator API passes `operator`);
`body_sha256`, when given, must be the hash of the body the approver was shown, so a body
that differs from what they saw is never approved. Approving tells the connection's actor
to send; a second approve changes nothing and sends nothing. Every decision, and every
expiry, is in the journal. `decide` is the same with a word on whether this call changed
anything (a control thread says "already approved" when it did not).

Watchers (`watch`) hear of every change of an approval (proposed, approved, denied,
expired, and, through `changed`, sent or failed): the Discord control posts each one in
the conversation's thread, so a decision made in one place shows in the other.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable

from wakeline.clock import Clock, to_ms
from wakeline.errors import BodyChanged, Conflict, NotFound
from wakeline.journal.entries import excerpt
from wakeline.models.approvals import DAY_MS, Approval, ApprovalStatus
from wakeline.models.store import Store

log = logging.getLogger(__name__)

KEEP_SETTLED_MS = 30 * DAY_MS
OPERATOR = "operator"


class ApprovalsService:
    """Propose, list, approve, deny and expire approvals of Matrix sends; thread-safe.

    `send` tells the approval's connection to send it (a tell: it never waits); `recorder`
    journals each decision.
    """

    def __init__(self, store: Store, clock: Clock, send: Callable[[Approval], None],
                 recorder: object = None, ttl_ms: int = DAY_MS) -> None:
        self._store = store
        self._clock = clock
        self._send = send
        self._recorder = recorder
        self._ttl_ms = ttl_ms
        self._watchers: list[Callable[[Approval], None]] = []

    def watch(self, watcher: Callable[[Approval], None]) -> None:
        """Call `watcher` with the approval after each change (it must not block: a tell)."""
        self._watchers.append(watcher)

    def changed(self, approval: Approval) -> None:
        """Tell the watchers of a change (also called by the sender once sent or failed)."""
        for watcher in list(self._watchers):
            try:
                watcher(approval)
            except Exception:  # a watcher's failure never fails the decision it hears of
                log.exception("approval watcher failed", extra={"approval_id": approval.id})

    def _now(self) -> int:
        return to_ms(self._clock.now())

    def _journal(self, approval: Approval, event: str, who: str, text: str) -> None:
        if self._recorder is not None:
            self._recorder.approval(approval, event, who, text)  # type: ignore[attr-defined]

    # --- a route's turn ------------------------------------------------------------------------

    def propose(self, *, connection: str, route: str, conversation_id: str, room_id: str,
                body: str, turn_id: str | None) -> Approval:
        """Record a send for a human to decide; nothing is sent."""
        approval = self._store.approvals.create(
            connection=connection, route=route, conversation_id=conversation_id, room_id=room_id,
            body=body, turn_id=turn_id, now=self._now(), ttl_ms=self._ttl_ms)
        log.info("matrix send proposed", extra={"approval_id": approval.id, "route": route})
        self._journal(approval, "pending", "agent",
                      f"The agent proposes a message to {room_id} (route {route}); approve with "
                      f"`wakeline approvals approve {approval.id}`:\n{excerpt(body, 600)}")
        self.changed(approval)
        return approval

    # --- humans ---------------------------------------------------------------------------------

    def get(self, approval_id: str) -> Approval:
        """One approval.

        Raises:
            NotFound: no such approval.
        """
        approval = self._store.approvals.get(approval_id)
        if approval is None:
            raise NotFound(f"no approval {approval_id}")
        return approval

    def recent(self, status: ApprovalStatus | None = None, limit: int = 100) -> list[Approval]:
        """Approvals, pending first, then newest first."""
        return self._store.approvals.recent(status=status, limit=limit)

    def approve(self, approval_id: str, approver: str, *, body_sha256: str | None = None
                ) -> Approval:
        """A human approves: the connection sends it, once. Approving an approved (or sent)
        approval again changes nothing.

        Raises:
            NotFound: no such approval.
            BodyChanged: `body_sha256` is not the hash of its body.
            Conflict: it was denied, expired or failed.
        """
        return self.decide(approval_id, True, approver, body_sha256=body_sha256)[0]

    def deny(self, approval_id: str, denier: str) -> Approval:
        """A human denies: it is never sent. Denying a denied approval again changes nothing.

        Raises:
            NotFound: no such approval.
            Conflict: it was approved, sent, expired or failed already.
        """
        return self.decide(approval_id, False, denier)[0]

    def decide(self, approval_id: str, approve: bool, who: str, *,
               body_sha256: str | None = None) -> tuple[Approval, bool]:
        """Approve (`approve` True) or deny as `who`: (the approval after it, whether this call
        decided it). The same decision made before is (the approval, False).

        Raises:
            NotFound: no such approval.
            BodyChanged: `body_sha256` is not the hash of its body.
            Conflict: the other decision (or an expiry, a send, a failure) came first.
        """
        approval = self.get(approval_id)
        if approve and body_sha256 is not None and body_sha256 != approval.body_sha256:
            raise BodyChanged("the body differs from the one you were shown: nothing approved",
                              status=approval.status.value)
        wanted = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        decided, changed = self._store.approvals.decide(approval_id, wanted, who, self._now())
        assert decided is not None
        if changed:
            if approve:
                log.info("matrix send approved", extra={"approval_id": approval_id, "by": who})
                self._journal(decided, "approved", who,
                              f"{who} approved {approval_id}: sending it to {decided.room_id} "
                              f"(route {decided.route}).")
            else:
                log.info("matrix send denied", extra={"approval_id": approval_id, "by": who})
                self._journal(decided, "denied", who,
                              f"{who} denied {approval_id}: it is not sent to {decided.room_id}.")
            # The watchers hear of the decision before the send can settle it: a thread
            # says "approved" before "sent".
            self.changed(decided)
            if approve:
                self._send(decided)
            return decided, True
        same = (ApprovalStatus.APPROVED, ApprovalStatus.SENT) if approve else \
            (ApprovalStatus.DENIED,)
        if decided.status in same:
            return decided, False  # twice is once
        if decided.status is ApprovalStatus.PENDING:
            self.sweep()  # its day is over: expired, and journaled so
            decided = self.get(approval_id)
        verb = "approved" if approve else "denied"
        raise Conflict(f"the approval is {decided.status.value}: it cannot be {verb}",
                       status=decided.status.value)

    def wait_settled(self, approval_id: str, timeout: float) -> Approval:
        """The approval once it is no longer `approved` (sent or failed), or as it is after
        `timeout` real seconds: an operator's approve answers with the event id when it can."""
        deadline = time.monotonic() + timeout
        approval = self.get(approval_id)
        while approval.status is ApprovalStatus.APPROVED and time.monotonic() < deadline:
            time.sleep(0.05)  # a bounded poll of the store on the request's own thread
            approval = self.get(approval_id)
        return approval

    # --- housekeeping ---------------------------------------------------------------------------

    def sweep(self) -> list[Approval]:
        """Expire pending approvals whose day is over (each journaled); forget settled ones
        after 30 days. Returns those it expired."""
        now = self._now()
        expired = self._store.approvals.expire(now)
        for approval in expired:
            log.info("matrix send expired", extra={"approval_id": approval.id})
            self._journal(approval, "expired", "wakeline",
                          f"{approval.id} expired: nobody decided within a day; it is not sent "
                          f"to {approval.room_id}.")
            self.changed(replace(approval, status=ApprovalStatus.EXPIRED, settled_at=now))
        self._store.approvals.prune(now - KEEP_SETTLED_MS)
        return expired
