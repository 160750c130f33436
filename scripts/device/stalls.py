#!/usr/bin/env python3
"""Summarises an Nsight Compute source page (scripts/device/run.sh ncu-source: PC-sampled warp
stalls per SASS instruction, CSV, optionally .xz) per kernel launch: the stall reasons' shares of
all samples, each mbarrier wait loop's share (a TRYWAIT's samples land on the branch after it;
its shared-memory offset says which barrier), and the instructions with the most samples.

  usage: stalls.py FILE.csv[.xz] [top]
"""
import collections
import csv
import io
import lzma
import sys


def launches(path):
    """Yields (kernel name, header, rows) per launch in the file."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        name, head, rows = None, None, []
        for r in csv.reader(io.StringIO(f.read())):
            if r and r[0] == "Kernel Name":
                if rows:
                    yield name, head, rows
                name, head, rows = r[1], None, []
            elif r and r[0] == "Address":
                head = r
            elif head and len(r) == len(head):
                rows.append(r)
        if rows:
            yield name, head, rows


def opcode(sass):
    words = sass.split()
    return words[1] if words and words[0].startswith("@") else (words[0] if words else "")


def summarise(name, head, rows, top):
    ix = {n: i for i, n in enumerate(head)}
    samples = ix["Warp Stall Sampling (All Samples)"]
    execs = ix["Instructions Executed"]
    reasons = [n for n in head if n.startswith("stall_") and "Not Issued" not in n]
    total = sum(int(r[samples]) for r in rows) or 1
    pct = lambda n: 100.0 * n / total
    print(f"== {name[:150]}")
    print(f"   {len(rows)} instructions, {total} samples")
    by = collections.Counter()
    for r in rows:
        for s in reasons:
            by[s[6:]] += int(r[ix[s]])
    print("   reasons: " + ", ".join(f"{k} {pct(v):.1f}%" for k, v in by.most_common(8)))
    waits = collections.Counter()
    for i, r in enumerate(rows):
        sass = r[ix["Source"]]
        if "TRYWAIT" in sass:
            bar = sass.split("[")[1].split("]")[0].split("+")[-1]
            # The loop's branch: the first BRA within the next few instructions.
            bra = next((b for b in rows[i + 1:i + 8] if opcode(b[ix["Source"]]) == "BRA"), None)
            if bra:
                waits[bar] += int(bra[samples])
    for bar, n in sorted(waits.items()):
        print(f"   mbarrier wait at {bar}: {pct(n):.1f}%")
    for r in sorted(rows, key=lambda r: -int(r[samples]))[:top]:
        main = sorted(((int(r[ix[s]]), s[6:]) for s in reasons), reverse=True)[:2]
        print(f"   {r[0][-6:]} {pct(int(r[samples])):5.2f}%  x{int(r[execs]):>9}  "
              f"{r[ix['Source']].strip()[:56]:56s} " + " ".join(f"{s}:{n}" for n, s in main if n))
    ops = collections.Counter()
    for r in rows:
        ops[opcode(r[ix["Source"]])] += int(r[samples])
    print("   by opcode: " + ", ".join(f"{o} {pct(n):.1f}%" for o, n in ops.most_common(10)))


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    for name, head, rows in launches(path):
        summarise(name, head, rows, top)


if __name__ == "__main__":
    main()
