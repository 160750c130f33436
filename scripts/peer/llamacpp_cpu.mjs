// llama.cpp on this CPU through node-llama-cpp (its prebuilt CPU build picks the ggml-cpu
// variant for this CPU): prefill of N random tokens, then M greedy decode steps, as
// `orchid bench` measures them. Prints one JSON object.
//   node scripts/peer/llamacpp_cpu.mjs FILE.gguf --prefill 512 --decode 32 --threads 2 [--repeat 2]
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf("--" + name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const file = args[0];
const nPrefill = opt("prefill", 512), nDecode = opt("decode", 32);
const threads = opt("threads", 2), repeat = opt("repeat", 2);

const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
const t0 = performance.now();
const model = await llama.loadModel({ modelPath: file, gpuLayers: 0, useMmap: true });
const loadS = (performance.now() - t0) / 1000;
let x = 12345n;
const random = () => {
  x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
  return Number(x >> 33n);
};
const vocab = model.fileInfo.tensorInfo.find((t) => t.name === "token_embd.weight").dimensions[1];
const out = { engine: "llama.cpp", node_llama_cpp: "3.22.1", llama_cpp: llama.llamaCppRelease, file,
  threads, load_s: loadS, prefill_tokens: nPrefill, decode_tokens: nDecode, runs: [] };
for (let r = 0; r < repeat; ++r) {
  const context = await model.createContext({ contextSize: nPrefill + nDecode + 8,
    batchSize: Math.min(nPrefill, 512), threads, sequences: 1 });
  const seq = context.getSequence();
  const prompt = Array.from({ length: nPrefill }, () => 3 + (random() % (Number(vocab) - 3)));
  let t = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt);
  const prefillS = (performance.now() - t) / 1000;
  let n = 0;
  t = performance.now();
  for await (const tok of seq.evaluate([prompt[prompt.length - 1]], { temperature: 0 })) {
    if (++n >= nDecode) break;
  }
  const decodeS = (performance.now() - t) / 1000;
  out.runs.push({ prefill_tok_s: nPrefill / prefillS, decode_tok_s: n / decodeS });
  await context.dispose();
}
out.prefill_tok_s = Math.max(...out.runs.map((r) => r.prefill_tok_s));
out.decode_tok_s = Math.max(...out.runs.map((r) => r.decode_tok_s));
console.log(JSON.stringify(out));
await model.dispose();
await llama.dispose();
