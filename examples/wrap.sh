#!/usr/bin/env bash
# Run a coding-agent CLI that prints no stream as a wakeline agent (aider). Claude Code
# and Codex need no wrapper: wakeline reads their streams itself (output = "claude" or
# "codex", see examples/claude-code and examples/codex).
#
#   wrap.sh CLI [ARGS...]
#
# wakeline gives the prompt on stdin and reads the answer on stdout; exit 0 is an answer,
# 2 a question for the human, 1 an error. Such CLIs have their own exit codes
# and no notion of asking, so this wrapper adds a short note to the prompt (ask with a
# line starting "QUESTION:"), runs the CLI, and maps what it did:
#   the CLI failed (non-zero)          -> exit 1, its output as the error
#   its answer has a QUESTION: line    -> exit 2, the question
#   otherwise                          -> exit 0, its answer
# An argument `{prompt}` is replaced by the path of a file holding the prompt, for CLIs
# that take the prompt as a file instead of on stdin (aider).
set -uo pipefail

if [ $# -eq 0 ]; then
  echo "usage: wrap.sh CLI [ARGS...]  (see examples/README.md)" >&2
  exit 1
fi

prompt=$(mktemp) answer=$(mktemp)
trap 'rm -f "$prompt" "$answer"' EXIT
{
  printf '%s\n\n' "You run unattended in this issue's own workspace. To show the person in \
Linear what you are doing, run \`wakeline agent thought TEXT\` (or \`wakeline agent plan STEP...\`, \
\`wakeline agent link LABEL URL\`). When you are done, end with a short summary for the issue. \
If you cannot go on without the human, reply with one line starting with QUESTION: and \
nothing after it."
  cat
} > "$prompt"

args=()
for arg in "$@"; do
  if [ "$arg" = "{prompt}" ]; then args+=("$prompt"); else args+=("$arg"); fi
done

"${args[@]}" < "$prompt" > "$answer"
code=$?
if [ "$code" -ne 0 ]; then
  cat "$answer"
  echo "$1 exited with $code" >&2
  exit 1
fi
if grep -q '^QUESTION:' "$answer"; then
  sed -n 's/^QUESTION:[[:space:]]*//p' "$answer" | head -n 1
  exit 2
fi
cat "$answer"
exit 0
