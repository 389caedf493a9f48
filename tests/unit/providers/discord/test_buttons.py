"""A proposed send as a thread shows it: the post's parts, its buttons and their ids, the
outcome lines, the Markdown escaping, and `!approve ID` / `!deny ID` read from a message."""

from __future__ import annotations

from dataclasses import replace

import pytest

from wakeline.models.approvals import Approval, ApprovalStatus, body_digest
from wakeline.providers.discord import buttons, texts
from wakeline.providers.discord.messages import ThreadMessage

APPROVAL_ID = "apr_0123456789abcdef"


def approval(body: str = "Thanks, see you *tomorrow*.", **changes: object) -> Approval:
    made = Approval(APPROVAL_ID, "me", "alice", "cv_1", "!room:example.org", body,
                    body_digest(body), ApprovalStatus.PENDING, "turn_1", 1_800_000_000_000,
                    1_800_086_400_000, None, None, 0, None, None, None)
    return replace(made, **changes)  # type: ignore[arg-type]


def test_a_pending_approval_has_approve_and_deny_bound_to_its_body() -> None:
    a = approval()
    [row] = buttons.components(a)
    assert row["type"] == 1
    assert [(b["type"], b["label"], b["custom_id"]) for b in row["components"]] == [
        (2, "Approve", f"wl:approve:{APPROVAL_ID}:{a.body_sha256}"),
        (2, "Deny", f"wl:deny:{APPROVAL_ID}")]
    assert all(len(b["custom_id"]) <= 100 for b in row["components"])
    assert buttons.parse_custom_id(row["components"][0]["custom_id"]) == \
        buttons.Button("approve", APPROVAL_ID, a.body_sha256)
    assert buttons.parse_custom_id(row["components"][1]["custom_id"]) == \
        buttons.Button("deny", APPROVAL_ID)


@pytest.mark.parametrize("forged", [
    "", "wl:approve:" + APPROVAL_ID, f"wl:deny:{APPROVAL_ID}:{'0' * 64}",
    f"wl:approve:{APPROVAL_ID}:{'0' * 63}", f"wl:approve:{APPROVAL_ID}:{'0' * 64}:x",
    f"wl:send:{APPROVAL_ID}", "wl:deny:apr_0123", f"xx:deny:{APPROVAL_ID}",
    f"wl:deny:{APPROVAL_ID.upper()}", f"wl:deny:{APPROVAL_ID}\n"])
def test_anything_wakeline_did_not_make_is_no_button(forged: str) -> None:
    assert buttons.parse_custom_id(forged) is None


@pytest.mark.parametrize(("status", "by", "label"), [
    (ApprovalStatus.APPROVED, "discord:42", "Approved: sending · by Discord user 42"),
    (ApprovalStatus.SENT, "operator", "Sent · by the operator"),
    (ApprovalStatus.DENIED, "discord:42", "Denied · by Discord user 42"),
    (ApprovalStatus.EXPIRED, None, "Expired: not sent"),
    (ApprovalStatus.FAILED, "operator", "Failed: not sent"),
])
def test_a_decided_approval_has_one_disabled_button_that_says_what_became_of_it(
        status: ApprovalStatus, by: str | None, label: str) -> None:
    [row] = buttons.components(approval(status=status, decided_by=by))
    assert row["components"] == [{"type": 2, "style": 2, "label": label,
                                  "custom_id": f"wl:done:{APPROVAL_ID}", "disabled": True}]


def test_the_post_shows_the_whole_body_escaped_with_the_buttons_hint_last() -> None:
    [only] = buttons.post_parts(approval())
    assert only.startswith("**The agent proposes a message** for Matrix room `!room:example.org`")
    assert "Thanks, see you \\*tomorrow\\*." in only and APPROVAL_ID in only
    assert only.endswith("expires <t:1800086400:R>")

    long_body = "\n".join(f"line {n:04d} " + "x" * 90 for n in range(100))  # ~10,000 chars
    parts = buttons.post_parts(approval(long_body))
    assert len(parts) >= 5 and all(len(p) <= texts.MESSAGE_MAX_CHARS for p in parts)
    shown = "\n".join(parts)
    assert all(f"line {n:04d} " + "x" * 90 in shown for n in range(100))
    assert f"`!approve {APPROVAL_ID}`" in parts[-1]


def test_outcome_lines_say_who_and_what() -> None:
    assert buttons.outcome_line(approval()) is None
    assert buttons.outcome_line(approval(status=ApprovalStatus.APPROVED,
                                         decided_by="discord:42")) == \
        f"Approved by <@42> (`{APPROVAL_ID}`): sending it to `!room:example.org`."
    assert buttons.outcome_line(approval(status=ApprovalStatus.SENT, event_id="$ev")) == \
        f"Sent (`{APPROVAL_ID}`) to `!room:example.org` as `$ev`."
    assert "the operator" in str(buttons.outcome_line(approval(status=ApprovalStatus.DENIED,
                                                               decided_by="operator")))
    assert buttons.outcome_line(approval(status=ApprovalStatus.FAILED, error="you left")) == \
        f"Not sent (`{APPROVAL_ID}`): you left"
    assert "expired" in str(buttons.outcome_line(approval(status=ApprovalStatus.EXPIRED)))


def test_a_post_is_found_by_its_buttons_only_among_a_bot_s_messages() -> None:
    a = approval()
    post = {"author": {"id": "1", "bot": True}, "components": buttons.components(a)}
    done = {"author": {"id": "1", "bot": True},
            "components": buttons.components(approval(status=ApprovalStatus.SENT))}
    assert buttons.post_of(post, APPROVAL_ID) == a.body_sha256
    assert buttons.post_of(done, APPROVAL_ID) == ""
    assert buttons.post_of(post, "apr_ffffffffffffffff") is None
    assert buttons.post_of({**post, "author": {"id": "2"}}, APPROVAL_ID) is None
    assert buttons.post_of({"author": {"bot": True}, "components": []}, APPROVAL_ID) is None


@pytest.mark.parametrize(("text", "shown"), [
    ("*bold* _it_ ~s~ `c` |sp|", "\\*bold\\* \\_it\\_ \\~s\\~ \\`c\\` \\|sp\\|"),
    ("> quoted\n# title\n- item\n  - nested\n1. first", "\\> quoted\n\\# title\n\\- item\n  \\- "
     "nested\n1\\. first"),
    ("3.5 apples, a-b, #1", "3.5 apples, a-b, #1"),
    ("[x](https://e.org) <@123> a\\b", "\\[x\\](https://e.org) \\<@123> a\\\\b"),
    ("see https://e.org/a_b*c", "see https://e.org/a_b*c"),
])
def test_markdown_is_escaped_so_the_exact_characters_show(text: str, shown: str) -> None:
    assert texts.escape_markdown(text) == shown


def message(content: str) -> ThreadMessage:
    return ThreadMessage("1", "2", "3", "4", "ada", False, False, content)


@pytest.mark.parametrize(("content", "command", "argument"), [
    (f"!approve {APPROVAL_ID}", "approve", APPROVAL_ID),
    (f"  !DENY   {APPROVAL_ID} ", "deny", APPROVAL_ID),
    ("!approve", "approve", None),
    (f"!approve {APPROVAL_ID} please", None, None),
    (f"please !approve {APPROVAL_ID}", None, None),
    ("!stop", "stop", None), ("!status now", None, None), ("", None, None),
])
def test_decisions_in_a_thread_are_the_word_and_at_most_one_id(
        content: str, command: str | None, argument: str | None) -> None:
    assert (message(content).command, message(content).argument) == (command, argument)
