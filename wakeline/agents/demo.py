"""The bundled demo agent: reads the prompt, answers with what it saw.

It shows the agent protocol end to end without any model: prompt on stdin,
the answer on stdout, exit 0. A headline containing "question" makes it ask
one instead (exit 2), and one containing "fail" makes it report an error (exit 1).
`--think SECONDS` makes it take that long, as a real agent would.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    """Answer one turn."""
    parser = argparse.ArgumentParser(prog="wakeline.agents.demo")
    parser.add_argument("--think", type=float, default=0.0, help="seconds to take")
    args = parser.parse_args()
    prompt = sys.stdin.read()
    time.sleep(max(0.0, args.think))
    headlines = [line[2:] for line in prompt.splitlines() if line.startswith("- ")]
    issue = os.environ.get("WAKELINE_ISSUE_IDENTIFIER") or "this conversation"
    text = " ".join(headlines).lower()
    if "fail" in text:
        print(f"The demo agent was asked to fail on {issue}.")
        return 1
    if "question" in text:
        print(f"Which part of {issue} should I look at first?")
        return 2
    print(f"Demo agent: read {len(headlines)} new event(s) on {issue}.")
    for line in headlines:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
