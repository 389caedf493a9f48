"""Thread titles and message splitting: Discord's 100- and 2,000-character limits."""

from __future__ import annotations

from hypothesis import given, strategies as st

from wakeline.providers.discord.texts import (
    MESSAGE_MAX_CHARS, answer, split_message, status_line, thread_title,
)


def test_a_title_is_the_identifier_and_the_issue_title() -> None:
    assert thread_title("ENG-123", "Fix the login", "cv_1") == "[ENG-123] Fix the login"


def test_the_conversation_title_already_carries_the_identifier() -> None:
    assert thread_title("ENG-123", "[ENG-123] Fix the login", "cv_1") == "[ENG-123] Fix the login"


def test_a_long_title_is_cut_to_100_characters_never_the_identifier() -> None:
    title = thread_title("ENG-123", "word " * 60, "cv_1")
    assert len(title) == 100 and title.startswith("[ENG-123] word") and title.endswith("…")


def test_a_title_is_one_line_and_never_empty() -> None:
    assert thread_title(None, "two\nlines\t here ", "cv_1") == "two lines here"
    assert thread_title(None, None, "cv_1") == "cv_1"
    assert thread_title("OPS-1", None, "cv_1") == "[OPS-1]"


def test_short_text_is_one_message_and_empty_text_none() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("x" * 2000) == ["x" * 2000]
    assert split_message("") == [] and split_message(" \n\n ") == []


def test_long_text_is_cut_on_line_boundaries() -> None:
    lines = [f"{n:04d} " + "y" * 95 for n in range(50)]  # 100 characters each, plus newlines
    parts = split_message("\n".join(lines))
    assert all(len(p) <= MESSAGE_MAX_CHARS for p in parts) and len(parts) == 3
    assert "\n".join(parts).splitlines() == lines


def test_a_line_longer_than_a_message_is_cut_at_a_space_else_anywhere() -> None:
    words = " ".join(["word"] * 1000)  # 4,999 characters, one line
    parts = split_message(words)
    assert len(parts) == 3 and all(1995 <= len(p) <= 2000 for p in parts[:2])
    assert all(p.endswith("word") for p in parts)  # cut at a space, between words
    assert all(not p.startswith(" ") for p in parts[1:])
    assert "".join(parts).replace(" ", "") == words.replace(" ", "")
    solid = "z" * 4500
    assert split_message(solid) == ["z" * 2000, "z" * 2000, "z" * 500]


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=9000),
       st.integers(min_value=20, max_value=2000))
def test_every_part_fits_and_nothing_but_whitespace_is_lost(text: str, limit: int) -> None:
    parts = split_message(text, limit)
    assert all(0 < len(p) <= limit and p.strip() for p in parts)
    squash = lambda s: "".join(s.split())  # noqa: E731
    assert squash("".join(parts)) == squash(text)


def test_answers_say_what_they_are() -> None:
    assert answer("response", " done \n") == "done"
    assert answer("response", "") == "(the agent finished without output)"
    assert answer("error", "boom").startswith("**Error**\nboom")
    assert answer("elicitation", "which one?").startswith("**Question**\n")


def test_the_status_line_shows_state_turn_and_session() -> None:
    text = status_line({"id": "cv_1", "title": "[OPS-1] T", "state": "running", "pending": 2,
                        "claimed": 1, "session": "ses_1",
                        "turn": {"id": "turn_1", "state": "retry", "attempt": 2,
                                 "lastError": "exit code 1"},
                        "lastTurn": {"result": "response", "finishedAt": "2026-01-01T00:00:00Z"}})
    assert "**[OPS-1] T**: running" in text and "pending 2, claimed 1" in text
    assert "attempt 2 (last error: exit code 1)" in text and "ses_1" in text
