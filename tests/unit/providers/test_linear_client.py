"""The Linear client's pure parts: how credentials are sent, and the request budget."""

from __future__ import annotations

from typing import Any

import pytest

from wakeline.clock import SystemClock
from wakeline.errors import BudgetExhausted
from wakeline.providers.linear.client import RequestBudget
from wakeline.providers.linear.credentials import auth_header, credential_kind


def test_personal_keys_go_bare_and_tokens_as_bearer() -> None:
    assert auth_header("lin_api_abc") == "lin_api_abc"
    assert auth_header("lin_oauth_abc") == "Bearer lin_oauth_abc"
    assert auth_header("opaque-app-token") == "Bearer opaque-app-token"
    assert [credential_kind(k) for k in ("lin_api_x", "lin_oauth_x", None)] == \
        ["personal_api_key", "oauth_token", "none"]


def test_the_hourly_budget_refuses_at_the_cap_and_frees_with_time(frozen: Any) -> None:
    budget = RequestBudget(3, SystemClock())
    for _ in range(3):
        budget.take()
    with pytest.raises(BudgetExhausted):
        budget.take()
    frozen.tick(3601)
    budget.take()
    assert budget.used() == 1


def test_linear_rate_limit_headers_block_until_reset(frozen: Any) -> None:
    budget = RequestBudget(100, SystemClock())
    reset_ms = int((SystemClock().now().timestamp() + 30) * 1000)
    budget.observe({"X-RateLimit-Requests-Remaining": "0", "X-RateLimit-Requests-Reset": str(reset_ms)})
    with pytest.raises(BudgetExhausted) as refused:
        budget.take()
    assert refused.value.extra["retryAfterSeconds"] == pytest.approx(30, abs=1)
    frozen.tick(31)
    budget.take()


def test_retry_after_blocks_too(frozen: Any) -> None:
    budget = RequestBudget(100, SystemClock())
    budget.observe({"Retry-After": "5"})
    with pytest.raises(BudgetExhausted):
        budget.take()
    frozen.tick(6)
    budget.take()
