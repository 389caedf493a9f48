"""What the control page shows, read from the store at the moment it is asked for.

Every conversation (as `GET /v1/conversations` lists it), the selected one whole (as `GET
/v1/conversations/{id}` shows it) with its latest turn's progress, and what waits for the
owner: Matrix sends to approve (section 9) and plans awaiting approval (section 11, approved
in Linear). The page shows the state the store holds, never one guessed from a click.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wakeline.control.progress import TurnView
from wakeline.errors import NotFound
from wakeline.models.approvals import ApprovalStatus
from wakeline.models.store import Store
from wakeline.models.views import list_conversations, show_conversation

CONVERSATIONS_SHOWN = 200
WAITING_SHOWN = 50
PLAN_EXCERPT_CHARS = 1_500


@dataclass(frozen=True)
class Board:
    """One reading of the page: `seq` is the feed's sequence it is complete to (changes
    after it are news to the page)."""

    seq: int
    conversations: list[dict[str, Any]]
    selected: dict[str, Any] | None
    progress: TurnView | None
    approvals: list[dict[str, Any]]
    plans: list[dict[str, Any]]


def issue_key(view: dict[str, Any]) -> str:
    """The issue's key (`ENG-12`), else the subject's (a room, the inbox)."""
    issue = view.get("issue")
    if issue and issue.get("identifier"):
        return str(issue["identifier"])
    return str(view["subject"]["key"])


def plain_title(view: dict[str, Any]) -> str:
    """The title without the `[ENG-12] ` its conversation carries in front."""
    title = view.get("title") or ""
    prefix = f"[{issue_key(view)}] "
    return title[len(prefix):] if title.startswith(prefix) else title


def read_board(store: Store, approvals: Any, seq: int, selected: str | None,
               progress: TurnView | None) -> Board:
    """The page's reading, from the store now; `seq` and `progress` were taken just before.

    Raises:
        NotFound: `selected` names no conversation.
    """
    conversations = list_conversations(store, limit=CONVERSATIONS_SHOWN)
    view = None
    if selected:
        view = show_conversation(store, selected)
        if view is None:
            raise NotFound(f"no conversation {selected}")
    pending = approvals.recent(ApprovalStatus.PENDING, WAITING_SHOWN) if approvals else []
    by_id = {c["id"]: c for c in conversations}
    plans = []
    for gate in store.gates.awaiting(WAITING_SHOWN):
        conv = by_id.get(gate.conversation_id)
        plans.append({"conversation": gate.conversation_id, "rev": gate.rev,
                      "key": issue_key(conv) if conv else gate.conversation_id,
                      "title": plain_title(conv) if conv else "",
                      "plan": _excerpt(gate.plan or "")})
    return Board(seq, conversations, view, progress if view else None,
                 [a.to_json() for a in pending], plans)


def _excerpt(text: str) -> str:
    return text if len(text) <= PLAN_EXCERPT_CHARS else text[:PLAN_EXCERPT_CHARS - 1] + "…"
