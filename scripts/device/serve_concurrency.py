#!/usr/bin/env python3
"""Streams served at once over HTTP (stdlib only: the GPU machine has python, not node).

Against a running `orchid serve` on PORT: N streams at once for N in 1, 2, 4, 8 (512 tokens each,
greedy, ignore_eos, distinct short prompts): aggregate and per-stream tok/s. Then a new stream's
time to first token with a PROMPT_TOKENS-long prompt, alone and while 4 long streams decode.
Prints a table and writes JSON to argv[2].

usage: serve_concurrency.py PORT OUT.json
"""
import http.client
import json
import sys
import threading
import time

PORT = int(sys.argv[1])
OUT = sys.argv[2]


def stream(prompt, max_tokens, result):
    """One streamed chat completion; result gets ttft (s), tokens, seconds."""
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "temperature": 0,
                       "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=600)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    ttft = None
    usage = None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        delta = ev["choices"][0].get("delta", {}) if ev.get("choices") else {}
        if ttft is None and (delta.get("content") or delta.get("reasoning_content")):
            ttft = time.monotonic() - t0
    result.update(ttft=ttft, seconds=time.monotonic() - t0,
                  tokens=usage["completion_tokens"] if usage else 0,
                  prompt_tokens=usage["prompt_tokens"] if usage else 0)


def at_once(n, tokens=512):
    results = [{} for _ in range(n)]
    threads = [threading.Thread(target=stream, args=(f"Tell story {i} of {n}", tokens, results[i]))
               for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    total = sum(r["tokens"] for r in results)
    return {"streams": n, "tokens": total, "seconds": round(wall, 3),
            "aggregate_tok_s": round(total / wall, 1),
            "per_stream_tok_s": [round(r["tokens"] / r["seconds"], 1) for r in results],
            "ttft_s": [round(r["ttft"], 4) for r in results]}


out = {"concurrency": []}
stream("warm up", 16, {})
for n in (1, 2, 4, 8):
    row = at_once(n)
    out["concurrency"].append(row)
base = out["concurrency"][0]["aggregate_tok_s"]
for row in out["concurrency"]:
    row["vs_one_stream"] = round(row["aggregate_tok_s"] / base, 2)

# A new stream's first token: a long prompt alone, then beside 4 decoding streams.
long_prompt = "the quick brown fox jumps over the lazy dog " * 450
alone = {}
stream(long_prompt + " alone", 8, alone)
stream(long_prompt + " alone again", 8, alone)  # its prefix is cached now: use a fresh one below
alone = {}
stream("fresh " + long_prompt, 8, alone)
bg = [{} for _ in range(4)]
threads = [threading.Thread(target=stream, args=(f"Background {i}", 1500, bg[i])) for i in range(4)]
for t in threads:
    t.start()
time.sleep(1.5)
busy = {}
stream("another " + long_prompt, 8, busy)
for t in threads:
    t.join()
out["new_stream"] = {"prompt_tokens": alone["prompt_tokens"], "ttft_alone_s": round(alone["ttft"], 4),
                     "ttft_beside_4_s": round(busy["ttft"], 4),
                     "background_tok_s": [round(r["tokens"] / r["seconds"], 1) for r in bg]}
with open(OUT, "w") as f:
    json.dump(out, f, indent=1)
print("streams  aggregate tok/s  x one  per stream")
for row in out["concurrency"]:
    print(f"{row['streams']:7d}  {row['aggregate_tok_s']:15.1f}  {row['vs_one_stream']:5.2f}  "
          f"{min(row['per_stream_tok_s']):.1f}-{max(row['per_stream_tok_s']):.1f}")
ns = out["new_stream"]
print(f"new stream, {ns['prompt_tokens']} prompt tokens: first token {ns['ttft_alone_s']:.3f} s alone, "
      f"{ns['ttft_beside_4_s']:.3f} s beside 4 decoding streams")
