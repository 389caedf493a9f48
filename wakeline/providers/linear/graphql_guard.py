"""What one GraphQL operation would do, read from its text before it goes to Linear.

`analyze` parses the document with graphql-core (no schema: the guard must not
depend on Linear's), picks the operation that would run, says whether it is a
query or a mutation, and for a mutation lists its root fields. A root field
whose real name (never the alias) ends in Delete, Archive, Suspend, Revoke,
Purge or Trash (Unarchive excepted) is destructive: its targets must be
resolvable, from the request alone, to ids given through its `id` or `ids`
argument. Root fields reached through fragment spreads and inline fragments
count like the others. Anything the guard cannot resolve is refused rather
than guessed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from graphql import GraphQLError, Visitor, parse, print_ast, visit
from graphql.language import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    NameNode,
    ObjectFieldNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    StringValueNode,
    ValueNode,
    VariableNode,
)

from wakeline.errors import InvalidQuery, TargetUnnameable

__all__ = ["Analysis", "MarkedCreates", "OperationKind", "RootField", "analyze", "is_destructive",
           "mark_creates", "mutation_fields"]

DESTRUCTIVE_SUFFIXES = ("delete", "archive", "suspend", "revoke", "purge", "trash")
NOT_DESTRUCTIVE_SUFFIXES = ("unarchive",)
TARGET_ARGUMENTS = ("id", "ids")
# Creates whose input takes a client-chosen `id` (wakeline's own comments rely on it).
CREATES_WITH_CLIENT_ID = ("commentCreate", "issueCreate")
# Far above any hand-written operation; bounds the parser's work on hostile input.
MAX_TOKENS = 20_000


class OperationKind(StrEnum):
    """What the selected operation is."""

    QUERY = "query"
    MUTATION = "mutation"


@dataclass(frozen=True)
class RootField:
    """One root field of the operation: its real name, its alias, and what it would destroy."""

    name: str
    alias: str | None
    destructive: bool
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Analysis:
    """The selected operation, as the guard understands it."""

    kind: OperationKind
    operation_name: str | None
    root_fields: tuple[RootField, ...]

    @property
    def is_mutation(self) -> bool:
        """True for a mutation."""
        return self.kind is OperationKind.MUTATION

    @property
    def destructive(self) -> tuple[RootField, ...]:
        """The destructive root fields (only a mutation has any)."""
        return tuple(f for f in self.root_fields if f.destructive)

    @property
    def target_list(self) -> list[str]:
        """Every destructive field's targets, first appearance first, without repeats."""
        seen: dict[str, None] = {}
        for f in self.destructive:
            for target in f.targets:
                seen.setdefault(target, None)
        return list(seen)

    @property
    def targets(self) -> frozenset[str]:
        """The set of every id a destructive field names."""
        return frozenset(self.target_list)


def is_destructive(field_name: str) -> bool:
    """True when a mutation root field of this name destroys, archives or revokes something.

    The match ignores case, so an odd spelling (`issuedelete`) cannot slip through.
    """
    lowered = field_name.lower()
    if lowered.endswith(NOT_DESTRUCTIVE_SUFFIXES):
        return False
    return lowered.endswith(DESTRUCTIVE_SUFFIXES)


def analyze(query: str, variables: Mapping[str, Any] | None = None,
            operation_name: str | None = None) -> Analysis:
    """Parse `query` and describe the operation that `operation_name` selects.

    Raises:
        InvalidQuery: the document does not parse, holds no or several candidate operations,
            selects a subscription, or spreads a fragment it does not define.
        TargetUnnameable: a destructive root field whose targets cannot be resolved to ids.
    """
    document = _parse(query)
    operation, fragments = _split(document, operation_name)
    if operation.operation is OperationType.SUBSCRIPTION:
        raise InvalidQuery("subscriptions are not supported; send a query or a mutation")
    kind = OperationKind.MUTATION if operation.operation is OperationType.MUTATION else OperationKind.QUERY
    name = operation.name.value if operation.name else None
    resolver = _Targets(operation, variables or {})
    fields = []
    for node in _root_fields(operation.selection_set, fragments, ()):
        real = node.name.value
        alias = node.alias.value if node.alias else None
        if kind is OperationKind.MUTATION and is_destructive(real):
            fields.append(RootField(real, alias, True, resolver.of(node)))
        else:
            fields.append(RootField(real, alias, False))
    return Analysis(kind, name, tuple(fields))


@dataclass(frozen=True)
class MarkedCreates:
    """A mutation to send instead, and the ids of the objects it creates."""

    query: str
    variables: dict[str, Any] | None
    ids: tuple[str, ...]


def mark_creates(query: str, variables: Mapping[str, Any] | None = None,
                 operation_name: str | None = None) -> MarkedCreates:
    """Give every `commentCreate` and `issueCreate` of a mutation a known id.

    An input that names its `id` keeps it; one without gets a fresh UUID, written into
    the input object (the query is printed again) or into the input variable. The ids
    are what the webhooks about these objects will carry, so recording them before the
    mutation leaves lets admission recognise the echo exactly (decision 0011). Inputs
    the request alone cannot reach (a variable with only a default) are left as they are.
    Call it after `analyze` accepted the operation.
    """
    document = _parse(query)
    operation, fragments = _split(document, operation_name)
    out = dict(variables) if variables is not None else None
    ids: list[str] = []
    inject: dict[int, str] = {}  # id() of an input object without an id -> the id it gets
    if operation.operation is OperationType.MUTATION:
        for field in _root_fields(operation.selection_set, fragments, ()):
            if field.name.value not in CREATES_WITH_CLIENT_ID:
                continue
            given = next((a.value for a in field.arguments or () if a.name.value == "input"), None)
            if isinstance(given, ObjectValueNode):
                known = next((f.value for f in given.fields if f.name.value == "id"), None)
                if known is None:
                    ids.append(inject.setdefault(id(given), str(uuid.uuid4())))
                elif isinstance(known, StringValueNode):
                    ids.append(known.value)
                elif isinstance(known, VariableNode) and isinstance((out or {}).get(known.name.value), str):
                    ids.append((out or {})[known.name.value])
            elif isinstance(given, VariableNode) and out is not None and isinstance(out.get(given.name.value), dict):
                value = dict(out[given.name.value])
                if value.get("id") is None:
                    value["id"] = str(uuid.uuid4())
                    out[given.name.value] = value
                if isinstance(value["id"], str):
                    ids.append(value["id"])
    if inject:
        query = print_ast(visit(document, _AddId(inject)))
    return MarkedCreates(query, out, tuple(dict.fromkeys(ids)))


def mutation_fields(query: str, operation_name: str | None = None
                    ) -> tuple[OperationDefinitionNode, list[FieldNode]]:
    """The selected operation and its root fields (through fragments); none unless a mutation.

    Call it after `analyze` accepted the operation.
    """
    operation, fragments = _split(_parse(query), operation_name)
    if operation.operation is not OperationType.MUTATION:
        return operation, []
    return operation, list(_root_fields(operation.selection_set, fragments, ()))


class _AddId(Visitor):
    """Adds `id: "<uuid>"` to exactly the input objects chosen (by identity)."""

    def __init__(self, inject: Mapping[int, str]) -> None:
        super().__init__()
        self._inject = inject

    def enter_object_value(self, node: ObjectValueNode, *_: Any) -> ObjectValueNode | None:
        new_id = self._inject.get(id(node))
        if new_id is None:
            return None  # unchanged
        field = ObjectFieldNode(name=NameNode(value="id"), value=StringValueNode(value=new_id))
        return ObjectValueNode(fields=(*node.fields, field))


# --- the document -------------------------------------------------------------------------------


def _parse(query: str) -> DocumentNode:
    if not query.strip():
        raise InvalidQuery("the query is empty")
    try:
        return parse(query, no_location=True, max_tokens=MAX_TOKENS)
    except GraphQLError as exc:
        raise InvalidQuery(f"the query does not parse: {exc.message}") from None
    except RecursionError:
        raise InvalidQuery("the query is nested too deeply") from None


def _split(document: DocumentNode, operation_name: str | None
           ) -> tuple[OperationDefinitionNode, dict[str, FragmentDefinitionNode]]:
    operations: list[OperationDefinitionNode] = []
    fragments: dict[str, FragmentDefinitionNode] = {}
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            operations.append(definition)
        elif isinstance(definition, FragmentDefinitionNode):
            if definition.name.value in fragments:
                raise InvalidQuery(f"fragment {definition.name.value} is defined twice")
            fragments[definition.name.value] = definition
        else:
            raise InvalidQuery("only operations and fragments may be sent, not type definitions")
    if not operations:
        raise InvalidQuery("the document holds no operation")
    if len(operations) > 1 and any(op.name is None for op in operations):
        raise InvalidQuery("an anonymous operation must be the only one in the document")
    if operation_name:
        chosen = [op for op in operations if op.name and op.name.value == operation_name]
        if not chosen:
            raise InvalidQuery(f"no operation named {operation_name}")
        if len(chosen) > 1:
            raise InvalidQuery(f"operation {operation_name} is defined twice")
        return chosen[0], fragments
    if len(operations) > 1:
        raise InvalidQuery("the document holds several operations; name one with operationName")
    return operations[0], fragments


def _root_fields(selection_set: SelectionSetNode | None, fragments: Mapping[str, FragmentDefinitionNode],
                 path: tuple[str, ...]) -> Iterator[FieldNode]:
    """Root fields, through fragment spreads and inline fragments; `path` stops a spread cycle."""
    for selection in selection_set.selections if selection_set else ():
        if isinstance(selection, FieldNode):
            yield selection
        elif isinstance(selection, InlineFragmentNode):
            yield from _root_fields(selection.selection_set, fragments, path)
        elif isinstance(selection, FragmentSpreadNode):
            name = selection.name.value
            fragment = fragments.get(name)
            if fragment is None:
                raise InvalidQuery(f"fragment {name} is spread but not defined")
            if name in path:
                raise InvalidQuery(f"fragment {name} spreads itself")
            yield from _root_fields(fragment.selection_set, fragments, (*path, name))


# --- targets ------------------------------------------------------------------------------------


class _Targets:
    """Resolves a destructive field's `id`/`ids` to literal ids, from the request alone."""

    def __init__(self, operation: OperationDefinitionNode, variables: Mapping[str, Any]) -> None:
        self._variables = variables
        self._defaults: dict[str, ValueNode | None] = {
            d.variable.name.value: d.default_value for d in operation.variable_definitions or ()
        }

    def of(self, field: FieldNode) -> tuple[str, ...]:
        name = field.name.value
        arguments = [a for a in field.arguments or () if a.name.value in TARGET_ARGUMENTS]
        if not arguments:
            raise TargetUnnameable(f"{name} names no target: give it an id or ids argument", field=name)
        targets: list[str] = []
        for argument in arguments:
            targets.extend(self._value(name, argument.value, nested=False))
        if not targets:
            raise TargetUnnameable(f"{name} names no target: its ids are empty", field=name)
        return tuple(dict.fromkeys(targets))

    def _value(self, field: str, node: ValueNode, *, nested: bool) -> list[str]:
        if isinstance(node, (StringValueNode, IntValueNode)):
            return [node.value]
        if isinstance(node, ListValueNode) and not nested:
            out: list[str] = []
            for item in node.values:
                out.extend(self._value(field, item, nested=True))
            return out
        if isinstance(node, VariableNode):
            return self._variable(field, node.name.value, nested=nested)
        raise TargetUnnameable(f"{field}'s target is not an id, a list of ids or a variable holding them",
                               field=field)

    def _variable(self, field: str, name: str, *, nested: bool) -> list[str]:
        if name not in self._defaults:
            raise InvalidQuery(f"variable ${name} is used but not declared")
        if name in self._variables:
            return self._runtime(field, name, self._variables[name], nested=nested)
        default = self._defaults[name]
        if default is None:
            raise TargetUnnameable(f"{field}'s target comes from ${name}, which has no value and no default",
                                   field=field)
        return self._value(field, default, nested=nested)

    @staticmethod
    def _runtime(field: str, name: str, value: Any, *, nested: bool) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, int) and not isinstance(value, bool):
            return [str(value)]
        if isinstance(value, list) and not nested and all(isinstance(v, str) for v in value):
            return list(value)
        raise TargetUnnameable(f"{field}'s target ${name} does not hold an id or a list of ids",
                               field=field)
