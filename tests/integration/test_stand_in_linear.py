"""The shipped stand-in for Linear (`wakeline.testing`), over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from wakeline.testing import StandInLinear

# The documents as wakeline sends them (the stand-in goes by the root field's name).
ACTIVITY = ("mutation WakelineActivity($input: AgentActivityCreateInput!) "
            "{ agentActivityCreate(input: $input) { success agentActivity { id } } }")
COMMENT = ("mutation WakelineComment($input: CommentCreateInput!) "
           "{ commentCreate(input: $input) { success comment { id } } }")
UPDATE = ("mutation WakelineUpdate($id: String!, $input: {}!) "
          "{{ {}(id: $id, input: $input) {{ success }} }}")


@pytest.fixture
def stand_in() -> Iterator[StandInLinear]:
    stand_in = StandInLinear().start()
    yield stand_in
    stand_in.stop()


def ask(stand_in: StandInLinear, query: str, **variables: Any) -> dict[str, Any]:
    resp = requests.post(stand_in.url, json={"query": query, "variables": variables}, timeout=10)
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    return dict(resp.json())


def test_it_answers_wakelines_writes_and_records_them_in_order(stand_in: StandInLinear) -> None:
    activity = {"id": "act-1", "agentSessionId": "s-1",
                "content": {"type": "thought", "body": "hi"}}
    assert ask(stand_in, ACTIVITY, input=activity) == {"data": {"agentActivityCreate": {
        "success": True, "agentActivity": {"id": "act-1"}}}}
    assert ask(stand_in, COMMENT, input={"id": "c-1", "issueId": "i-1", "body": "Done."}) \
        == {"data": {"commentCreate": {"success": True, "comment": {"id": "c-1"}}}}
    for field, kind in (("issueUpdate", "IssueUpdateInput"),
                        ("commentUpdate", "CommentUpdateInput")):
        answer = ask(stand_in, UPDATE.format(kind, field), id="x-1", input={"body": "edited"})
        assert answer == {"data": {field: {"success": True}}}
    ask(stand_in, "query WakelineViewer { viewer { id name } }")  # a read: no write

    assert [(w.operation, w.input.get("id") or w.input.get("body")) for w in stand_in.writes()] == [
        ("agentActivityCreate", "act-1"), ("commentCreate", "c-1"), ("issueUpdate", "edited"),
        ("commentUpdate", "edited")]
    assert [r.input for r in stand_in.activities()] == [activity]
    assert [r.input["body"] for r in stand_in.comments()] == ["Done."]
    assert len(stand_in.updates()) == 1 and len(stand_in.requests) == 5
    assert stand_in.requests[0].headers["Content-Type"] == "application/json"


def test_it_says_who_the_credential_is_and_that_users_are_people() -> None:
    stand_in = StandInLinear(viewer={"id": "me", "name": "my app"},
                             organization={"id": "org-1", "name": "Mine"}).start()
    try:
        assert ask(stand_in, "query { viewer { id name } }") == {
            "data": {"viewer": {"id": "me", "name": "my app"}}}
        install = "query WakelineInstall { viewer { id name } organization { id name } }"
        assert ask(stand_in, install) == {"data": {"viewer": {"id": "me", "name": "my app"},
                                                   "organization": {"id": "org-1", "name": "Mine"}}}
        assert ask(stand_in, "query WakelineUser($id: String!) { user(id: $id) { id app } }",
                   id="u-7") == {"data": {"user": {"id": "u-7", "app": False}}}
    finally:
        stand_in.stop()


def test_a_handler_answers_first_and_anything_unknown_is_an_error(stand_in: StandInLinear) -> None:
    unknown = ask(stand_in, "query { teams { nodes { id } } }")
    assert unknown["data"] is None and "does not know" in unknown["errors"][0]["message"]

    stand_in.handler = lambda body: ({"data": {"teams": {"nodes": []}}}
                                     if "teams" in body.get("query", "") else None)
    assert ask(stand_in, "query { teams { nodes { id } } }") == {"data": {"teams": {"nodes": []}}}
    assert ask(stand_in, "query { viewer { id name } }")["data"]["viewer"]["id"] \
        == "stand-in-app-user"  # None: the stand-in's own answer

    resp = requests.post(stand_in.url, data=b"not json", timeout=10)
    assert resp.status_code == 200 and "errors" in resp.json()
    assert stand_in.requests[-1].body == {}


def test_its_file_storage_answers_only_with_the_credential(stand_in: StandInLinear) -> None:
    stand_in.files_authorization = "lin_api_KEY"
    link = stand_in.upload(b"\x89PNG bytes", "shot.png", "image/png")
    assert link.startswith(stand_in.uploads_url + "/")
    assert requests.get(link, timeout=10).status_code == 401
    assert requests.get(link, headers={"Authorization": "other"}, timeout=10).status_code == 401
    got = requests.get(link, headers={"Authorization": "lin_api_KEY"}, timeout=10)
    assert (got.status_code, got.content, got.headers["Content-Type"]) == \
        (200, b"\x89PNG bytes", "image/png")
    missing = requests.get(stand_in.uploads_url + "/nothing", headers={"Authorization": "lin_api_KEY"},
                           timeout=10)
    assert missing.status_code == 404
    assert [(r.path.rsplit("/", 1)[-1], r.refused) for r in stand_in.downloads] == [
        ("shot.png", True), ("shot.png", True), ("shot.png", False), ("nothing", False)]
