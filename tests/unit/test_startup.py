"""What `wakeline serve` loads before it can answer: only what every start needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_service_starts_without_graphql_core() -> None:
    """graphql-core (about an eighth of the start-up's imports) is only for the GraphQL
    hatch: it loads with the hatch's first call, not with every start and every drain."""
    probe = "import sys, wakeline.app, wakeline.cli; print('graphql' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
