"""What routes look up in Linear, and the cache that keeps the answers between writes.

An issue's owner: its project, team and state, asked once before the first turn of a
conversation whose project no signed payload stated. An issue's labels and project, asked
once before a turn of a route with `repos` chooses the repository, when no payload named
its labels (decision 0038). Answers are cached until any mutation goes through the tracker
(the outbox or `linear graphql`), which may have changed them, or until they are
`CACHE_TTL_SECONDS` old; queries keep them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from wakeline.errors import ProviderRejected

OWNER_QUERY = (
    "query WakelineIssueOwner($id: String!) "
    "{ issue(id: $id) { id project { id } team { key } state { id type } } }"
)
LABELS_QUERY = (
    "query WakelineIssueLabels($id: String!) "
    "{ issue(id: $id) { id project { id } labels { nodes { name } } } }"
)
CACHE_TTL_SECONDS = 300.0
CACHE_MAX_ENTRIES = 1_000


@dataclass(frozen=True)
class IssueOwner:
    """What Linear says of an issue's place: None fields when it has none; `gone` if deleted."""

    project_id: str | None
    team_key: str | None
    state_id: str | None
    state_type: str | None
    gone: bool = False

    def to_json(self) -> dict[str, Any]:
        """The answer as the conversation records it."""
        if self.gone:
            return {"gone": True}
        return {"projectId": self.project_id, "teamKey": self.team_key,
                "state": {"id": self.state_id, "type": self.state_type}}


GONE = IssueOwner(None, None, None, None, gone=True)


def _id(node: Any, key: str = "id") -> str | None:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, str) else None


def parse_owner(body: dict[str, Any]) -> IssueOwner:
    """Read the `OWNER_QUERY` answer; a null issue means it no longer exists."""
    issue = (body.get("data") or {}).get("issue")
    if not isinstance(issue, dict):
        return GONE
    state = issue.get("state")
    return IssueOwner(_id(issue.get("project")), _id(issue.get("team"), "key"), _id(state),
                      _id(state, "type"))


@dataclass(frozen=True)
class IssueLabels:
    """An issue's label names and project (None: no project); `gone` if deleted."""

    labels: tuple[str, ...]
    project_id: str | None
    gone: bool = False


def parse_labels(body: dict[str, Any]) -> IssueLabels:
    """Read the `LABELS_QUERY` answer; a null issue means it no longer exists."""
    issue = (body.get("data") or {}).get("issue")
    if not isinstance(issue, dict):
        return IssueLabels((), None, gone=True)
    nodes = (issue.get("labels") or {}).get("nodes") if isinstance(issue.get("labels"), dict) \
        else None
    names = tuple(n["name"] for n in nodes or () if isinstance(n, dict)
                  and isinstance(n.get("name"), str))
    return IssueLabels(names, _id(issue.get("project")))


def is_not_found(error: ProviderRejected) -> bool:
    """True when Linear refused because the issue does not exist (deleted, or never did)."""
    return "entity not found" in (error.detail or "").lower()


class LookupCache:
    """Thread-safe answers by key, retired whole by any write; bounded and aged."""

    def __init__(self, now: Callable[[], float], ttl_seconds: float = CACHE_TTL_SECONDS,
                 max_entries: int = CACHE_MAX_ENTRIES) -> None:
        self._now = now
        self._ttl = ttl_seconds
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, key: str) -> Any | None:
        """The cached answer, or None when absent or too old."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if self._now() - found[0] > self._ttl:
                del self._entries[key]
                return None
            return found[1]

    def put(self, key: str, value: Any) -> None:
        """Keep an answer (the oldest goes when full)."""
        with self._lock:
            self._entries[key] = (self._now(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def retire(self) -> None:
        """A write went out: nothing cached can be trusted any more."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
