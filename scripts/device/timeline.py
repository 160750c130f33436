#!/usr/bin/env python3
"""Per-kernel share of the decode step from an Nsight Systems trace (CUDA graph nodes traced).

With programmatic dependent launch kernels overlap, so a kernel's own duration overstates what
it adds to the step. Its share here is how far it moves the step's end: its end time minus the
latest end of the kernels before it (0 when it ends inside an earlier one's span).
    usage: timeline.py TRACE_cuda_gpu_trace.csv [steps] [last kernel of a step]
(default: the lm_head kernel, stream_gemv_kernel or, with ORCHID_DP4A=0, mma_gemv_kernel; with
both off give gemv_kernel)
"""
import collections
import csv
import re
import sys

rows = []
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        name = r.get("Name") or r.get("Kernel Name") or ""
        if not r.get("Start (ns)") or "[CUDA mem" in name:
            continue
        start, dur = int(r["Start (ns)"]), int(r["Duration (ns)"])
        # Drop the parameter list, keep template arguments (they tell the GEMV shapes apart).
        name = re.sub(r"\([^()]*\)$", "", name)
        name = re.sub(r"orchid::cuda::|<unnamed>::|\(anonymous namespace\)::|void ", "", name)
        name = name.replace("(DevFormat)0", "q4").replace("(DevFormat)1", "q8")
        rows.append((start, start + dur, name.replace("(DevFormat)2", "bf16")[:48]))
rows.sort()
# The last `steps` decode steps, each ending with the lm_head kernel.
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
names = {r[2] for r in rows}
last = sys.argv[3] if len(sys.argv) > 3 else next(
    (k for k in ("stream_gemv_kernel", "mma_gemv_kernel") if any(n.startswith(k) for n in names)),
    "gemv_kernel")
ends = [i for i, r in enumerate(rows) if r[2].startswith(last)]
if len(ends) < steps + 1:
    sys.exit(f"only {len(ends)} steps in the trace")
first, last = ends[-steps - 1] + 1, ends[-1]
share = collections.defaultdict(float)
count = collections.Counter()
own = collections.defaultdict(float)
latest = rows[first - 1][1]
for start, end, name in rows[first:last + 1]:
    share[name] += max(0, end - latest) / steps
    own[name] += (end - start) / steps
    count[name] += 1
    latest = max(latest, end)
total = (rows[last][1] - rows[first - 1][1]) / steps
print(f"step {total / 1e3:.1f} us (mean of the last {steps}); per step:")
print(f"{'kernel':48s} {'n':>4s} {'share us':>9s} {'own us':>9s}")
for k in sorted(share, key=lambda k: -share[k]):
    print(f"{k:48s} {count[k] // steps:4d} {share[k] / 1e3:9.1f} {own[k] / 1e3:9.1f}")
