"""nio's sync answers into plain pages: what the adapter sees of odd events (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nio", reason="matrix-nio is not installed: pip install 'wakeline[matrix]'")

from nio import SyncResponse  # noqa: E402

from wakeline.config import MatrixConnectionConfig  # noqa: E402
from wakeline.providers.matrix.client import NioClient  # noqa: E402
from wakeline.providers.matrix.events import Verdict, classify  # noqa: E402

OWNER = "@me:x"


def sync_answer(events: list[dict[str, Any]], *, limited: bool = False,
                left: tuple[str, ...] = ()) -> SyncResponse:
    raw = {"next_batch": "s2", "rooms": {
        "join": {"!a": {"timeline": {"events": events, "limited": limited, "prev_batch": "p"},
                        "state": {"events": []}, "ephemeral": {"events": []},
                        "account_data": {"events": []}, "summary": {},
                        "unread_notifications": {}}},
        "leave": {room: {"timeline": {"events": []}, "state": {"events": []}} for room in left},
        "invite": {}}}
    answer = SyncResponse.from_dict(raw)
    assert isinstance(answer, SyncResponse), answer
    return answer


def event(n: int, content: Any, kind: str = "m.room.message") -> dict[str, Any]:
    return {"type": kind, "event_id": f"$e{n}", "sender": "@alice:x",
            "origin_server_ts": 1_700_000_000_000, "content": content, "unsigned": {}}


@pytest.fixture
def client(tmp_path: Path) -> NioClient:
    conn = MatrixConnectionConfig(homeserver="http://127.0.0.1:9", user_id=OWNER,
                                  access_token_file="t")
    return NioClient("me", conn, "syt_test_token_0123456789", tmp_path / "store")


def test_odd_events_reach_the_adapter_as_they_came(client: NioClient) -> None:
    answer = sync_answer([
        event(1, {"msgtype": "m.text", "body": "x" * (10 * 1024 * 1024)}),
        event(2, ["not", "an", "object"]),
        event(3, {"msgtype": "m.text", "body": 42}),
        event(4, {"msgtype": "m.text", "body": "fine"}),
        event(5, {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AAAA", "sender_key": "k",
                  "session_id": "s", "device_id": "D"}, "m.room.encrypted"),
    ], limited=True, left=("!gone",))
    client._decrypt_leftovers(answer)
    page = client._page(answer, first=False)

    assert page.next_batch == "s2" and page.left == frozenset({"!gone"})
    timeline = page.rooms["!a"]
    assert timeline.limited is True
    verdicts = [classify(e, OWNER) for e in timeline.events]
    assert verdicts == [Verdict.TOO_LARGE, Verdict.MALFORMED, Verdict.MALFORMED, Verdict.ADMIT,
                        Verdict.HOLD]
    assert timeline.events[4].encrypted and timeline.events[4].undecryptable


def test_the_client_keeps_its_device_and_never_logs_in(client: NioClient) -> None:
    assert client.fingerprint  # the device's ed25519 key, for a person verifying it by hand
    assert client._client.device_id == "WAKELINE" and client._client.access_token
