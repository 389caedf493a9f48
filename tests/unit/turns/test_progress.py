"""A turn's progress sinks: links go to Linear once per URL, and a bounded number of them."""

from __future__ import annotations

from typing import Any

from wakeline.agents.streams import LinkFound, Thought
from wakeline.turns.progress import LINKS_MAX, TurnProgress


def progress() -> tuple[TurnProgress, list[Any], list[tuple[str, str]]]:
    sent: list[Any] = []
    journal: list[tuple[str, str]] = []
    turn = TurnProgress("turn-1", "cv-1", ["s-1"], [], lambda sessions, items: sent.extend(items),
                        remember_session=lambda sid: None,
                        journal=lambda stage, text: journal.append((stage, text)))
    return turn, sent, journal


def test_a_url_is_linked_once_whoever_sends_it_again() -> None:
    turn, sent, journal = progress()
    pr = "https://github.com/acme/app/pull/7"
    turn.offer([LinkFound("Pull request", pr)])
    turn.offer([LinkFound("Pull request", pr), Thought("still going")])
    turn.offer([LinkFound("Review", pr)])
    links = [i for i in sent if i.slot == "link"]
    assert len(links) == 1 and links[0].payload["addedExternalUrls"] == [
        {"label": "Pull request", "url": pr}]
    assert [stage for stage, _ in journal].count("link") == 1
    assert any(i.slot == "activity" for i in sent)  # the thought beside the repeat still goes


def test_a_turn_links_at_most_links_max_urls() -> None:
    turn, sent, _ = progress()
    turn.offer([LinkFound("Pull request", f"https://example.com/pull/{n}")
                for n in range(LINKS_MAX + 25)])
    assert len([i for i in sent if i.slot == "link"]) == LINKS_MAX
