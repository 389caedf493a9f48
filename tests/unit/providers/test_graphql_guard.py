"""The GraphQL guard: which operation runs, whether it mutates, and what it would destroy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from graphql import parse

from wakeline.errors import InvalidQuery, TargetUnnameable
from wakeline.providers.linear.graphql_guard import (
    MarkedCreates, OperationKind, analyze, is_destructive, mark_creates,
)


def targets(query: str, variables: dict[str, Any] | None = None, name: str | None = None) -> list[str]:
    return analyze(query, variables, name).target_list


# --- operations ----------------------------------------------------------------------------------


def test_a_query_is_a_query_with_its_root_fields() -> None:
    a = analyze("query Me { viewer { id } teams { nodes { key } } }")
    assert a.kind is OperationKind.QUERY and not a.is_mutation
    assert a.operation_name == "Me"
    assert [f.name for f in a.root_fields] == ["viewer", "teams"]
    assert a.destructive == () and a.targets == frozenset()


def test_the_shorthand_selection_set_is_a_query() -> None:
    assert analyze("{ viewer { id } }").kind is OperationKind.QUERY


def test_a_mutation_that_destroys_nothing_has_no_targets() -> None:
    a = analyze('mutation { issueCreate(input: {title: "x", teamId: "t"}) { success } }')
    assert a.is_mutation and a.destructive == () and a.target_list == []


def test_query_fields_named_like_deletes_are_not_destructive() -> None:
    # Only a mutation can destroy; a query field that happens to end in "Archive" reads.
    a = analyze('query { issueArchive(id: "x") { id } }')
    assert a.destructive == ()


def test_operation_name_picks_one_of_several() -> None:
    doc = ('query Read { viewer { id } } '
           'mutation Wipe { issueDelete(id: "i-1") { success } }')
    assert analyze(doc, None, "Read").kind is OperationKind.QUERY
    wipe = analyze(doc, None, "Wipe")
    assert wipe.is_mutation and wipe.target_list == ["i-1"]


def test_several_operations_without_a_name_are_refused() -> None:
    with pytest.raises(InvalidQuery, match="operationName"):
        analyze("query A { viewer { id } } query B { viewer { name } }")


def test_an_unknown_operation_name_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="no operation named C"):
        analyze("query A { viewer { id } } query B { viewer { name } }", None, "C")


def test_an_operation_name_defined_twice_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="twice"):
        analyze('query A { viewer { id } } mutation A { issueDelete(id: "x") { success } }', None, "A")


def test_an_anonymous_operation_must_be_alone() -> None:
    with pytest.raises(InvalidQuery, match="anonymous"):
        analyze('{ viewer { id } } mutation B { issueDelete(id: "x") { success } }', None, "B")


def test_a_single_named_operation_needs_no_name() -> None:
    assert analyze("query Only { viewer { id } }").operation_name == "Only"


def test_subscriptions_are_refused() -> None:
    with pytest.raises(InvalidQuery, match="subscriptions"):
        analyze("subscription { issueUpdates { id } }")


@pytest.mark.parametrize("query", ["query {", "mutation { issueDelete(id: ) }", "not graphql at all", "   "])
def test_what_does_not_parse_is_an_invalid_query(query: str) -> None:
    with pytest.raises(InvalidQuery):
        analyze(query)


def test_a_document_of_fragments_only_holds_no_operation() -> None:
    with pytest.raises(InvalidQuery, match="no operation"):
        analyze("fragment F on Query { viewer { id } }")


def test_type_definitions_are_refused() -> None:
    with pytest.raises(InvalidQuery, match="type definitions"):
        analyze("type Foo { id: ID } query { viewer { id } }")


def test_huge_documents_are_refused_by_the_token_limit() -> None:
    query = "query { " + " ".join(f"f{i}: viewer {{ id }}" for i in range(6000)) + " }"
    with pytest.raises(InvalidQuery):
        analyze(query)


# --- destructive names -------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "issueDelete", "documentDelete", "issueArchive", "projectArchive", "userSuspend",
    "apiKeyRevoke", "cachePurge", "issueTrash", "issuedelete", "ISSUEARCHIVE",
])
def test_destructive_names(name: str) -> None:
    assert is_destructive(name)


@pytest.mark.parametrize("name", [
    "issueUnarchive", "projectUnarchive", "issueCreate", "issueUpdate", "commentCreate",
    "archivedIssues", "deleteLater", "issueArchived",
])
def test_names_that_do_not_destroy(name: str) -> None:
    assert not is_destructive(name)


def test_unarchive_needs_no_confirmation() -> None:
    a = analyze('mutation { issueUnarchive(id: "i-1") { success } }')
    assert a.destructive == () and a.target_list == []


# --- targets: literals, aliases, fragments ----------------------------------------------------------


def test_a_literal_id_is_the_target() -> None:
    a = analyze('mutation { issueDelete(id: "i-1") { success } }')
    (field,) = a.destructive
    assert (field.name, field.alias, field.targets) == ("issueDelete", None, ("i-1",))
    assert a.targets == frozenset({"i-1"})


def test_an_int_literal_is_an_id_too() -> None:
    assert targets("mutation { issueDelete(id: 42) { success } }") == ["42"]


def test_a_list_of_ids_names_every_target() -> None:
    assert targets('mutation { issueBatchDelete(ids: ["a", "b", "a"]) { success } }') == ["a", "b"]


def test_the_real_name_counts_not_the_alias() -> None:
    a = analyze('mutation { harmless: issueDelete(id: "i-1") { success } '
                'issueDelete: issueCreate(input: {}) { success } }')
    assert [(f.name, f.alias, f.destructive) for f in a.root_fields] == [
        ("issueDelete", "harmless", True), ("issueCreate", "issueDelete", False)]
    assert a.target_list == ["i-1"]


def test_every_destructive_field_contributes_its_targets() -> None:
    a = analyze('mutation { a: issueDelete(id: "1") { success } b: issueArchive(id: "2") { success } '
                'c: issueDelete(id: "1") { success } issueUpdate(id: "3", input: {}) { success } }')
    assert [f.alias for f in a.destructive] == ["a", "b", "c"]
    assert a.target_list == ["1", "2"] and a.targets == frozenset({"1", "2"})


def test_root_fields_behind_a_fragment_spread_count() -> None:
    doc = ('mutation Clean { ...Wipe issueCreate(input: {}) { success } } '
           'fragment Wipe on Mutation { documentDelete(id: "d-1") { success } }')
    a = analyze(doc)
    assert [f.name for f in a.destructive] == ["documentDelete"]
    assert a.target_list == ["d-1"]


def test_nested_fragments_and_inline_fragments_count() -> None:
    doc = ('mutation { ... on Mutation { x: issueArchive(id: "i-1") { success } ...Outer } } '
           'fragment Outer on Mutation { ...Inner } '
           'fragment Inner on Mutation { ... { projectDelete(id: "p-1") { success } } }')
    assert targets(doc) == ["i-1", "p-1"]


def test_directives_do_not_hide_a_destructive_field() -> None:
    assert targets('mutation { issueDelete(id: "i-1") @skip(if: true) { success } }') == ["i-1"]


def test_an_undefined_fragment_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="Missing"):
        analyze("mutation { ...Missing }")


def test_a_fragment_cycle_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="spreads itself"):
        analyze("mutation { ...A } fragment A on Mutation { ...B } fragment B on Mutation { ...A }")


def test_a_fragment_defined_twice_is_refused() -> None:
    with pytest.raises(InvalidQuery, match="twice"):
        analyze("mutation { ...A } fragment A on Mutation { x } fragment A on Mutation { y }")


# --- targets: variables and defaults --------------------------------------------------------------


def test_a_variable_supplies_the_id() -> None:
    doc = "mutation Del($id: String!) { issueDelete(id: $id) { success } }"
    assert targets(doc, {"id": "i-9"}) == ["i-9"]


def test_a_variable_supplies_a_list_of_ids() -> None:
    doc = "mutation ($ids: [String!]!) { issueBatchArchive(ids: $ids) { success } }"
    assert targets(doc, {"ids": ["a", "b"]}) == ["a", "b"]


def test_variables_inside_a_list_literal() -> None:
    doc = 'mutation ($a: String!, $b: String = "b-default") { issueBatchDelete(ids: [$a, $b, "c"]) { success } }'
    assert targets(doc, {"a": "a-1"}) == ["a-1", "b-default", "c"]


def test_a_variable_default_supplies_the_id() -> None:
    doc = 'mutation ($id: String = "i-default") { issueDelete(id: $id) { success } }'
    assert targets(doc) == ["i-default"]
    assert targets(doc, {"id": "i-given"}) == ["i-given"]  # a given value wins over the default


def test_a_list_default() -> None:
    doc = 'mutation ($ids: [String!] = ["x", "y"]) { issueBatchDelete(ids: $ids) { success } }'
    assert targets(doc) == ["x", "y"]


def test_variables_reach_into_fragments() -> None:
    doc = ('mutation Wipe($doc: String!) { ...F } '
           'fragment F on Mutation { gone: documentDelete(id: $doc) { success } }')
    assert targets(doc, {"doc": "d-7"}) == ["d-7"]


def test_an_undeclared_variable_is_an_invalid_query() -> None:
    with pytest.raises(InvalidQuery, match=r"\$id"):
        analyze("mutation { issueDelete(id: $id) { success } }", {"id": "x"})


# --- unnameable targets ---------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "variables"), [
    # no id or ids argument
    ("mutation { issueDelete { success } }", None),
    ('mutation { issueArchive(input: {id: "x"}) { success } }', None),
    # an object, a boolean, a float, an enum, null
    ('mutation { issueDelete(id: {value: "x"}) { success } }', None),
    ("mutation { issueDelete(id: true) { success } }", None),
    ("mutation { issueDelete(id: 1.5) { success } }", None),
    ("mutation { issueDelete(id: ALL) { success } }", None),
    ("mutation { issueDelete(id: null) { success } }", None),
    # a nested list, an empty list
    ('mutation { issueBatchDelete(ids: [["x"]]) { success } }', None),
    ("mutation { issueBatchDelete(ids: []) { success } }", None),
    # a variable with no value and no default, or given null, an object or non-string items
    ("mutation ($id: String) { issueDelete(id: $id) { success } }", None),
    ("mutation ($id: String) { issueDelete(id: $id) { success } }", {"id": None}),
    ('mutation ($id: String = "d") { issueDelete(id: $id) { success } }', {"id": None}),
    ("mutation ($id: String) { issueDelete(id: $id) { success } }", {"id": {"eq": "x"}}),
    ("mutation ($id: String) { issueDelete(id: $id) { success } }", {"id": True}),
    ("mutation ($ids: [String]) { issueBatchDelete(ids: $ids) { success } }", {"ids": ["a", 1]}),
    ("mutation ($ids: [String]) { issueBatchDelete(ids: $ids) { success } }", {"ids": []}),
    ("mutation ($a: [String]) { issueBatchDelete(ids: [$a]) { success } }", {"a": ["x"]}),
    ("mutation ($id: String = null) { issueDelete(id: $id) { success } }", None),
])
def test_unnameable_targets_are_refused(query: str, variables: dict[str, Any] | None) -> None:
    with pytest.raises(TargetUnnameable) as caught:
        analyze(query, variables)
    assert caught.value.extra["field"].endswith(("Delete", "Archive"))
    assert caught.value.body()["error"] == "target_unnameable"


def test_the_refusal_names_the_field_not_the_alias() -> None:
    with pytest.raises(TargetUnnameable) as caught:
        analyze("mutation { tidy: documentDelete { success } }")
    assert caught.value.extra == {"field": "documentDelete"}
    assert "documentDelete" in caught.value.detail


def test_a_non_destructive_field_needs_no_nameable_target() -> None:
    a = analyze("mutation ($input: IssueUpdateInput!) { issueUpdate(id: $x, input: $input) { success } }"
                .replace("$x", '"i-1"'))
    assert a.destructive == ()


# --- marking creates -------------------------------------------------------------------------------


def test_a_create_without_an_id_gets_one_in_the_query() -> None:
    marked = mark_creates('mutation { commentCreate(input: {issueId: "i-1", body: "hi"}) { success } }')
    [object_id] = marked.ids
    assert uuid.UUID(object_id).version == 4
    again = parse(marked.query)  # still a valid document, with the id in the input
    assert f'id: "{object_id}"' in marked.query and again.definitions
    assert marked.variables is None


def test_a_create_through_a_variable_gets_its_id_in_the_variables_only() -> None:
    query = "mutation C($in: CommentCreateInput!) { commentCreate(input: $in) { success } }"
    given = {"in": {"issueId": "i-1", "body": "hi"}}
    marked = mark_creates(query, given)
    assert marked.query == query
    assert marked.variables == {"in": {"issueId": "i-1", "body": "hi", "id": marked.ids[0]}}
    assert given == {"in": {"issueId": "i-1", "body": "hi"}}  # the caller's dict is not changed


@pytest.mark.parametrize(("query", "variables"), [
    ('mutation { issueCreate(input: {id: "mine", teamId: "T", title: "t"}) { success } }', None),
    ('mutation C($id: String!) { commentCreate(input: {id: $id, issueId: "i", body: "b"}) { success } }',
     {"id": "mine"}),
    ("mutation C($in: CommentCreateInput!) { commentCreate(input: $in) { success } }",
     {"in": {"id": "mine", "issueId": "i", "body": "b"}}),
])
def test_an_id_the_caller_chose_is_kept_and_marked(query: str, variables: dict[str, Any] | None) -> None:
    marked = mark_creates(query, variables)
    assert marked.ids == ("mine",)
    assert marked.query == query and marked.variables == variables


def test_aliases_and_fragments_are_followed_and_only_the_create_input_changes() -> None:
    query = ('mutation M { a: commentCreate(input: {issueId: "i", body: "b", extra: {k: 1}}) { success }'
             ' ...F } fragment F on Mutation { issueCreate(input: {teamId: "T", title: "t"}) { success } }')
    marked = mark_creates(query)
    assert len(marked.ids) == 2
    assert marked.query.count("id: ") == 2 and "extra: { k: 1 }" in marked.query


@pytest.mark.parametrize("query", [
    "query { viewer { id } }",
    'mutation { issueUpdate(id: "i-1", input: {title: "t"}) { success } }',
    'mutation { projectCreate(input: {name: "p"}) { success } }',  # its input may not take an id
])
def test_queries_and_other_mutations_are_left_alone(query: str) -> None:
    assert mark_creates(query) == MarkedCreates(query, None, ())
