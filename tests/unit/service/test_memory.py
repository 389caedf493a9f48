"""The malloc arena limit: set on glibc, left to an operator's MALLOC_ARENA_MAX."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from wakeline.service.memory import limit_malloc_arenas

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


@glibc_only
def test_the_limit_is_set_in_a_fresh_process() -> None:
    # In a child: the test process's own arenas are not this test's to change.
    code = "from wakeline.service.memory import limit_malloc_arenas; print(limit_malloc_arenas({}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "True"


def test_an_operator_s_malloc_arena_max_wins() -> None:
    assert limit_malloc_arenas({"MALLOC_ARENA_MAX": "4"}) is False

