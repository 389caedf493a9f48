"""Write intents read from mutations, and evidence read from webhooks: exact, body-free."""

from __future__ import annotations

import json

from wakeline.models.echoes import matches
from wakeline.providers.linear.intents import digest, evidence_of, write_intents


def test_an_issue_update_becomes_an_intent_with_a_fingerprint_per_field() -> None:
    [intent] = write_intents('mutation { issueUpdate(id: "i-1", input: {stateId: "s-2", title: "T"}) '
                             '{ success } }')
    assert (intent.event_kind, intent.action, intent.subject) == ("Issue", "update", "i-1")
    assert intent.fingerprint == {"stateId": digest("s-2"), "title": digest("T")}
    assert "T" not in json.dumps(intent.fingerprint)  # digests, never values


def test_variables_defaults_aliases_and_fragments_are_resolved() -> None:
    query = """
        mutation Move($id: String!, $state: String = "s-9") { ...Both }
        fragment Both on Mutation {
            first: issueUpdate(id: $id, input: {stateId: $state}) { success }
            second: commentUpdate(id: "c-1", input: $comment) { success }
        }"""
    intents = write_intents(query, {"id": "i-1", "comment": {"body": "hello"}}, "Move")
    assert [(i.field, i.subject, i.fingerprint) for i in intents] == [
        ("issueUpdate", "i-1", {"stateId": digest("s-9")}),
        ("commentUpdate", "c-1", {"body": digest("hello")}),
    ]


def test_creates_queries_and_unnamed_subjects_make_no_intent() -> None:
    assert write_intents('mutation { commentCreate(input: {issueId: "i", body: "b"}) { success } }') == []
    assert write_intents("query { viewer { id } }") == []
    assert write_intents("mutation M($id: String!) { issueUpdate(id: $id, input: {}) { success } }") == []


def test_the_mutation_hash_covers_the_fields_and_not_the_text_around_them() -> None:
    a = write_intents('mutation A { issueUpdate(id: "i", input: {stateId: "s"}) { success } }')[0]
    b = write_intents('mutation B { x: issueUpdate(id: "i", input: {stateId: "s"}) { id } }')[0]
    c = write_intents('mutation { issueUpdate(id: "i", input: {stateId: "t"}) { success } }')[0]
    assert a.mutation_hash == b.mutation_hash != c.mutation_hash


def evidence(changed: dict[str, object], data: dict[str, object], actor: str = "me"):  # type: ignore[no-untyped-def]
    return evidence_of("Issue", "update", {"id": "i-1", **data}, changed, actor, False)


def test_evidence_leaves_out_what_linear_changes_by_itself() -> None:
    ev = evidence({"stateId": "old", "updatedAt": "t", "startedAt": None, "sortOrder": 1},
                  {"stateId": "s-2"})
    assert ev is not None and ev.changed == ("stateId",)
    assert ev.digests == {"stateId": digest("s-2")}


def test_only_exact_evidence_matches() -> None:
    [intent] = write_intents('mutation { issueUpdate(id: "i-1", input: {stateId: "s-2"}) { success } }')
    fp = intent.fingerprint
    assert matches(fp, evidence({"stateId": "old"}, {"stateId": "s-2"}))
    assert not matches(fp, evidence({"stateId": "old"}, {"stateId": "s-3"}))  # another state
    assert not matches(fp, evidence({"stateId": "old", "title": "x"}, {"stateId": "s-2"}))  # and more
    assert not matches(fp, evidence({"title": "x"}, {"title": "y"}))  # something else
    assert not matches(fp, evidence({"updatedAt": "t"}, {}))  # nothing substantive changed


def test_no_evidence_for_creates_other_types_or_a_missing_id() -> None:
    assert evidence_of("Issue", "create", {"id": "i"}, None, "me", False) is None
    assert evidence_of("Project", "update", {"id": "p"}, {"name": "x"}, "me", False) is None
    assert evidence_of("Issue", "update", {}, {"title": "x"}, "me", False) is None
