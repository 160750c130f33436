// orchid's CPU backend and llama.cpp (node-llama-cpp's prebuilt CPU build, which picks the
// ggml-cpu variant for this CPU) on the same model shapes and bits per weight, alternating in one
// run on one machine: prefill of N random tokens, then M greedy decode steps, best of R rounds.
//   node cpu_vs_llamacpp.mjs --orchid BIN --orchid-model DIR --gguf FILE [--prefill 512]
//        [--decode 32] [--rounds 3] [--threads 2] --out FILE.json
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir, cpus } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf("--" + name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const orchid = arg("orchid"), orchidModel = arg("orchid-model"), gguf = arg("gguf");
const nPrefill = Number(arg("prefill", 512)), nDecode = Number(arg("decode", 32));
const rounds = Number(arg("rounds", 3)), threads = Number(arg("threads", cpus().length));
const out = arg("out");
if (!orchid || !orchidModel || !gguf || !out) {
  console.error("usage: --orchid BIN --orchid-model DIR --gguf FILE --out FILE.json");
  process.exit(2);
}

const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0, useMmap: true });
const vocab = Number(model.fileInfo.tensorInfo.find((t) => t.name === "token_embd.weight").dimensions[1]);
let seed = 12345n;
const random = () => {
  seed = (seed * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
  return Number(seed >> 33n);
};

async function llamaRound() {
  const context = await model.createContext({ contextSize: nPrefill + nDecode + 8,
    batchSize: Math.min(nPrefill, 512), threads, sequences: 1 });
  const seq = context.getSequence();
  const prompt = Array.from({ length: nPrefill }, () => 3 + (random() % (vocab - 3)));
  let t = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  const prefill = nPrefill / ((performance.now() - t) / 1000);
  let n = 0;
  t = performance.now();
  for await (const _ of seq.evaluate([prompt[prompt.length - 1]], { temperature: 0 }))
    if (++n >= nDecode) break;
  const decode = n / ((performance.now() - t) / 1000);
  await context.dispose();
  return { prefill_tok_s: prefill, decode_tok_s: decode };
}

const dir = mkdtempSync(join(tmpdir(), "orchid-peer-"));
function orchidRound(r) {
  const file = join(dir, `orchid-${r}.json`);
  execFileSync(orchid, ["bench", "all", "-m", orchidModel, "--backend", "cpu", "--lengths",
    String(nPrefill), "--decode-tokens", String(nDecode), "--out", file],
    { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, ORCHID_THREADS: String(threads) } });
  const j = JSON.parse(readFileSync(file, "utf8"));
  return { prefill_tok_s: j.prefill_tok_s[String(nPrefill)],
    decode_tok_s: j.decode_tok_s_at_context[String(nPrefill)],
    read_bandwidth_gb_s: j.cpu_roofline?.read_bandwidth_gb_s, json: j };
}

const runs = { orchid: [], llama_cpp: [] };
let last;
for (let r = 0; r < rounds; ++r) {
  runs.llama_cpp.push(await llamaRound());
  last = orchidRound(r);
  runs.orchid.push({ prefill_tok_s: last.prefill_tok_s, decode_tok_s: last.decode_tok_s,
    read_bandwidth_gb_s: last.read_bandwidth_gb_s });
  console.error(`round ${r + 1}: llama.cpp ${runs.llama_cpp[r].prefill_tok_s.toFixed(1)} / ` +
    `${runs.llama_cpp[r].decode_tok_s.toFixed(1)}, orchid ${last.prefill_tok_s.toFixed(1)} / ` +
    `${last.decode_tok_s.toFixed(1)} tok/s (prefill / decode)`);
}
const best = (list, key) => Math.max(...list.map((x) => x[key]));
const o = { prefill: best(runs.orchid, "prefill_tok_s"), decode: best(runs.orchid, "decode_tok_s") };
const l = { prefill: best(runs.llama_cpp, "prefill_tok_s"), decode: best(runs.llama_cpp, "decode_tok_s") };
// This VM's bandwidth moves from minute to minute: the median of the rounds' probes.
const bws = runs.orchid.map((r) => r.read_bandwidth_gb_s).sort((a, b) => a - b);
const roof = { ...(last.json.cpu_roofline ?? {}), read_bandwidth_gb_s: bws[Math.floor(bws.length / 2)] };
const bytes = roof.decode_weight_bytes_per_token;
const result = {
  what: "orchid CPU backend vs llama.cpp, same machine, same run (scripts/peer/cpu-vs-llamacpp.sh)",
  date: new Date().toISOString(),
  commit: last.json.commit,
  machine: { cpu: last.json.machine.cpu, threads, read_bandwidth_gb_s: roof.read_bandwidth_gb_s,
    read_bandwidth_note: "median of the rounds' probes (orchid bench, 1 GiB read by all threads)" },
  model: { orchid: orchidModel, orchid_layout: last.json.layout, llama_cpp: gguf,
    decode_weight_bytes_per_token: bytes },
  orchid: { path: last.json.backend_path, prefill_tok_s: o.prefill, decode_tok_s: o.decode,
    decode_gb_s: bytes ? (o.decode * bytes) / 1e9 : null,
    decode_pct_of_read_bandwidth: bytes ? (100 * o.decode * bytes) / 1e9 / roof.read_bandwidth_gb_s : null },
  llama_cpp: { node_llama_cpp: "3.22.1", release: llama.llamaCppRelease, prefill_tok_s: l.prefill,
    decode_tok_s: l.decode },
  ratio: { prefill: o.prefill / l.prefill, decode: o.decode / l.decode },
  bars: { prefill: 2.0, decode: 1.25, decode_pct_of_read_bandwidth: 75 },
  prefill_tokens: nPrefill, decode_tokens: nDecode, rounds: runs,
};
writeFileSync(out, JSON.stringify(result, null, 2) + "\n");
console.log(`orchid ${o.prefill.toFixed(1)} / ${o.decode.toFixed(1)} tok/s, llama.cpp ` +
  `${l.prefill.toFixed(1)} / ${l.decode.toFixed(1)}: prefill ${result.ratio.prefill.toFixed(2)}x, ` +
  `decode ${result.ratio.decode.toFixed(2)}x (${result.orchid.decode_pct_of_read_bandwidth?.toFixed(0)} % ` +
  `of ${roof.read_bandwidth_gb_s?.toFixed(1)} GB/s)`);
await model.dispose();
await llama.dispose();
