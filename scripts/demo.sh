#!/usr/bin/env bash
# The main job on the built-in demo model: install, build, then serve models/orchid-demo (a small
# model of the real architecture trained on English definitions, quotations and docs — see
# docs/demo-model.md; orchid's default when no -m is given) with the OpenAI-compatible API on
# http://127.0.0.1:${PORT:-8080}, ask it one question, and keep serving until Ctrl-C.
#   scripts/demo.sh [QUESTION]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" default
port="${PORT:-8080}"
"$root/build/orchid" serve --port "$port" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
  kill -0 $server 2>/dev/null || exit 1
  sleep 0.2
done
question="${1:-What does orchid mean?}"
body=$(printf '{"messages":[{"role":"user","content":"%s"}],"max_tokens":64,"temperature":0}' "$question")
echo
echo "POST /v1/chat/completions: $question"
curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body"
echo
echo
echo "orchid is serving the demo model on http://127.0.0.1:$port/v1 (Ctrl-C stops it);"
echo "'build/orchid chat' chats with it in the terminal."
wait $server
