"""Rate-limit bookkeeping: buckets named by Discord, per major parameter, and 429s."""

from __future__ import annotations

from wakeline.providers.discord.limits import RateLimits, Route, retry_after_of

POST_A = Route("POST", "/channels/{id}/messages", "111")
POST_B = Route("POST", "/channels/{id}/messages", "222")
PATCH_A = Route("PATCH", "/channels/{id}", "111")


class Clock:
    def __init__(self) -> None:
        self.now = 128.0  # a binary fraction: the waits below are exact

    def __call__(self) -> float:
        return self.now


def headers(bucket: str, remaining: int, reset_after: float) -> dict[str, str]:
    return {"X-RateLimit-Bucket": bucket, "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset-After": str(reset_after)}


def test_an_empty_bucket_is_waited_out_until_its_reset() -> None:
    clock = Clock()
    limits = RateLimits(clock)
    assert limits.wait_for(POST_A) == 0.0
    limits.learn(POST_A, headers("abc", 1, 2.0))
    assert limits.wait_for(POST_A) == 0.0
    limits.learn(POST_A, headers("abc", 0, 2.0))
    assert limits.wait_for(POST_A) == 2.0
    clock.now += 1.5
    assert limits.wait_for(POST_A) == 0.5
    clock.now += 0.5
    assert limits.wait_for(POST_A) == 0.0


def test_each_channel_has_its_own_bucket() -> None:
    limits = RateLimits(Clock())
    limits.learn(POST_A, headers("abc", 0, 3.0))
    assert limits.wait_for(POST_B) == 0.0 and limits.wait_for(POST_A) == 3.0


def test_routes_that_share_a_bucket_share_its_limit() -> None:
    limits = RateLimits(Clock())
    limits.learn(PATCH_A, headers("shared", 5, 1.0))
    limits.learn(POST_A, headers("shared", 0, 1.0))
    assert limits.wait_for(PATCH_A) == 1.0


def test_room_again_frees_the_bucket() -> None:
    limits = RateLimits(Clock())
    limits.learn(POST_A, headers("abc", 0, 3.0))
    limits.learn(POST_A, headers("abc", 4, 3.0))
    assert limits.wait_for(POST_A) == 0.0


def test_a_429_blocks_its_bucket_and_a_global_one_every_route() -> None:
    clock = Clock()
    limits = RateLimits(clock)
    limits.limited(POST_A, 0.75, is_global=False)
    assert (limits.wait_for(POST_A), limits.wait_for(POST_B)) == (0.75, 0.0)
    limits.limited(POST_B, 4.0, is_global=True)
    assert limits.wait_for(PATCH_A) == 4.0 and limits.wait_for(POST_A) == 4.0
    clock.now += 5
    assert limits.wait_for(PATCH_A) == 0.0


def test_retry_after_comes_from_the_body_else_the_header() -> None:
    assert retry_after_of({"retry_after": 0.25, "global": True}, {}) == (0.25, True)
    assert retry_after_of(None, {"Retry-After": "3"}) == (3.0, False)
    assert retry_after_of("not json", {"Retry-After": "2", "X-RateLimit-Global": "true"}) == \
        (2.0, True)
    assert retry_after_of({}, {}) == (1.0, False)
