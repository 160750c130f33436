#!/usr/bin/env bash
# On the GPU machine (device tool), after scripts/device/pack.sh here: the CUDA kernel and
# whole-model tests (ctest label cuda), then `orchid bench decode` on full-size synthetic
# weights. Logs and JSON go to $OUT; a short table is printed last.
#   usage: scripts/device/run.sh [tests|bench|prefill|all|ncu|ncu-detail|fullsize|timeline|lab|
#          tokenizer|demo-model] [contexts]
#   prefill: `orchid bench prefill` (tok/s per prompt length, per-kernel times, ablations at
#        512, 2K, 8K, memory after the longest prompt) as $OUT/bench-prefill.json
#   BENCH_ARGS (environment): more `orchid bench decode` flags, e.g. --ablation-lengths none
#   GTEST_FILTER (environment): tests runs only the CUDA tests it matches
#   ncu: per-kernel durations and DRAM bytes of the first decode step at the first context,
#        from Nsight Compute (clocks left alone), as $OUT/ncu.csv
#   fullsize: a full-size synthetic checkpoint (orchid synth, 19 GB, made once per machine) through
#        the CUDA and CPU backends (test CudaFullSize), as $OUT/full_size.log
#   timeline: Nsight Systems trace of decode at the first context; each kernel's share of the
#        step (how far it moves the step's end, scripts/device/timeline.py) as $OUT/timeline.txt
#   golden-bits: sha256 of the CUDA logits of the golden prompts and a demo-model prompt, as
#        $OUT/golden-bits.json (compare two binaries' lists)
#   lab: the GEMV design experiments (bench/cuda/gemv_lab.cu), as $OUT/gemv-lab.json
#   tokenizer: the demo model's tokenizer (issue 7) from .device-data/corpus.txz (make_corpus.py's
#        output, xz: the carry limit) and the Qwen3 reference files in .device-data/qwen3-ref, as $OUT/demo-tokenizer/
#   demo-model: trains the demo model (issue 7) on .device-data/corpus.txz with the tokenizer in models/orchid-demo
#        for DEMO_MINUTES (environment, default 6) of training, about 2 minutes more in all; the
#        checkpoint, eval text, its reference, results.json and train.log as $OUT/demo-model/ (6 files)
#   demo-eval: the demo model's teacher-forced fidelity on the CUDA backend against the committed HF
#        reference (tests/fixtures/orchid-demo): chunked prefill in 1,024-token windows, one
#        4,100-token prefill, and step by step (ORCHID_PREFILL_CHUNK=1), as $OUT/demo-eval-*.json; then
#        one greedy answer on the GPU
#   prefill-timeline: Nsight Systems trace of `orchid bench prefill` at the first length alone
#        (no ablations): GPU kernels and memory operations, and the CUDA API calls, as
#        $OUT/trace_cuda_gpu_trace.csv and $OUT/trace_cuda_api_trace.csv (xz)
#   ncu-prefill REGEX: speed-of-light, memory and warp-stall sections of the launches matching REGEX
#        in a 4K-prompt prefill: NCU_COUNT (4) of them after skipping NCU_SKIP (80: the 256-token
#        warm-up's, for a kernel launched twice a layer), as $OUT/ncu-prefill.txt
#   ncu-detail REGEX: speed-of-light, occupancy and warp-stall sections of the first 4 launches
#        of each kernel matching REGEX, as $OUT/ncu-detail.txt
#   ncu-source NAME:SKIP:COUNT,...: PC-sampled warp stalls per SASS instruction (the source page)
#        of COUNT launches of kernel NAME after SKIP of its launches in an 8K-prompt prefill (the
#        256-token warm-up comes first), as $OUT/ncu-source-NAME.csv (xz) beside the summary
#        sections in $OUT/ncu-source.txt and scripts/device/stalls.py's in ncu-source-summary.txt
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
what="${1:-all}"
contexts="${2:-256,512,1024,2048,4096,8192,16384,32768,65536,131072}"
out="${OUT:-/tmp/orchid-out}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$root/.device/lib:${LD_LIBRARY_PATH:-}"
# The binaries' commit for the bench JSONs: .device/commit (pack.sh), read by `orchid bench`.
bin="$root/.device/bin"
for f in "$bin"/*.xz; do [[ -e "$f" ]] && unxz -f "$f"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv \
  | tee "$out/gpu.txt"
status=0
if [[ "$what" == tests || "$what" == all ]]; then
  "$bin/orchid_cuda_tests" --gtest_color=no ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"} \
    > "$out/cuda_tests.log" 2>&1 || status=1
  grep -E "^\[ (cuda golden|cuda greedy) \]|FAILED|^\[  PASSED|^\[  FAILED" "$out/cuda_tests.log" | head -60
fi
if [[ "$what" == bench || "$what" == all ]]; then
  # Clocks and power while the benchmark runs (read only; the card's settings are left alone).
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv \
    -lms 250 > "$out/clocks.csv" 2>&1 &
  smi=$!
  "$bin/orchid" bench decode --synthetic qwen3.6-35b-a3b --lengths "$contexts" \
    --decode-tokens 64 --out "$out/bench-decode.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log" || status=1
  kill "$smi" 2>/dev/null
  echo "SM clock (MHz) during the run: $(awk -F', ' 'NR > 1 {print $2}' "$out/clocks.csv" | sort -n | uniq -c | sort -rn | head -3 | tr '\n' ' ')"
fi
if [[ "$what" == prefill || "$what" == all ]]; then
  "$bin/orchid" bench prefill --synthetic qwen3.6-35b-a3b --lengths "$contexts" \
    --out "$out/bench-prefill.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench-prefill.log" || status=1
fi
if [[ "$what" == ncu ]]; then
  ctx="${contexts%%,*}"
  ncu --clock-control none --graph-profiling node \
    --kernel-name 'regex:gemv|gate_up|down|attention|gdn|qk_norm|embed|route' \
    --launch-count 300 --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$bin/orchid" bench decode --synthetic qwen3.6-35b-a3b --lengths "$ctx" --decode-tokens 8 \
    > "$out/ncu.csv" 2> "$out/ncu.err" || status=1
  python3 - "$out/ncu.csv" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
ki, mi, ui, vi = (head.index(k) for k in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
scale = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "byte": 1, "Kbyte": 1e3,
         "Mbyte": 1e6, "Gbyte": 1e9}
agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # launches, ns, bytes read, written
for r in rows:
    name = re.sub(r"\(.*", "", r[ki]).split("::")[-1][:40]
    v = float(r[vi].replace(",", "")) * scale.get(r[ui], 1)
    if r[mi] == "gpu__time_duration.sum": agg[name][0] += 1; agg[name][1] += v
    if r[mi] == "dram__bytes_read.sum": agg[name][2] += v
    if r[mi] == "dram__bytes_write.sum": agg[name][3] += v
tot = sum(v[1] for v in agg.values())
print(f"{'kernel':40s} {'n':>4s} {'us total':>10s} {'us each':>8s} {'GB/s':>7s}")
for k, v in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{k:40s} {v[0]:4d} {v[1]/1e3:10.1f} {v[1]/1e3/max(v[0],1):8.2f} {(v[2]+v[3])/max(v[1],1):7.1f}")
print(f"sum of kernel times: {tot/1e3:.1f} us over {sum(v[0] for v in agg.values())} launches")
PY
fi
if [[ "$what" == fullsize ]]; then
  dir=/tmp/orchid-full-size
  [[ -f "$dir/config.json" ]] ||
    "$bin/orchid" synth --config qwen3.6-35b-a3b --layout mlx4 -o "$dir" > "$out/synth.log" 2>&1
  ORCHID_FULL_SIZE_MODEL="$dir" "$bin/orchid_cuda_tests" --gtest_filter='CudaFullSize.*' \
    > "$out/full_size.log" 2>&1 || status=1
  grep -E "cuda full size|  OK|FAILED|Failure|rel L2|position" "$out/full_size.log" | head -30
fi
if [[ "$what" == timeline ]]; then
  ctx="${contexts%%,*}"
  # The image has no Nsight Systems on PATH; Nsight Compute ships an nsys binary.
  nsys="$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | head -1)"
  "$nsys" profile --cuda-graph-trace=node -o "$out/trace" --force-overwrite true "$bin/orchid" \
    bench decode --synthetic qwen3.6-35b-a3b --lengths "$ctx" --decode-tokens 16 \
    --ablation-lengths none > "$out/nsys.log" 2>&1 || status=1
  # That nsys leaves the raw stream; the importer beside it (Nsight Compute's host tools) makes
  # the report.
  if [[ ! -f "$out/trace.nsys-rep" && -f "$out/trace.qdstrm" ]]; then
    importer="$(ls /opt/nvidia/nsight-compute/*/host/*/QdstrmImporter | head -1)"
    "$importer" -i "$out/trace.qdstrm" >> "$out/nsys.log" 2>&1 || status=1
  fi
  "$nsys" stats --report cuda_gpu_trace --format csv --output "$out/trace" "$out/trace.nsys-rep" \
    >> "$out/nsys.log" 2>&1 || status=1
  rm -f "$out/trace.nsys-rep" "$out/trace.sqlite" "$out/trace.qdstrm"
  python3 scripts/device/timeline.py "$out"/trace_cuda_gpu_trace.csv 8 | tee "$out/timeline.txt"
fi
if [[ "$what" == prefill-timeline ]]; then
  len="${contexts%%,*}"
  nsys="$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys | head -1)"
  "$nsys" profile -t cuda -o "$out/trace" --force-overwrite true "$bin/orchid" bench prefill \
    --synthetic qwen3.6-35b-a3b --lengths "$len" --ablation-lengths none > "$out/nsys.log" 2>&1 \
    || status=1
  if [[ ! -f "$out/trace.nsys-rep" && -f "$out/trace.qdstrm" ]]; then
    importer="$(ls /opt/nvidia/nsight-compute/*/host/*/QdstrmImporter | head -1)"
    "$importer" -i "$out/trace.qdstrm" >> "$out/nsys.log" 2>&1 || status=1
  fi
  "$nsys" stats --report cuda_gpu_trace,cuda_api_trace --format csv --output "$out/trace" \
    "$out/trace.nsys-rep" >> "$out/nsys.log" 2>&1 || status=1
  rm -f "$out/trace.nsys-rep" "$out/trace.sqlite" "$out/trace.qdstrm"
  xz -T4 "$out"/trace_*.csv
fi
corpus=/tmp/orchid-corpus  # make_corpus.py's output, unpacked by the modes that need it
if [[ "$what" == tokenizer || "$what" == demo-model ]]; then
  mkdir -p "$corpus" && tar xJf .device-data/corpus.txz -C "$corpus"
fi
if [[ "$what" == tokenizer ]]; then
  [[ -f .device-data/qwen3-ref/tokenizer.json.gz ]] && gunzip -f .device-data/qwen3-ref/tokenizer.json.gz
  python3 -c "import tokenizers, transformers, torch; print('tokenizers', tokenizers.__version__,
    'transformers', transformers.__version__, 'torch', torch.__version__)" | tee "$out/python.txt"
  python3 scripts/demo-model/train_tokenizer.py --corpus "$corpus" --reference .device-data/qwen3-ref \
    --out "$out/demo-tokenizer" 2>&1 | tee "$out/tokenizer.log" || status=1
fi
if [[ "$what" == demo-model ]]; then
  # Its output stays in $OUT/demo-model (train.log is written by the script): with gpu.txt,
  # 7 files come back, under the device tool's 8.
  PYTHONUNBUFFERED=1 python3 scripts/demo-model/train_model.py --corpus "$corpus" \
    --tokenizer models/orchid-demo --out "$out/demo-model" --minutes "${DEMO_MINUTES:-6}" || status=1
fi
if [[ "$what" == demo-eval ]]; then
  fx=tests/fixtures/orchid-demo
  ev=("$bin/orchid" eval -m models/orchid-demo --text "$fx/heldout-eval.txt"
      --reference "$fx/heldout-eval.ref.npy" --backend cuda --json)
  "${ev[@]}" > "$out/demo-eval-chunked.json" || status=1
  "${ev[@]}" --window 4100 > "$out/demo-eval-whole.json" || status=1
  ORCHID_PREFILL_CHUNK=1 "${ev[@]}" > "$out/demo-eval-steps.json" || status=1
  for f in chunked whole steps; do echo "$f: $(cat "$out/demo-eval-$f.json")"; done
  "$bin/orchid" run -p "What does orchid mean?" --greedy -n 60 --backend cuda || status=1
fi
if [[ "$what" == ncu-prefill ]]; then
  ncu --clock-control none --kernel-name "regex:$contexts" --launch-skip "${NCU_SKIP:-80}" \
    --launch-count "${NCU_COUNT:-4}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    "$bin/orchid" bench prefill --synthetic qwen3.6-35b-a3b --lengths 4096 --ablation-lengths none \
    > "$out/ncu-prefill.txt" 2>&1 || status=1
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|L1/TEX Hit|Shared Memory|Pipe|Block Size|Grid Size|Executed Ipc" \
    "$out/ncu-prefill.txt" | head -150
fi
if [[ "$what" == ncu-source ]]; then
  IFS=',' read -ra specs <<< "$contexts"
  for spec in "${specs[@]}"; do
    IFS=':' read -r k skip count <<< "$spec"
    ncu --clock-control none --kernel-name "regex:$k" --launch-skip "$skip" \
      --launch-count "$count" --section SpeedOfLight --section WarpStateStats --section SourceCounters \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -f -o "$out/rep-$k" \
      "$bin/orchid" bench prefill --synthetic qwen3.6-35b-a3b --lengths 8192 --ablation-lengths none \
      >> "$out/ncu-source.log" 2>&1 || status=1
    ncu -i "$out/rep-$k.ncu-rep" >> "$out/ncu-source.txt" 2>&1 || status=1
    ncu -i "$out/rep-$k.ncu-rep" --page source --print-source sass --csv \
      > "$out/ncu-source-$k.csv" 2>> "$out/ncu-source.log" || status=1
    rm -f "$out/rep-$k.ncu-rep"
    python3 scripts/device/stalls.py "$out/ncu-source-$k.csv" 12 >> "$out/ncu-source-summary.txt"
    xz -T4 "$out/ncu-source-$k.csv"
  done
  grep -E "^==|reasons|mbarrier" "$out/ncu-source-summary.txt"
fi
if [[ "$what" == golden-bits ]]; then
  # The CUDA backend's logits of every golden prompt (whole, and in chunks of 16) and of a
  # 3,000-token demo-model prompt (whole, and in chunks of 1,000), as sha256 per array in
  # $OUT/golden-bits.json: two binaries compute the same bits where their lists match.
  python3 - "$bin/orchid" "$out/golden-bits.json" <<'PY' || status=1
import hashlib, json, os, subprocess, sys, tempfile
orchid, dst = sys.argv[1:]
runs = []
for cfg in ("tiny", "odd"):
    g = json.load(open(f"tests/fixtures/golden/{cfg}/ref/golden.json"))
    for layout in g["layouts"]:
        for i, p in enumerate(g["prompts"]):
            for chunk in (0, 16):
                runs.append((f"{cfg}/{layout}/p{i}/chunk{chunk}",
                             f"tests/fixtures/golden/{cfg}/{layout}", p, chunk))
x, demo = 12345, []
for _ in range(3000):
    x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
    demo.append(3 + (x >> 33) % 4000)
runs += [(f"demo/3000/chunk{c}", "models/orchid-demo", demo, c) for c in (0, 1000)]
res = {}
with tempfile.TemporaryDirectory() as tmp:
    f = os.path.join(tmp, "logits.npy")
    for key, model, ids, chunk in runs:
        r = subprocess.run([orchid, "logits", "-m", model, "--backend", "cuda", "--tokens",
                            ",".join(map(str, ids)), "--chunk", str(chunk), "--out", f],
                           capture_output=True, text=True)
        res[key] = (hashlib.sha256(open(f, "rb").read()).hexdigest() if r.returncode == 0
                    else "error: " + r.stderr[-300:])
json.dump(res, open(dst, "w"), indent=1)
print("\n".join(f"{k:28s} {v[:16]}" for k, v in res.items()))
PY
fi
if [[ "$what" == lab ]]; then
  "$bin/orchid_gemv_lab" "$out/gemv-lab.json" 2>&1 | tee "$out/gemv-lab.log" || status=1
fi
if [[ "$what" == ncu-detail ]]; then
  ncu --clock-control none --graph-profiling node --kernel-name "regex:$contexts" \
    --launch-count 4 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    "$bin/orchid" bench decode --synthetic qwen3.6-35b-a3b --lengths 4096 --decode-tokens 8 \
    > "$out/ncu-detail.txt" 2>&1 || status=1
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Issued Warp|One or More|No Eligible|L2 Hit|Block Size|Grid Size" \
    "$out/ncu-detail.txt" | head -120
fi
exit $status
