"""The Linear inbox: the follow switch and paged reads that never consume."""

from __future__ import annotations

import json
from typing import Any

from wakeline.clock import iso
from wakeline.models.store import Store

FOLLOWING_KEY = "inbox.following"
EVENT_MAX_CHARS = 8_000
PAGE_BUDGET_BYTES = 30_000
_ELLIPSIS = "…"


class Inbox:
    """Reads and switches of the Linear inbox, over the store."""

    def __init__(self, store: Store, following_default: bool) -> None:
        self._store = store
        self._following_default = following_default

    def following(self) -> bool:
        """The persisted switch, else the configured initial value."""
        return bool(self._store.get_setting(FOLLOWING_KEY, self._following_default))

    def set_following(self, value: bool) -> None:
        """Persist the switch; it wins over the config from now on."""
        self._store.set_setting(FOLLOWING_KEY, value)

    def forward(self, *, after: int | None, limit: int, headlines: bool) -> dict[str, Any]:
        """The oldest events after the ack boundary (or after `after`), within the page budget."""
        ack = self._store.inbox_ack_cursor()
        start = ack if after is None else after
        rows = self._store.inbox_forward(start, limit + 1)
        events: list[dict[str, Any]] = []
        used = 0
        for row in rows[:limit]:
            item = _render(row, ack, headlines)
            size = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
            if events and used + size > PAGE_BUDGET_BYTES:
                break
            events.append(item)
            used += size
        self._store.inbox_mark_shown([e["cursor"] for e in events])
        return {
            "events": events,
            "ackCursor": ack,
            "oldestCursor": self._store.inbox_oldest_cursor(),
            "unreadCount": self._store.inbox_unread_count(),
            "hasMore": len(rows) > len(events),
        }


def _render(row: Any, ack: int, headlines: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "cursor": row.id,
        "receivedAt": iso(row.received_at),
        "headline": row.headline,
        "unread": row.id > ack,
    }
    event, truncated = bound_event(json.loads(row.event), EVENT_MAX_CHARS)
    item["truncated"] = truncated
    if not headlines:
        item["event"] = event
    return item


def bound_event(event: dict[str, Any], max_chars: int) -> tuple[dict[str, Any], bool]:
    """Cut the longest strings of `event` until its JSON fits in `max_chars` characters.

    Returns the bounded event and whether anything was cut. An event whose shape
    alone is too large keeps its headline fields and loses `data`/`updatedFrom`.
    """
    text = json.dumps(event, ensure_ascii=False)
    if len(text) <= max_chars:
        return event, False
    bounded = json.loads(text)
    for _ in range(64):
        excess = len(json.dumps(bounded, ensure_ascii=False)) - max_chars
        if excess <= 0:
            return bounded, True
        holder, key, value = _longest_string(bounded)
        if holder is None or len(value) <= 16:
            break
        keep = max(len(value) - excess - len(_ELLIPSIS) - 8, 0)
        holder[key] = value[:keep] + _ELLIPSIS
    compact = {k: bounded[k] for k in ("type", "action", "url", "createdAt") if k in bounded}
    data = json.dumps(bounded.get("data"), ensure_ascii=False)
    compact["data"] = data[: max(max_chars - len(json.dumps(compact)) - 32, 0)] + _ELLIPSIS
    return compact, True


def _longest_string(value: Any) -> tuple[Any, Any, str]:
    best: tuple[Any, Any, str] = (None, None, "")
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, str) and len(child) > len(best[2]):
                best = (node, key, child)
            elif isinstance(child, (dict, list)):
                stack.append(child)
    return best
