"""What wakeline writes in a control thread, and how it fits Discord's limits.

Texts live here so they read as one voice. Discord refuses a message over 2,000
characters and a thread name outside 1-100, so `split_message` cuts long answers
on line boundaries where it can and `thread_title` keeps `[ENG-123] Issue title`
within the limit.
"""

from __future__ import annotations

import re

MESSAGE_MAX_CHARS = 2000
TITLE_MAX_CHARS = 100
_ELLIPSIS = "…"

OPENED = ("wakeline follows {issue} in this thread: the agent's answers, errors and questions "
          "appear here, and a message here reaches it like a comment in Linear. "
          "`!stop` stops the running turn, `!reset` starts a fresh context, `!status` shows "
          "where it stands.")
REPLACED = ("This thread replaces one that was deleted; the conversation, its agent session and "
            "its workspace are unchanged.")
CLOSED = "The issue was completed or canceled: this thread is archived and locked."
REOPENED = "The issue was reopened: the agent takes messages here again."
RESET = "Context reset: the next message starts a fresh agent session."
ABANDONED = "The operator abandoned the stalled turn; the conversation moves on."
STALLED = "The agent could not finish this after {attempts} attempts ({error}). " \
          "An operator can retry or abandon it (`wakeline conversations retry|abandon`)."
STOPPED = "Stopped."
NOTHING_TO_STOP = "Nothing is running: there is no turn to stop."
COMMAND_FAILED = "Could not {command} now ({detail})."
EMPTY_RESPONSE = "(the agent finished without output)"
LEFT_OUT = ("({count} earlier answers are not repeated here: they are in Linear and in the "
            "owner's journal.)")
MATRIX_TAG = "matrix"
OPENED_MATRIX = ("wakeline follows the Matrix room of route {route} in this thread: the agent's "
                 "reports appear here, and every message it proposes to send to the room, which "
                 "is sent only once a person approves it (its buttons, or `!approve ID` / "
                 "`!deny ID` here). A message here reaches the agent; `!stop`, `!reset` and "
                 "`!status` work as for an issue.")

# A proposed Matrix send (the post, its buttons, what became of it).
PROPOSAL_HEADER = ("**The agent proposes a message** for Matrix room `{room}` (route {route}), "
                   "approval `{id}`:")
PROPOSAL_FOOTER = ("-# sha256 `{sha}…` · approve or deny with the buttons, or `!approve {id}` / "
                   "`!deny {id}` in this thread · expires <t:{expires}:R>")
APPROVED_LINE = "Approved by {who} ({id}): sending it to `{room}`."
DENIED_LINE = "Denied by {who} ({id}): it is not sent."
EXPIRED_LINE = "{id} expired: nobody decided within a day; it is not sent."
SENT_LINE = "Sent ({id}) to `{room}` as `{event}`."
FAILED_LINE = "Not sent ({id}): {error}"
# Refusals: answered to the clicker alone (ephemeral) or in the thread for `!approve`.
NOT_ALLOWED = "You may not decide wakeline's approvals: nothing changed."
UNKNOWN_BUTTON = "This is not a button wakeline made: nothing changed."
NO_APPROVAL = "There is no approval {id}: nothing changed."
OTHER_THREAD = "{id} belongs to another conversation's thread: decide it there. Nothing changed."
NOT_SHOWN = "{id} has not been shown in this thread: nothing approved."
BODY_CHANGED = "The text of {id} is not the one shown here: nothing approved."
ALREADY = "{id} is already {status}{by}: nothing changed."
CANNOT = "{id} is {status}: it cannot be {verb}. Nothing changed."
DECISION_USAGE = "Say which approval: `!approve ID` or `!deny ID`, alone in a message."
NO_APPROVALS = "No Matrix route sends through wakeline here: there is nothing to approve."
STATUS_LABELS = {"approved": "Approved: sending", "denied": "Denied", "sent": "Sent",
                 "expired": "Expired: not sent", "failed": "Failed: not sent"}
ANSWER_PREFIX = {"response": "", "error": "**Error**\n", "elicitation": "**Question**\n"}


def thread_title(identifier: str | None, title: str | None, fallback: str) -> str:
    """`[ENG-123] Issue title`, on one line, at most 100 characters (the title is cut, never
    the identifier); `fallback` when the conversation has neither."""
    name = " ".join((title or "").split())
    prefix = f"[{identifier}] " if identifier else ""
    if identifier and name.startswith(prefix):  # the conversation's title carries it already
        name = name[len(prefix):]
    text = (prefix + name).strip() or fallback
    if len(text) <= TITLE_MAX_CHARS:
        return text
    return text[: TITLE_MAX_CHARS - len(_ELLIPSIS)].rstrip() + _ELLIPSIS


def split_message(text: str, limit: int = MESSAGE_MAX_CHARS) -> list[str]:
    """Cut `text` into messages of at most `limit` characters.

    Lines are kept whole where they fit; a line longer than `limit` is cut at its last
    space before the limit, else at the limit. Each piece loses its trailing whitespace
    (Discord trims it anyway) and blank pieces are dropped (Discord refuses an empty
    message), so an empty text gives no message.
    """
    pieces: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        while len(line) > limit:
            if current:
                pieces.append(current)
                current = ""
            cut = line.rfind(" ", 0, limit)
            cut = cut + 1 if cut > 0 else limit
            pieces.append(line[:cut])
            line = line[cut:]
        if len(current) + len(line) > limit:
            pieces.append(current)
            current = ""
        current += line
    if current:
        pieces.append(current)
    return [p.rstrip() for p in pieces if p.strip()]


def answer(kind: str, output: str) -> str:
    """A turn's answer as posted: an error or a question says so first."""
    body = output.strip() or (EMPTY_RESPONSE if kind == "response" else f"(the agent ended with "
                                                                          f"{kind})")
    return ANSWER_PREFIX.get(kind, "") + body


def status_line(view: dict[str, object]) -> str:
    """`!status`: the conversation's state as the operator view shows it."""
    state = str(view.get("state"))
    if view.get("outcome"):
        state += f" ({view['outcome']})"
    turn = view.get("turn") or {}
    last = view.get("lastTurn") or {}
    lines = [f"**{view.get('title') or view.get('id')}**: {state}",
             f"pending {view.get('pending', 0)}, claimed {view.get('claimed', 0)}"]
    if isinstance(turn, dict) and turn:
        lines.append(f"turn {turn.get('id')}: {turn.get('state')}, attempt {turn.get('attempt')}"
                     + (f" (last error: {turn['lastError']})" if turn.get("lastError") else ""))
    if isinstance(last, dict) and last:
        lines.append(f"last turn: {last.get('result')} at {last.get('finishedAt')}")
    lines.append(f"session {view.get('session') or '-'}")
    return "\n".join(lines)


# Discord's Markdown: emphasis, code, spoilers and strike-through characters anywhere; a quote,
# heading or list marker at a line's start; a masked link; a mention or timestamp.
_MARKDOWN = re.compile(r"(?P<url>https?://\S+)|(?P<char>[\\*_~`|\[\]<])"
                       r"|^(?P<lead>\s*(?:>|#|-|\d+(?=\.\s)))", re.MULTILINE)


def escape_markdown(text: str) -> str:
    """`text` as Discord shows it literally: each Markdown character escaped with a backslash
    (links left alone, so they stay links), so an approver sees the exact characters that
    would be sent, not their rendering."""
    def escape(match: re.Match[str]) -> str:
        if match.group("url"):
            return match.group("url")
        if match.group("char"):
            return "\\" + match.group("char")
        lead = match.group("lead")
        if lead[-1].isdigit():
            return lead + "\\"  # a numbered item: its dot is escaped (`1\. `)
        stripped = lead.lstrip()
        return lead[: len(lead) - len(stripped)] + "\\" + stripped

    return _MARKDOWN.sub(escape, text)


def who(decided_by: str | None) -> str:
    """Who decided, as a thread says it: a Discord user as a mention (nobody is pinged: every
    post has `allowed_mentions` empty), the operator as such."""
    if decided_by and decided_by.startswith("discord:"):
        return f"<@{decided_by.split(':', 1)[1]}>"
    if decided_by == "operator":
        return "the operator (`wakeline approvals`)"
    return decided_by or "someone"
