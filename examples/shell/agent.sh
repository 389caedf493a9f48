#!/bin/sh
# A plain shell agent: the smallest thing that speaks wakeline's agent protocol.
# It reads the prompt on stdin, keeps a log of what it was asked in its workspace,
# and answers with the headlines it saw. A headline that mentions "question" makes it
# ask one (exit 2); replace the body with whatever your agent should do.
set -eu

prompt=$(cat)
headlines=$(printf '%s\n' "$prompt" | sed -n 's/^- //p')
issue=${WAKELINE_ISSUE_IDENTIFIER:-this conversation}

printf '%s\n%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ) turn ${WAKELINE_TURN_ID:-?}" "$headlines" >> agent-log.txt

if printf '%s' "$headlines" | grep -qi question; then
  echo "What should I look at first on $issue?"
  exit 2
fi
count=$(printf '%s\n' "$headlines" | grep -c . || true)
echo "Shell agent: read $count new event(s) on $issue."
printf '%s\n' "$headlines" | sed 's/^/- /'
