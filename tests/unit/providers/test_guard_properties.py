"""A property of the guard: no generated mutation dispatches a destructive root field unless
`confirm` lists exactly its targets, whatever aliases, fragments, variables and defaults say."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import given, settings

from wakeline.errors import ConfirmMismatch, TargetUnnameable
from wakeline.http.linear import check_confirm
from wakeline.providers.linear.graphql_guard import analyze

EXAMPLES = int(os.environ.get("WAKELINE_FUZZ_EXAMPLES", "300"))
DESTRUCTIVE = ["issueDelete", "documentArchive", "teamKeyRevoke", "userSuspend", "projectTrash",
               "attachmentPurge", "IssueDELETE"]
HARMLESS = ["issueUpdate", "issueUnarchive", "commentCreate", "documentUpdate"]
IDS = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=8)


@dataclass
class Doc:
    """A mutation being built, and the ids its destructive fields really target."""

    fields: list[str] = field(default_factory=list)
    fragments: list[str] = field(default_factory=list)
    declarations: list[str] = field(default_factory=list)
    variables: dict[str, object] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)
    unnameable: bool = False


@st.composite
def mutations(draw: st.DrawFn) -> Doc:
    doc = Doc()
    for n in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(DESTRUCTIVE + HARMLESS))
        alias = draw(st.sampled_from(["", f"a{n}: ", "issueUpdate: ", "keep: "]))
        ids = list(dict.fromkeys(draw(st.lists(IDS, min_size=1, max_size=3))))
        how = draw(st.sampled_from(["literal", "list", "variable", "default", "missing"]))
        var = f"v{n}"
        if how == "literal":
            argument = f"id: {json.dumps(ids[0])}"
            ids = ids[:1]
        elif how == "list":
            argument = f"ids: [{', '.join(json.dumps(i) for i in ids)}]"
        elif how == "variable":
            doc.declarations.append(f"${var}: [ID!]")
            doc.variables[var] = ids
            argument = f"ids: ${var}"
        elif how == "default":
            doc.declarations.append(f"${var}: [ID!] = [{', '.join(json.dumps(i) for i in ids)}]")
            argument = f"ids: ${var}"
        else:  # declared, with neither a value nor a default
            doc.declarations.append(f"${var}: [ID!]")
            argument = f"ids: ${var}"
        text = f"{alias}{name}({argument}) {{ success }}"
        if name.lower().endswith(("delete", "archive", "revoke", "suspend", "trash", "purge")) \
                and not name.lower().endswith("unarchive"):
            if how == "missing":
                doc.unnameable = True
            doc.targets += [i for i in ids if i not in doc.targets]
        where = draw(st.sampled_from(["root", "inline", "fragment"]))
        if where == "inline":
            text = f"... on Mutation {{ {text} }}"
        elif where == "fragment":
            doc.fragments.append(f"fragment F{n} on Mutation {{ {text} }}")
            text = f"...F{n}"
        doc.fields.append(text)
    return doc


def render(doc: Doc) -> str:
    head = f"mutation M({', '.join(doc.declarations)})" if doc.declarations else "mutation M"
    return f"{head} {{ {' '.join(doc.fields)} }} {' '.join(doc.fragments)}"


def dispatched(doc: Doc, confirm: list[str]) -> bool:
    try:
        check_confirm(analyze(render(doc), doc.variables, "M"), confirm)
    except (ConfirmMismatch, TargetUnnameable):
        return False
    return True


@settings(max_examples=EXAMPLES, deadline=None)
@given(doc=mutations(), data=st.data())
def test_destructive_fields_run_only_with_exactly_their_targets_confirmed(doc: Doc, data: st.DataObject) -> None:
    exact = data.draw(st.permutations(doc.targets))
    other = data.draw(st.lists(IDS, max_size=4))
    if doc.unnameable:
        assert not dispatched(doc, exact) and not dispatched(doc, other)
        return
    assert dispatched(doc, list(exact))
    if other != exact and set(other) != set(doc.targets):
        assert not dispatched(doc, other)
    if doc.targets:
        assert not dispatched(doc, list(exact)[1:])  # one short
        assert not dispatched(doc, [*exact, "extra-id"])  # one more
        assert not dispatched(doc, [*exact, exact[0]])  # a repeat
