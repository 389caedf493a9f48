"""The shared stream vocabulary: answers, the plain text protocol, the factory and links."""

from __future__ import annotations

import pytest

from tests.unit.agents import read_all
from wakeline.agents.claude import ClaudeReader
from wakeline.agents.codex import CodexReader
from wakeline.agents.registry import reader_for
from wakeline.agents.streams import (
    JsonLinesReader,
    LinkFound,
    StreamAnswer,
    TextReader,
    Thought,
    classify,
    clip,
    pull_request_urls,
)

# classify

def test_a_failed_run_is_an_error_even_when_it_asks() -> None:
    assert classify("QUESTION: which branch?", failed=True) == StreamAnswer(
        "error", "QUESTION: which branch?")


def test_plain_text_is_a_response_unchanged() -> None:
    assert classify("Done: fixed the bug.\n", failed=False) == StreamAnswer(
        "response", "Done: fixed the bug.\n")


def test_a_last_line_starting_question_is_an_elicitation_without_the_prefix() -> None:
    answer = classify("I read the issue.\nQUESTION:  Which branch should I use?", failed=False)
    assert answer == StreamAnswer("elicitation", "I read the issue.\nWhich branch should I use?")


def test_blank_lines_after_the_question_do_not_hide_it() -> None:
    assert classify("QUESTION: main or dev?\n\n  \n", failed=False) == StreamAnswer(
        "elicitation", "main or dev?")


def test_a_question_that_is_not_last_is_a_response() -> None:
    text = "QUESTION: should I?\nI decided to go ahead."
    assert classify(text, failed=False) == StreamAnswer("response", text)


def test_question_must_start_the_line() -> None:
    text = "My QUESTION: nothing"
    assert classify(text, failed=False).kind == "response"


# TextReader

@pytest.mark.parametrize(("exit_code", "kind"), [
    (0, "response"), (2, "elicitation"), (1, "error"), (3, "error"), (None, "error"),
])
def test_text_reader_maps_the_exit_code(exit_code: int | None, kind: str) -> None:
    events, answer = read_all(TextReader(), ["first line", "", "third line"], exit_code)
    assert events == []
    assert answer == StreamAnswer(kind, "first line\n\nthird line")


def test_text_reader_keeps_json_as_text() -> None:
    reader = TextReader()
    events, answer = read_all(reader, ['{"type": "result", "result": "x"}'])
    assert events == [] and reader.skipped == 0
    assert answer.text == '{"type": "result", "result": "x"}'


def test_text_reader_error_with_empty_stdout_says_why() -> None:
    assert TextReader().finish(1, "boom\n") == StreamAnswer("error", "boom")
    assert TextReader().finish(1).text == "The agent exited with code 1 without an answer."
    assert TextReader().finish(None).text == "The agent was stopped before it answered."


def test_text_reader_attributes() -> None:
    reader = TextReader()
    reader.feed("hello")
    reader.finish(0)
    assert (reader.skipped, reader.session_id, reader.resume_refused) == (0, None, False)


# reader_for

@pytest.mark.parametrize(("output", "kind"), [
    ("text", TextReader), ("claude", ClaudeReader), ("codex", CodexReader),
])
def test_reader_for_builds_a_fresh_reader(output: str, kind: type) -> None:
    first, second = reader_for(output), reader_for(output)
    assert isinstance(first, kind) and first is not second


@pytest.mark.parametrize("output", ["", "Claude", "json", "gemini"])
def test_reader_for_refuses_anything_else(output: str) -> None:
    with pytest.raises(ValueError, match="unknown agent output"):
        reader_for(output)


# links

@pytest.mark.parametrize(("text", "urls"), [
    ("Opened https://github.com/acme/widgets/pull/42.", ["https://github.com/acme/widgets/pull/42"]),
    ("see (https://github.com/acme/w.js/pull/7), thanks!", ["https://github.com/acme/w.js/pull/7"]),
    ("[PR](https://github.com/acme/widgets/pull/9)", ["https://github.com/acme/widgets/pull/9"]),
    ("review https://github.com/acme/widgets/pull/5/files#diff-1",
     ["https://github.com/acme/widgets/pull/5"]),
    ("MR: https://gitlab.com/group/sub/proj/-/merge_requests/12;",
     ["https://gitlab.com/group/sub/proj/-/merge_requests/12"]),
    ("https://git.example.org:8443/team/app/-/merge_requests/3?tab=diffs",
     ["https://git.example.org:8443/team/app/-/merge_requests/3"]),
    ("'https://bitbucket.org/acme/app/pull-requests/8'",
     ["https://bitbucket.org/acme/app/pull-requests/8"]),
    ("https://bb.example.com/projects/KEY/repos/app/pull-requests/15/overview",
     ["https://bb.example.com/projects/KEY/repos/app/pull-requests/15"]),
    ("two: https://github.com/a/b/pull/1 and https://github.com/a/b/pull/1 again",
     ["https://github.com/a/b/pull/1"]),
    ("https://github.com/a/b/pull/1\nhttps://github.com/a/b/pull/2",
     ["https://github.com/a/b/pull/1", "https://github.com/a/b/pull/2"]),
])
def test_pull_request_urls_are_found_without_trailing_punctuation(
        text: str, urls: list[str]) -> None:
    assert pull_request_urls(text) == urls


@pytest.mark.parametrize("text", [
    "https://github.com/acme/widgets/issues/42",
    "https://github.com/acme/widgets/pulls",
    "https://github.com/acme/widgets/pull/new/feature",
    "https://github.com/acme/widgets/pull/42abc",
    "xhttps://github.com/acme/widgets/pull/42",
    "github.com/acme/widgets/pull/42",
    "https://gitlab.com/g/p/-/issues/3",
    "no links here",
])
def test_other_urls_are_not_pull_requests(text: str) -> None:
    assert pull_request_urls(text) == []


class _Echo(JsonLinesReader):
    """A minimal JSON reader: `{"type": "say", "text": ...}` is assistant text."""

    def _read(self, obj: dict[str, object]) -> list | None:
        if obj["type"] == "say" and isinstance(obj.get("text"), str):
            return self._say(obj["text"])
        if obj["type"] == "tool":
            return self._release()
        return None


def test_held_text_becomes_a_thought_only_when_something_follows() -> None:
    reader = _Echo()
    assert reader.feed('{"type": "say", "text": "Looking."}') == []
    assert reader.feed('{"type": "say", "text": "  "}') == []
    assert reader.feed('{"type": "say", "text": "Found it."}') == [Thought("Looking.")]
    assert reader.feed('{"type": "tool"}') == [Thought("Found it.")]
    assert reader.feed('{"type": "tool"}') == []


def test_each_link_is_shown_once_per_reader() -> None:
    reader = _Echo()
    link = LinkFound("Pull request", "https://github.com/a/b/pull/3")
    assert reader.feed('{"type": "say", "text": "PR: https://github.com/a/b/pull/3"}') == [link]
    assert reader.feed('{"type": "say", "text": "https://github.com/a/b/pull/3!"}') == [
        Thought("PR: https://github.com/a/b/pull/3")]
    assert _Echo().feed('{"type": "say", "text": "https://github.com/a/b/pull/3"}') == [link]


class _Broken(JsonLinesReader):
    """A reader with a bug: every line it reads raises."""

    def _read(self, obj: dict[str, object]) -> list | None:
        raise KeyError("a shape nobody foresaw")


def test_a_reader_bug_skips_the_line_instead_of_raising() -> None:
    reader = _Broken()
    assert reader.feed('{"type": "anything"}') == []
    assert reader.skipped == 1


def test_clip_keeps_the_start() -> None:
    assert clip("x" * 4_001) == "x" * 4_000
    assert clip("short") == "short"
