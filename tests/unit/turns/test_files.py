"""The issue's files: which links are Linear's file storage's, and the bounded fetch into a
workspace, against the fake Linear's real file storage on loopback (CONTRACT section 14)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import LINEAR_KEY
from tests.fakes.linear import FakeLinear
from wakeline.providers.linear.credentials import StaticCredential
from wakeline.providers.linear.uploads import Uploads, UploadsUrl
from wakeline.turns.files import FileNote, IssueFiles, base_name, file_name, link_key

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
BASE = "https://uploads.linear.app"


@pytest.fixture
def fake() -> Iterator[FakeLinear]:
    """The fake Linear, serving files only to the test key."""
    linear = FakeLinear(files_authorization=LINEAR_KEY).start()
    yield linear
    linear.stop()


def files_for(fake: FakeLinear, *, max_bytes: int = 1_000_000, max_files: int = 20,
              timeout: float = 5.0, key: str | None = LINEAR_KEY) -> IssueFiles:
    uploads = Uploads(fake.uploads_url, StaticCredential(key) if key else None,
                      timeout_seconds=timeout)
    return IssueFiles(uploads, max_bytes=max_bytes, max_files=max_files)


# --- which links ----------------------------------------------------------------------------


@pytest.mark.parametrize("link", [
    f"{BASE}/org/abc/shot.png",
    "HTTPS://Uploads.Linear.App:443/org/abc/shot.png",
    f"{BASE}/org/abc/shot.png?signature=x",
])
def test_a_link_under_the_base_is_its(link: str) -> None:
    assert UploadsUrl(BASE).owns(link)


@pytest.mark.parametrize("link", [
    "http://uploads.linear.app/org/abc/shot.png",  # another scheme
    "https://uploads.linear.app.evil.test/org/shot.png",  # another host
    "https://evil.test/uploads.linear.app/shot.png",
    "https://uploads.linear.app:8443/org/shot.png",  # another port
    "https://user:pw@uploads.linear.app/org/shot.png",  # a user part
    "https://uploads.linear.app/org/../../etc/passwd",
    "https://uploads.linear.app/org/%2e%2e/secret",
    "https://uploads.linear.app:notaport/x",
])
def test_a_link_elsewhere_is_never_its(link: str) -> None:
    assert not UploadsUrl(BASE).owns(link)


def test_a_path_prefix_is_matched_by_whole_segments() -> None:
    url = UploadsUrl("http://127.0.0.1:8000/uploads")
    assert url.owns("http://127.0.0.1:8000/uploads/a/b.png")
    assert not url.owns("http://127.0.0.1:8000/uploadsX/a/b.png")
    assert not url.owns("http://127.0.0.1:8000/graphql")


def test_links_are_found_in_markdown_once_each_in_order() -> None:
    text = (f"See ![shot]({BASE}/o/1/shot.png) and [log]({BASE}/o/2/app.log). "
            f"Again: {BASE}/o/1/shot.png, and <https://example.com/x.png>.")
    assert UploadsUrl(BASE).links_in([text, f'"{BASE}/o/3/c.txt"']) == [
        f"{BASE}/o/1/shot.png", f"{BASE}/o/2/app.log", f"{BASE}/o/3/c.txt"]


@given(st.text(min_size=0, max_size=200))
def test_a_local_name_never_leaves_its_folder(segment: str) -> None:
    name = file_name(f"{BASE}/o/{segment}", "image/png")
    assert "/" not in name and not name.startswith(".") and name.startswith(link_key(f"{BASE}/o/{segment}"))
    assert name not in ("", ".", "..")


def test_a_name_keeps_a_clean_basename_and_gains_an_extension_from_its_type() -> None:
    assert base_name(f"{BASE}/o/1/My%20Screen%20Shot.png") == "My-Screen-Shot.png"
    assert base_name(f"{BASE}/o/1/..%2F..%2Fetc%2Fpasswd") == "etc-passwd"
    assert file_name(f"{BASE}/o/1/abc", "image/png").endswith("-abc.png")
    assert file_name(f"{BASE}/o/1/%2e%2e", None).endswith("-file")


# --- the fetch ------------------------------------------------------------------------------


def test_files_land_with_their_bytes_and_the_credential_nowhere(fake: FakeLinear,
                                                                tmp_path: Path) -> None:
    shot = fake.upload(PNG, "shot.png", "image/png")
    log = fake.upload(b"line 1\nline 2\n", "app.log", "text/plain")
    notes = files_for(fake).fetch(tmp_path, [f"![shot]({shot})", f"log: {log}"])
    assert [n.url for n in notes] == [shot, log] and all(n.reason is None for n in notes)
    assert (tmp_path / notes[0].path).read_bytes() == PNG  # type: ignore[operator]
    assert (tmp_path / notes[1].path).read_bytes() == b"line 1\nline 2\n"  # type: ignore[operator]
    assert [r.headers["Authorization"] for r in fake.downloads] == [LINEAR_KEY, LINEAR_KEY]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert LINEAR_KEY.encode() not in path.read_bytes()
    assert (tmp_path / ".wakeline" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_file_present_is_not_fetched_again(fake: FakeLinear, tmp_path: Path) -> None:
    shot = fake.upload(PNG, "shot.png", "image/png")
    files = files_for(fake)
    first = files.fetch(tmp_path, [shot])
    assert files.fetch(tmp_path, [shot]) == first
    assert len(fake.downloads) == 1


def test_without_the_credential_the_storage_refuses_and_the_note_says_so(
        fake: FakeLinear, tmp_path: Path) -> None:
    shot = fake.upload(PNG, "shot.png", "image/png")
    assert files_for(fake, key="lin_api_WRONGKEY0123456789abcdefghij").fetch(tmp_path, [shot]) \
        == [FileNote(shot, reason="HTTP 401")]
    assert files_for(fake, key=None).fetch(tmp_path, [shot])[0].reason.startswith(  # type: ignore[union-attr]
        "no Linear credential")
    assert not any(p.is_file() for p in (tmp_path / ".wakeline" / "files").iterdir())


def test_failures_are_named_and_leave_nothing_behind(fake: FakeLinear, tmp_path: Path) -> None:
    broken = fake.upload(b"x", "broken.txt")
    fake.file_behaviours["broken.txt"] = "500"
    big = fake.upload(b"y" * 5000, "big.bin")
    unsized = fake.upload(b"z" * 5000, "unsized.bin")
    fake.file_behaviours["unsized.bin"] = "unsized"
    held = fake.upload(b"w", "held.txt")
    fake.file_behaviours["held.txt"] = "hold"
    missing = fake.uploads_url + "/org/none/gone.png"
    notes = files_for(fake, max_bytes=1000, timeout=0.3).fetch(
        tmp_path, [broken, big, unsized, held, missing])
    reasons = [n.reason for n in notes]
    assert reasons == ["HTTP 500", "larger than 1000 bytes (agent.max_file_bytes)",
                       "larger than 1000 bytes (agent.max_file_bytes)", "timed out after 0.3 s",
                       "HTTP 404"]
    assert os.listdir(tmp_path / ".wakeline" / "files") == []


def test_a_redirect_is_followed_only_within_the_storage(fake: FakeLinear, tmp_path: Path) -> None:
    real = fake.upload(PNG, "real.png", "image/png")
    inside = fake.upload(b"", "inside.png")
    fake.file_behaviours["inside.png"] = f"redirect:{real}"
    away = fake.upload(b"", "away.png")
    fake.file_behaviours["away.png"] = "redirect:" + fake.url  # the same host, not the storage
    notes = files_for(fake).fetch(tmp_path, [inside, away])
    assert (tmp_path / notes[0].path).read_bytes() == PNG  # type: ignore[operator]
    assert notes[1].reason == f"redirected away from {fake.uploads_url}"
    assert [p.rsplit("/", 1)[-1] for p in fake.download_paths()] == ["inside.png", "real.png",
                                                                     "away.png"]
    assert fake.requests == []  # the GraphQL endpoint was never asked


def test_at_most_max_files_are_fetched_a_turn(fake: FakeLinear, tmp_path: Path) -> None:
    links = [fake.upload(bytes([n]), f"f{n}.bin") for n in range(3)]
    notes = files_for(fake, max_files=2).fetch(tmp_path, links)
    assert [n.reason for n in notes] == [None, None, "this turn fetched 2 files already "
                                                     "(agent.max_files_per_turn)"]
    assert len(fake.downloads) == 2


def test_a_symlink_planted_in_the_workspace_is_not_followed(fake: FakeLinear,
                                                            tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".wakeline").symlink_to(outside)
    shot = fake.upload(PNG, "shot.png", "image/png")
    [note] = files_for(fake).fetch(workspace, [shot])
    assert note.path is None and "cannot be made in the workspace" in (note.reason or "")
    assert list(outside.iterdir()) == [] and fake.downloads == []
