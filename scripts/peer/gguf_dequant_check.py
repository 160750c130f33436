#!/usr/bin/python3
# orchid's reading of a GGUF's quantized tensors against llama.cpp's own Python reference
# (gguf-py's quants.dequantize, from the llama.cpp source node-llama-cpp bundles): `orchid convert
# FILE --type f32` writes what orchid loaded (every tensor dequantized, back in the converter's
# names and layout); each tensor must equal gguf-py's dequantization of the original within
# float rounding (orchid's scale · code + bias against gguf-py's d · sc · q − dmin · m).
#   /usr/bin/python3 gguf_dequant_check.py --orchid BIN --gguf FILE [--gguf-py DIR] [--out JSON]
# (Debian's python3-numpy; gguf-py: `git clone node_modules/node-llama-cpp/llama/gitRelease.bundle`.)
import argparse, json, os, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--orchid", required=True)
ap.add_argument("--gguf", required=True)
ap.add_argument("--gguf-py", default="/tmp/llama-src/gguf-py")
ap.add_argument("--out")
a = ap.parse_args()
sys.path.insert(0, a.gguf_py)
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

with tempfile.TemporaryDirectory() as tmp:
    f32 = os.path.join(tmp, "f32.gguf")
    subprocess.run([a.orchid, "convert", "-m", a.gguf, "-o", f32, "--type", "f32"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    src, got = GGUFReader(a.gguf), GGUFReader(f32)
    mine = {t.name: t for t in got.tensors}
    rows, worst, missing = [], 0.0, []
    for t in src.tensors:
        if t.name not in mine:
            missing.append(t.name)
            continue
        ref = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        o = np.asarray(mine[t.name].data, dtype=np.float64).reshape(-1)
        scale = max(np.abs(ref).max(), 1e-30)
        err = float(np.abs(o - ref).max() / scale) if o.shape == ref.shape else float("inf")
        worst = max(worst, err)
        rows.append({"tensor": t.name, "type": t.tensor_type.name, "max_abs_err_over_max_abs": err})
    types = sorted({r["type"] for r in rows})
    result = {"what": "orchid's dequantization of each GGUF tensor vs llama.cpp's gguf-py quants.dequantize",
              "gguf": a.gguf, "types": types, "tensors": len(rows), "missing_in_orchid": missing,
              "worst_max_abs_err_over_max_abs": worst,
              "worst_by_type": {ty: max(r["max_abs_err_over_max_abs"] for r in rows if r["type"] == ty) for ty in types}}
    print(json.dumps({k: result[k] for k in ("types", "tensors", "missing_in_orchid", "worst_by_type")}, indent=1))
    if a.out:
        json.dump(result | {"per_tensor": rows}, open(a.out, "w"), indent=1)
