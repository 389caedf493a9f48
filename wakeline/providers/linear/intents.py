"""Echo evidence for writes that ids cannot tell apart: what an update will look like coming back.

A create carries an id wakeline chose, so its webhook is recognised by that id
alone (decision 0011). An update names an object that already exists: its echo
carries the object's own id, the same as a person's edit. So before such a write
leaves, wakeline records an intent: which event it expects (kind, action,
subject) and a fingerprint of what it wrote, a digest per field, never the
values themselves. When the webhook arrives, `evidence_of` reads the same facts
from it: the fields that changed (without the ones Linear changes by itself
alongside them) and a digest of each new value. Exact evidence is the two
agreeing; who the actor is never decides.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from wakeline.models.envelopes import EventEvidence

if TYPE_CHECKING:
    from graphql.language import OperationDefinitionNode, ValueNode

# Mutation root fields whose echo is an `update` of the object they name, by webhook type.
UPDATES = {"issueUpdate": "Issue", "commentUpdate": "Comment"}
# Fields Linear changes by itself alongside a written one (timestamps, orderings): their
# presence in `updatedFrom` says nothing about who made the change.
DERIVED_FIELDS = frozenset({
    "updatedAt", "editedAt", "sortOrder", "boardOrder", "prioritySortOrder", "subIssueSortOrder",
    "startedAt", "completedAt", "canceledAt", "archivedAt", "autoClosedAt", "autoArchivedAt",
    "triagedAt", "startedTriageAt", "snoozedUntilAt", "addedToCycleAt", "addedToProjectAt",
    "addedToTeamAt", "slaStartedAt", "slaBreachesAt", "slaHighRiskAt", "slaMediumRiskAt",
    "lastAppliedTemplateId", "previousIdentifiers",
})


def digest(value: Any) -> str:
    """A value's fingerprint: the first 32 hex digits of SHA-256 over its canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class WriteIntent:
    """One update a mutation will make, as its echo will show it."""

    field: str
    event_kind: str
    action: str
    subject: str
    fingerprint: dict[str, str]
    mutation_hash: str

    def summary(self) -> str:
        """A body-free description for listings."""
        return f"{self.field} on {self.subject} ({', '.join(sorted(self.fingerprint)) or 'no fields'})"


def write_intents(query: str, variables: Mapping[str, Any] | None = None,
                  operation_name: str | None = None) -> list[WriteIntent]:
    """The updates a mutation makes whose object and fields the request itself names.

    An update whose `id` cannot be resolved from the request (a variable without a value)
    yields no intent: there is no subject to hold its echo against.
    """
    # graphql-core loads with the hatch's first mutation: the service starts without it.
    from wakeline.providers.linear.graphql_guard import mutation_fields

    operation, fields = mutation_fields(query, operation_name)
    values = _variables(operation, variables or {})
    intents = []
    for field in fields:
        kind = UPDATES.get(field.name.value)
        if kind is None:
            continue
        args = {a.name.value: _value(a.value, values) for a in field.arguments or ()}
        subject, given = args.get("id"), args.get("input")
        if not isinstance(subject, str) or not subject:
            continue
        written = given if isinstance(given, dict) else {}
        fingerprint = {name: digest(value) for name, value in written.items()}
        mutation_hash = digest({"field": field.name.value, "id": subject, "input": written})
        intents.append(WriteIntent(field.name.value, kind, "update", subject, fingerprint,
                                   mutation_hash))
    return intents


def evidence_of(event_type: str, action: str, data: Mapping[str, Any],
                updated_from: Mapping[str, Any] | None, actor_id: str | None,
                terminal: bool) -> EventEvidence | None:
    """What an update webhook shows: the object, the actor, what changed and to what."""
    if action != "update" or event_type not in UPDATES.values() or not isinstance(data.get("id"), str):
        return None
    changed = tuple(sorted(k for k in (updated_from or {}) if k not in DERIVED_FIELDS))
    return EventEvidence(kind=event_type, action=action, subject=data["id"], actor_id=actor_id,
                         changed=changed, digests={k: digest(data.get(k)) for k in changed},
                         terminal=terminal)


def _variables(operation: OperationDefinitionNode, given: Mapping[str, Any]) -> dict[str, Any]:
    """The request's variables, with the operation's defaults for those it leaves out."""
    from graphql.utilities import value_from_ast_untyped

    values = {d.variable.name.value: value_from_ast_untyped(d.default_value)
              for d in operation.variable_definitions or () if d.default_value is not None}
    values.update(given)
    return values


def _value(node: ValueNode, variables: Mapping[str, Any]) -> Any:
    from graphql.utilities import value_from_ast_untyped

    return value_from_ast_untyped(node, variables)
