"""The Linear inbox: the follow switch, paged reads that never consume, and acknowledgement.

A read returns a page and marks what it returned as `shown`; only `ack` moves the read
boundary, and only to a message a read has shown. The queries live in
`wakeline.models.inbox_store`; this module shapes pages for the API (byte budget,
event bounding, headlines).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from typing import Any, Callable

from peewee import DatabaseError

from wakeline.clock import iso, to_ms
from wakeline.errors import Unavailable
from wakeline.models.inbox_store import InboxRead, InboxRow
from wakeline.models.store import Store

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
EVENT_MAX_CHARS = 8_000
PAGE_BUDGET_BYTES = 30_000
_ELLIPSIS = "…"
_CACHE_SIZE = 256


class Inbox:
    """Reads, acknowledgements and the switch of the Linear inbox, over the store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._bounded: OrderedDict[int, tuple[dict[str, Any], bool]] = OrderedDict()
        self._lock = threading.Lock()

    def following(self) -> bool:
        """The follow switch (see `Store.following`)."""
        return self._store.following()

    def set_following(self, value: bool) -> None:
        """Persist the switch; it wins over the config from now on."""
        self._store.set_following(value)

    def forward(self, *, after: int | None, limit: int, headlines: bool) -> dict[str, Any]:
        """The oldest events after the ack boundary (or after `after`), within the page budget."""
        read = self._store.inbox.forward(after, limit, events_over=_events_over(headlines))
        return self._page(read, headlines)

    def before(self, *, cursor: int, limit: int, headlines: bool) -> dict[str, Any]:
        """The events just before `cursor`, read or not, oldest first, within the page budget.

        The page is filled from `cursor` backwards; `hasMore` says older history exists.
        """
        read = self._store.inbox.before(cursor, limit, events_over=_events_over(headlines))
        return self._page(read, headlines, backwards=True)

    def ack(self, cursor: int) -> dict[str, Any]:
        """Move the read boundary to `cursor` (see `InboxStore.ack`), then prune read history."""
        try:
            result = self._store.inbox.ack(cursor)
        except DatabaseError as exc:
            log.warning("inbox ack failed", extra={"error": exc.__class__.__name__})
            raise Unavailable("the inbox cannot record this acknowledgement right now") from None
        if result.moved:
            try:
                self._store.inbox.prune(to_ms(self._store.clock.now()))
            except DatabaseError as exc:  # retention can wait for the next ack
                log.warning("inbox prune failed", extra={"error": exc.__class__.__name__})
        return {"ackCursor": result.ack_cursor, "unreadCount": result.unread_count}

    def _page(self, read: InboxRead, headlines: bool, *, backwards: bool = False) -> dict[str, Any]:
        """Render rows in the order read (newest first when `backwards`) within the budget."""
        ack, rows = read.state.ack_cursor, read.rows
        events: list[dict[str, Any]] = []
        used = 0
        for row in rows:
            item = self._render(row, ack, headlines)
            size = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
            if events and used + size > PAGE_BUDGET_BYTES:
                break
            events.append(item)
            used += size
        if backwards:
            events.reverse()
        # Only unread events need a mark: an ack at or below the boundary changes nothing.
        unshown = [row.cursor for row in rows[: len(events)] if row.cursor > ack and not row.shown]
        try:
            self._store.inbox.mark_shown(unshown)
        except DatabaseError as exc:
            # An unmarked page could not be acknowledged: refuse it rather than mislead.
            log.warning("inbox mark shown failed", extra={"error": exc.__class__.__name__})
            raise Unavailable("the inbox cannot record this read right now") from None
        return {
            "events": events,
            "ackCursor": ack,
            "oldestCursor": read.state.oldest_cursor,
            "unreadCount": read.state.unread_count,
            "hasMore": read.more or len(events) < len(rows),
        }

    def _render(self, row: InboxRow, ack: int, headlines: bool) -> dict[str, Any]:
        event, truncated = self._bound(row, whole=not headlines)
        item: dict[str, Any] = {
            "cursor": row.cursor,
            "receivedAt": iso(row.received_at),
            "headline": row.headline,
            "unread": row.cursor > ack,
            "truncated": truncated,
        }
        if not headlines:
            item["event"] = event
        return item

    def _bound(self, row: InboxRow, *, whole: bool) -> tuple[dict[str, Any], bool]:
        """The bounded event of a row (only its `truncated` flag unless `whole`).

        Bounding a large event is cached by cursor: a stored message never changes.
        """
        if row.event is None:  # left out by a headlines read: too small to be cut
            return {}, False
        if 2 * len(row.event) <= EVENT_MAX_CHARS:
            # Stored compact: spaces after `,` and `:` at most double it. Small enough.
            return json.loads(row.event), False
        with self._lock:
            hit = self._bounded.get(row.cursor)
            if hit is not None:
                self._bounded.move_to_end(row.cursor)
                return hit
        event = json.loads(row.event)
        if not whole:
            return event, _size(event) > EVENT_MAX_CHARS
        result = bound_event(event, EVENT_MAX_CHARS)
        if result[1]:
            with self._lock:
                self._bounded[row.cursor] = result
                while len(self._bounded) > _CACHE_SIZE:
                    self._bounded.popitem(last=False)
        return result


def _events_over(headlines: bool) -> int | None:
    """A headlines read needs an event only to tell whether it is cut: only if it may be.

    The stored event is compact JSON; spaces after `,` and `:` at most double it, so
    an event of at most EVENT_MAX_CHARS / 2 bytes is never cut.
    """
    return EVENT_MAX_CHARS // 2 if headlines else None


# --- bounding one event --------------------------------------------------------------------------

_MIN_STRING = 16  # strings are not cut shorter than this while containers can still shrink
_KEEP_WHOLE = ("type", "action", "url", "createdAt")  # top-level strings kept whole...
_HEAD_MAX = 256  # ...up to this many characters


def bound_event(event: dict[str, Any], max_chars: int) -> tuple[dict[str, Any], bool]:
    """Shrink `event` until its JSON (`ensure_ascii=False`) fits in `max_chars` characters.

    Returns the bounded event and whether anything was cut. The event stays a JSON
    object with its top-level keys; `type`, `action`, `url` and `createdAt` are kept
    whole (up to 256 characters), and every other value keeps its JSON type. Strings
    are cut first, longest first, each ending in `…`. If even short strings do not fit,
    objects and arrays keep their first entries and say how many more there were
    (`"…": "N more keys"`, `"… N more items"`). An event whose shape alone cannot fit
    keeps only `type` and `action`.
    """
    if _size(event) <= max_chars:
        return event, False
    base = _clip(event, max_chars)
    longest, widest = _extent(base)
    cap = _largest(lambda n: _shrink(base, n, None), _MIN_STRING, longest, max_chars)
    if cap is not None:
        return _shrink(base, cap, None), True
    items = _largest(lambda n: _shrink(base, _MIN_STRING, n), 0, widest, max_chars)
    if items is not None:
        cap = _largest(lambda n: _shrink(base, n, items), _MIN_STRING, longest, max_chars)
        return _shrink(base, cap or _MIN_STRING, items), True
    bare = {k: _cut(str(event[k]), 64) for k in ("type", "action") if k in event}
    return bare, True


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def _cut(text: str, keep: int) -> str:
    return text if len(text) <= keep else text[:keep] + _ELLIPSIS


def _largest(make: Callable[[int], Any], low: int, high: int, max_chars: int) -> int | None:
    """The largest n in [low, high] whose `make(n)` fits (sizes grow with n), or None."""
    if high < low or _size(make(low)) > max_chars:
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if _size(make(mid)) <= max_chars:
            low = mid
        else:
            high = mid - 1
    return low


def _shrink(value: Any, cap: int, items: int | None, top: bool = True) -> Any:
    """Strings cut to `cap` characters; below the top level, containers to `items` entries.

    A marker left by an earlier cut (`_clip`) is carried over, its count added to.
    """
    if isinstance(value, str):
        return _cut(value, cap)
    if isinstance(value, dict):
        keys, earlier = _keys_and_marker(value)
        kept = keys if top or items is None else keys[:items]
        out = {k: value[k] if top and k in _KEEP_WHOLE else _shrink(value[k], cap, items, False)
               for k in kept}
        if len(kept) < len(keys) or earlier:
            out[_ELLIPSIS] = f"{len(keys) - len(kept) + earlier} more keys"
        return out
    if isinstance(value, list):
        whole, earlier = _items_and_marker(value)
        kept_items = whole if items is None else whole[:items]
        out_list = [_shrink(v, cap, items, False) for v in kept_items]
        if len(kept_items) < len(whole) or earlier:
            out_list.append(f"{_ELLIPSIS} {len(whole) - len(kept_items) + earlier} more items")
        return out_list
    return value


_MORE_KEYS = re.compile(r"^(\d+) more keys$")
_MORE_ITEMS = re.compile(r"^… (\d+) more items$")


def _marked(value: Any, pattern: re.Pattern[str]) -> int:
    """How many entries an earlier cut's marker says it left out (0: not a marker)."""
    match = pattern.match(value) if isinstance(value, str) else None
    return int(match[1]) if match else 0


def _keys_and_marker(value: dict[str, Any]) -> tuple[list[str], int]:
    """An object's keys without an earlier cut's marker, and how many that marker counted."""
    keys = list(value)
    earlier = _marked(value[_ELLIPSIS], _MORE_KEYS) if keys and keys[-1] == _ELLIPSIS else 0
    return (keys[:-1] if earlier else keys), earlier


def _items_and_marker(value: list[Any]) -> tuple[list[Any], int]:
    """An array's items without an earlier cut's marker, and how many that marker counted."""
    earlier = _marked(value[-1], _MORE_ITEMS) if value else 0
    return (value[:-1] if earlier else value), earlier


def _clip(event: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """A first, cheap cut that bounds the work of the search in `bound_event`.

    No string stays longer than `max_chars` and no object or array wider than
    `max_chars // 2` entries: neither could be shown whole. If the copy is still over
    four times `max_chars`, whatever lies past that in document order is cut as well.
    """
    head = {k: event[k] if isinstance(event[k], str) and len(event[k]) <= _HEAD_MAX
            else _cut(str(event[k]), _HEAD_MAX) for k in _KEEP_WHOLE if k in event}
    rest = _shrink({k: v for k, v in event.items() if k not in head}, max_chars,
                   max(max_chars // 2, 1))
    budget = 4 * max_chars
    if _size(rest) <= budget:
        return {**head, **rest}
    left = budget - _size(head)

    def walk(value: Any) -> Any:
        nonlocal left
        if isinstance(value, str):
            keep = value[: max(left, 0)]
            left -= len(keep) + 2
            return keep if len(keep) == len(value) else keep + _ELLIPSIS
        if isinstance(value, dict):
            keys, earlier = _keys_and_marker(value)
            out: dict[str, Any] = {}
            for key in keys:
                if left <= 0:
                    break
                left -= len(key) + 4
                out[key] = walk(value[key])
            if len(out) < len(keys) or earlier:
                out[_ELLIPSIS] = f"{len(keys) - len(out) + earlier} more keys"
            return out
        if isinstance(value, list):
            whole, earlier = _items_and_marker(value)
            out_list: list[Any] = []
            for child in whole:
                if left <= 0:
                    break
                left -= 2
                out_list.append(walk(child))
            if len(out_list) < len(whole) or earlier:
                out_list.append(f"{_ELLIPSIS} {len(whole) - len(out_list) + earlier} more items")
            return out_list
        left -= len(json.dumps(value))
        return value

    return {**head, **walk(rest)}


def _extent(value: Any) -> tuple[int, int]:
    """The longest string and the widest object or array in `value`."""
    longest = widest = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            longest = max(longest, len(node))
        elif isinstance(node, (dict, list)):
            widest = max(widest, len(node))
            stack.extend(node.values() if isinstance(node, dict) else node)
    return longest, widest
