"""Progress as Linear writes: what each event becomes, bounded and scrubbed, and the throttle."""

from __future__ import annotations

from wakeline.agents.streams import (
    LinkFound, PlanStep, PlanUpdate, SessionStarted, Thought, ToolFinished, ToolStarted,
)
from wakeline.providers.linear.progress import (
    PLAN_MAX_STEPS, REPLACED, RESULT_MAX_CHARS, Item, ProgressBoard, SessionProgress, items_of,
)

SECRET = "hunter2-the-webhook-secret"


def test_each_event_becomes_its_write() -> None:
    events = [ToolStarted("c1", "Bash", "ls"), ToolFinished("c1", "Bash", "ls", "a b", False),
              Thought("hmm"), PlanUpdate((PlanStep("one", "inProgress"),)),
              LinkFound("Pull request", "https://github.com/a/b/pull/1"), SessionStarted("s")]
    items = [item for event in events for item in items_of([event], [])]  # one batch each
    assert [(i.slot, i.ephemeral) for i in items] == [
        ("activity", True), ("activity", False), ("activity", False), ("plan", False),
        ("link", False)]
    query, variables = items[0].request("sess-1")
    assert "agentActivityCreate" in query and variables["input"]["ephemeral"] is True
    assert variables["input"]["content"] == {"type": "action", "action": "Bash", "parameter": "ls"}
    assert variables["input"]["agentSessionId"] == "sess-1" and variables["input"]["id"]
    query, variables = items[3].request("sess-1")
    assert "agentSessionUpdate" in query
    assert variables == {"id": "sess-1", "input": {"plan": [{"content": "one", "status": "inProgress"}]}}
    assert items[4].request("sess-1")[1]["input"] == {
        "addedExternalUrls": [{"label": "Pull request", "url": "https://github.com/a/b/pull/1"}]}


def test_within_one_batch_only_the_newest_action_or_thought_and_plan_are_kept() -> None:
    plan = PlanUpdate((PlanStep("one", "pending"),))
    newer = PlanUpdate((PlanStep("one", "completed"),))
    link = LinkFound("Pull request", "https://github.com/a/b/pull/1")
    items = items_of([ToolStarted("c", "Bash", "ls"), plan, Thought("hmm"), link, newer,
                      ToolFinished("c", "Bash", "ls", "ok", False)], [])
    kept = [i for i in items if i is not REPLACED]
    assert [i.slot for i in kept] == ["link", "plan", "activity"]
    assert kept[1].payload["plan"][0]["status"] == "completed"
    p = SessionProgress(interval_ms=0)
    for item in items:
        p.offer(item)
    assert p.skipped == 3  # counted as skipped, like any replaced write


def test_results_are_scrubbed_then_bounded() -> None:
    [item] = items_of([ToolFinished("c", "Bash", "env", f"{SECRET} " + "x" * 5000, False)], [SECRET])
    result = item.request("s")[1]["input"]["content"]["result"]
    assert SECRET not in result and result.startswith("[redacted]")
    assert len(result) <= RESULT_MAX_CHARS and result.endswith("…")
    # A secret across the cut is scrubbed whole first: no fragment of it goes out.
    edge = "y" * (RESULT_MAX_CHARS - 10) + SECRET
    [item] = items_of([ToolFinished("c", "Bash", "env", edge, False)], [SECRET])
    assert SECRET[:9] not in item.request("s")[1]["input"]["content"]["result"]


def test_a_plan_of_500_steps_is_cut_and_summed_up() -> None:
    steps = tuple(PlanStep(f"step {n}", "completed" if n < 10 else "pending") for n in range(500))
    [item] = items_of([PlanUpdate(steps)], [])
    plan = item.payload["plan"]
    assert len(plan) == PLAN_MAX_STEPS
    assert plan[-1] == {"content": f"… and {500 - PLAN_MAX_STEPS + 1} more steps", "status": "pending"}


def thought(text: str) -> Item:
    return Item("activity", {"type": "thought", "body": text})


def action(name: str) -> Item:
    return Item("activity", {"type": "action", "action": name, "parameter": ""})


def test_one_write_per_interval_the_newest_wins_and_the_rest_are_counted() -> None:
    p = SessionProgress(interval_ms=3000)
    p.offer(action("a1"))
    assert p.next(0) == action("a1")  # nothing sent yet: at once
    for n in range(2, 6):
        p.offer(action(f"a{n}"))
    p.offer(Item("plan", {"plan": [1]}))
    p.offer(Item("plan", {"plan": [2]}))
    assert p.next(2999) is None
    assert p.next(3000) == action("a5") and p.skipped == 4  # a2..a4 and the first plan
    assert p.next(6000) == Item("plan", {"plan": [2]})
    assert p.next(9000) is None and not p.pending()


def test_the_first_thought_costs_no_interval() -> None:
    p = SessionProgress(interval_ms=3000)
    p.offer(action("a1"))
    assert p.next(0) == action("a1")
    p.offer(thought("first"))
    assert p.next(10) == thought("first")  # free, and the interval still runs from 0
    p.offer(thought("second"))
    assert p.next(20) is None and p.next(3000) == thought("second")


def test_at_the_end_the_plan_and_links_go_at_once_and_actions_are_dropped() -> None:
    p = SessionProgress(interval_ms=3000)
    p.offer(action("a1"))
    p.next(0)
    p.offer(action("a2"))
    p.offer(Item("plan", {"plan": ["final"]}))
    for n in range(3):
        p.offer(Item("link", {"url": n}))
    p.close()
    assert p.skipped == 1  # a2
    sent = [p.next(1), p.next(2), p.next(3), p.next(4), p.next(5)]
    assert sent == [Item("plan", {"plan": ["final"]})] + [Item("link", {"url": n}) for n in range(3)] \
        + [None]
    assert not p.pending()


def test_closing_sessions_that_showed_nothing_asks_nothing_of_the_tracker() -> None:
    board = ProgressBoard(interval_ms=3000)
    assert board.close(["s-quiet"]) is False  # a plain agent's turn: no message
    board.offer(["s-busy"], [Item("plan", {"plan": ["one"]})])
    assert board.close(["s-quiet", "s-busy"]) is True  # its plan still goes out
    assert board.take(0, set()) == [("s-busy", Item("plan", {"plan": ["one"]}))]
