// Issue 34's bar: orchid and llama.cpp on the same GGUF file agree on the top-1 next token at
// ≥ 95 % of positions. Teacher-forced over a text (tokenized by llama.cpp from the file's own
// tokenizer; both engines get the same ids): llama.cpp's argmax at every position
// (controlledEvaluate, temperature 0) against orchid's (`orchid logits`, fast and exact paths).
//   node gguf_top1.mjs --orchid BIN --gguf FILE --text FILE [--max 1024] --out FILE.json
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf("--" + name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const orchid = arg("orchid"), gguf = arg("gguf"), textFile = arg("text"), out = arg("out");
const max = Number(arg("max", 1024));

// .npy float32 [n, V] → argmax of each row.
function npyArgmax(file) {
  const b = readFileSync(file);
  const hl = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + hl).toString();
  const shape = header.match(/\((\d+), (\d+)\)/).slice(1).map(Number);
  const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hl, b.byteOffset + b.length));
  const [n, V] = shape, ids = [];
  for (let r = 0; r < n; ++r) {
    let best = 0;
    for (let v = 1; v < V; ++v) if (data[r * V + v] > data[r * V + best]) best = v;
    ids.push(best);
  }
  return ids;
}

const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
const ids = Array.from(model.tokenize(readFileSync(textFile, "utf8"))).slice(0, max);
const context = await model.createContext({ contextSize: ids.length + 8, batchSize: 512 });
const seq = context.getSequence();
const res = await seq.controlledEvaluate(
  ids.map((t) => [t, { generateNext: { token: true, options: { temperature: 0 } } }]));
const llamaTop = res.map((r) => r?.next?.token);
await context.dispose();

const dir = mkdtempSync(join(tmpdir(), "orchid-top1-"));
const result = { what: "top-1 agreement, orchid vs llama.cpp on one GGUF (scripts/peer/gguf_top1.mjs)",
  gguf, text: textFile, positions: ids.length, llama_cpp: llama.llamaCppRelease, node_llama_cpp: "3.22.1",
  bar: 0.95 };
for (const path of ["fast", "exact"]) {
  const npy = join(dir, `${path}.npy`);
  execFileSync(orchid, ["logits", "-m", gguf, "--backend", "cpu", "--tokens", ids.join(","),
    "--out", npy, ...(path === "exact" ? ["--exact"] : [])], { stdio: ["ignore", "ignore", "inherit"] });
  const top = npyArgmax(npy);
  let agree = 0;
  for (let i = 0; i < ids.length; ++i) agree += top[i] === llamaTop[i] ? 1 : 0;
  result[`orchid_${path}_top1_agreement`] = agree / ids.length;
  console.log(`${path}: ${agree} of ${ids.length} positions agree (${(100 * agree / ids.length).toFixed(2)} %)`);
}
writeFileSync(out, JSON.stringify(result, null, 2) + "\n");
await model.dispose();
await llama.dispose();
