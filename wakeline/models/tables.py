"""peewee models of the tables created in `schema.py`.

The models are declared unbound; `bind_tables` makes subclasses bound to one
database, so two stores in one process (tests do this) never share a binding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from peewee import Database, IntegerField, Model, TextField


class Flag(IntegerField):
    """A boolean stored as 0/1 on both backends (SQLite has no other; PostgreSQL keeps the
    schema's integer columns), read back as a bool: fixed SQL may write `terminal = 1`."""

    def db_value(self, value: Any) -> Any:
        return None if value is None else int(bool(value))

    def python_value(self, value: Any) -> Any:
        return None if value is None else bool(value)


class _Table(Model):
    class Meta:
        database = None


class Conversation(_Table):
    """A conversation: one per Linear issue, plus the Linear inbox."""

    id = TextField(primary_key=True)
    namespace = TextField()
    key = TextField()
    kind = TextField()
    title = TextField(default="")
    route = TextField(null=True)
    created_at = IntegerField()
    updated_at = IntegerField()
    session_id = TextField(null=True)
    reset_at = IntegerField(null=True)
    terminal = Flag(default=False)
    issue_id = TextField(null=True)
    issue_identifier = TextField(null=True)
    agent_session_id = TextField(null=True)
    runner_session = TextField(null=True)
    tainted = Flag(default=False)
    ownership = TextField(default="owned")
    project_id = TextField(null=True)
    ownership_attempts = IntegerField(default=0)
    ownership_next_at = IntegerField(null=True)
    ownership_error = TextField(null=True)
    ownership_answer = TextField(null=True)
    outcome = TextField(null=True)
    terminal_state_id = TextField(null=True)
    done_state_id = TextField(null=True)
    workspace_branch = TextField(null=True)
    workspace_cleanup = Flag(default=False)
    workspace_kept = TextField(null=True)
    workspace_repo = TextField(null=True)  # the `repos` entry its worktree was made in
    repo = TextField(null=True)  # the `repos` entry chosen for it (decision 0038)
    repo_asked = IntegerField(null=True)  # the first FIFO entry that waits for the pick
    wake_waiting = Flag(default=False)  # an engine job is due (decision 0025)
    wake_gen = IntegerField(default=0)

    class Meta:
        table_name = "conversations"


class Receipt(_Table):
    """One admitted delivery id: the dedupe ledger and its first outcome."""

    id = IntegerField(primary_key=True)
    delivery_id = TextField(unique=True)
    body_sha256 = TextField(unique=True)
    event_type = TextField()
    action = TextField()
    received_at = IntegerField()
    webhook_at = IntegerField()
    outcome = TextField()
    reason = TextField(null=True)
    conversation_id = TextField(null=True)

    class Meta:
        table_name = "receipts"


class Delivery(_Table):
    """A FIFO entry; its id is the conversation-ordering sequence."""

    id = IntegerField(primary_key=True)
    conversation_id = TextField()
    receipt_id = IntegerField()
    state = TextField()
    envelope = TextField()
    headline = TextField()
    received_at = IntegerField()
    completed_at = IntegerField(null=True)
    completion = TextField(null=True)
    turn_id = TextField(null=True)
    size_bytes = IntegerField(default=0)

    class Meta:
        table_name = "deliveries"


class Turn(_Table):
    """A turn in flight: it owns its conversation's claimed deliveries."""

    id = TextField(primary_key=True)
    conversation_id = TextField(unique=True)
    state = TextField()
    attempt = IntegerField(default=1)
    created_at = IntegerField()
    started_at = IntegerField(null=True)
    next_attempt_at = IntegerField(null=True)
    last_error = TextField(null=True)
    stop_requested = Flag(default=False)
    heartbeat_at = IntegerField(null=True)
    host = TextField(null=True)  # the host running it (decision 0025)
    stop_by = TextField(null=True)  # who asked for the stop: "linear" (or NULL), "operator"

    class Meta:
        table_name = "turns"


class TurnResult(_Table):
    """The record of a finished (or given-up) turn."""

    id = IntegerField(primary_key=True)
    turn_id = TextField()
    conversation_id = TextField()
    result = TextField()
    exit_code = IntegerField(null=True)
    attempts = IntegerField()
    deliveries = IntegerField()
    output = TextField(default="")
    started_at = IntegerField(null=True)
    finished_at = IntegerField()

    class Meta:
        table_name = "turn_results"


class InboxMessage(_Table):
    """A data-change event kept in the Linear inbox; its id is the cursor."""

    id = IntegerField(primary_key=True)
    receipt_id = IntegerField()
    received_at = IntegerField()
    headline = TextField()
    event = TextField()
    size_bytes = IntegerField()
    shown = Flag(default=False)
    surfaced = Flag(default=False)
    wakes = Flag(default=False)
    surfaced_by = TextField(null=True)

    class Meta:
        table_name = "inbox_messages"


class Effect(_Table):
    """An outbound write to Linear: prepared durably before it goes on the wire."""

    id = TextField(primary_key=True)
    kind = TextField()
    conversation_id = TextField(null=True)
    target = TextField()
    summary = TextField()
    body = TextField(null=True)
    mutation_hash = TextField()
    state = TextField()
    created_at = IntegerField()
    dispatched_at = IntegerField(null=True)
    settled_at = IntegerField(null=True)
    error = TextField(null=True)
    result_ids = TextField(null=True)
    account = TextField(null=True)
    event_kind = TextField(null=True)
    event_action = TextField(null=True)
    subject = TextField(null=True)
    fingerprint = TextField(null=True)

    class Meta:
        table_name = "effects"


class HeldDelivery(_Table):
    """A delivery held while a write it may be the echo of is in flight."""

    receipt_id = IntegerField(primary_key=True)
    fifo_id = IntegerField(null=True)
    conversation_id = TextField(null=True)
    evidence = TextField()
    intents = TextField()
    inbox_event = TextField(null=True)
    headline = TextField()
    received_at = IntegerField()
    state = TextField()
    resolved_at = IntegerField(null=True)

    class Meta:
        table_name = "held_deliveries"


class Setting(_Table):
    """A persisted runtime setting (JSON value)."""

    key = TextField(primary_key=True)
    value = TextField()

    class Meta:
        table_name = "settings"


class PlanGateRow(_Table):
    """A planning route's issue: its plan revisions, the approval, the execution lease."""

    conversation_id = TextField(primary_key=True)
    phase = TextField()
    rev = IntegerField(default=0)
    plan = TextField(null=True)
    comment_id = TextField(null=True)
    approved_rev = IntegerField(null=True)
    approved_by = TextField(null=True)
    approved_plan = TextField(null=True)
    lease_since = IntegerField(null=True)
    lease_delivery = TextField(null=True)
    updated_at = IntegerField()

    class Meta:
        table_name = "plan_gates"


@dataclass(frozen=True)
class Tables:
    """The models bound to one database."""

    conversations: Any
    receipts: Any
    deliveries: Any
    inbox: Any
    settings: Any
    turns: Any
    turn_results: Any
    effects: Any
    held: Any
    plan_gates: Any


def bind_tables(db: Database) -> Tables:
    """Subclass each model bound to `db`."""

    def bound(model: type[_Table]) -> Any:
        meta = type("Meta", (), {"database": db, "table_name": model._meta.table_name})
        return type(model.__name__, (model,), {"Meta": meta, "__module__": __name__})

    return Tables(
        conversations=bound(Conversation),
        receipts=bound(Receipt),
        deliveries=bound(Delivery),
        inbox=bound(InboxMessage),
        settings=bound(Setting),
        turns=bound(Turn),
        turn_results=bound(TurnResult),
        effects=bound(Effect),
        held=bound(HeldDelivery),
        plan_gates=bound(PlanGateRow),
    )
