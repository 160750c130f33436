#!/usr/bin/env bash
# On the GPU machine (device tool), after scripts/device/pack.sh here: the CUDA kernel and
# whole-model tests (ctest label cuda), then `orchid bench decode` on full-size synthetic
# weights. Logs and JSON go to $OUT; a short table is printed last.
#   usage: scripts/device/run.sh [tests|bench|all] [contexts]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
what="${1:-all}"
contexts="${2:-256,512,1024,2048,4096,8192,16384,32768,65536,131072}"
out="${OUT:-/tmp/orchid-out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/.device/lib:${LD_LIBRARY_PATH:-}"
bin="$root/.device/bin"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv \
  | tee "$out/gpu.txt"
status=0
if [[ "$what" == tests || "$what" == all ]]; then
  "$bin/orchid_cuda_tests" --gtest_color=no > "$out/cuda_tests.log" 2>&1 || status=1
  grep -E "^\[ (cuda golden|cuda greedy) \]|FAILED|^\[  PASSED|^\[  FAILED" "$out/cuda_tests.log" | head -60
fi
if [[ "$what" == bench || "$what" == all ]]; then
  # Clocks and power while the benchmark runs (read only; the card's settings are left alone).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv \
    -lms 250 > "$out/clocks.csv" 2>&1 &
  smi=$!
  "$bin/orchid" bench decode --synthetic qwen3.6-35b-a3b --lengths "$contexts" \
    --decode-tokens 64 --out "$out/bench-decode.json" 2>&1 | tee "$out/bench.log" || status=1
  kill "$smi" 2>/dev/null
  echo "SM clock (MHz) during the run: $(awk -F', ' 'NR > 1 {print $2}' "$out/clocks.csv" | sort -n | uniq -c | sort -rn | head -3 | tr '\n' ' ')"
fi
exit $status
