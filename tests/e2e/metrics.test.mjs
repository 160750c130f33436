// GET /metrics is valid Prometheus text exposition format (0.0.4), checked by a small strict
// parser: HELP/TYPE lines, samples `name{labels} value [timestamp]`, families contiguous and
// declared before their samples, no duplicate series, counters non-negative, histograms with
// ascending `le` buckets ending at +Inf, cumulative counts, _count = the +Inf bucket, _sum.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { REASONING_REPLY, makeModel, modelId, postJson, probe, startServer, stopAllServers } from './helpers.mjs';

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(s, where) {
  if (s === '+Inf' || s === 'Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  if (s === 'NaN') return NaN;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) throw new Error(`${where}: bad value ${JSON.stringify(s)}`);
  return Number(s);
}

// Parses `{a="x",b="y"}` starting at text[i] === '{'; returns [labels, next index].
function parseLabels(text, i, where) {
  const labels = {};
  i++;
  for (;;) {
    if (text[i] === '}') return [labels, i + 1];
    const m = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i));
    if (!m) throw new Error(`${where}: bad label name at ${JSON.stringify(text.slice(i))}`);
    const name = m[0];
    i += name.length;
    if (text[i] !== '=' || text[i + 1] !== '"') throw new Error(`${where}: expected =" after label ${name}`);
    i += 2;
    let value = '';
    for (;;) {
      if (i >= text.length) throw new Error(`${where}: unterminated label value`);
      const c = text[i];
      if (c === '"') break;
      if (c === '\\') {
        const n = text[i + 1];
        if (n === '\\') value += '\\';
        else if (n === '"') value += '"';
        else if (n === 'n') value += '\n';
        else throw new Error(`${where}: bad escape \\${n} in a label value`);
        i += 2;
      } else {
        value += c;
        i++;
      }
    }
    i++;
    if (name in labels) throw new Error(`${where}: label ${name} repeated`);
    labels[name] = value;
    if (text[i] === ',') i++;
    else if (text[i] !== '}') throw new Error(`${where}: expected , or } after label ${name}`);
  }
}

// Returns {families: Map name → {type, help, samples: [{name, labels, value}]}}; throws on error.
export function parsePrometheus(text) {
  if (text.length > 0 && !text.endsWith('\n')) throw new Error('the exposition must end with a newline');
  const families = new Map();
  const closed = new Set(); // families whose samples ended (another family's began)
  let current = null; // the family of the last sample
  const series = new Set();
  const familyOf = (sample) => {
    if (families.has(sample)) return sample;
    for (const suffix of ['_bucket', '_sum', '_count']) {
      if (sample.endsWith(suffix)) {
        const base = sample.slice(0, -suffix.length);
        const f = families.get(base);
        if (f && (f.type === 'histogram' || (f.type === 'summary' && suffix !== '_bucket'))) return base;
      }
    }
    return null;
  };
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  lines.forEach((line, n) => {
    const where = `line ${n + 1} ${JSON.stringify(line)}`;
    if (line.trim() === '') return;
    if (line.startsWith('#')) {
      const m = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(line);
      if (!m) return; // a plain comment
      const [, kind, name, rest = ''] = m;
      if (!NAME.test(name)) throw new Error(`${where}: bad metric name`);
      if (closed.has(name) || (current && current !== name && families.get(name)?.samples.length))
        throw new Error(`${where}: ${kind} after the family's samples`);
      const f = families.get(name) ?? { type: 'untyped', typed: false, help: null, samples: [] };
      families.set(name, f);
      if (f.samples.length) throw new Error(`${where}: ${kind} after the family's samples`);
      if (kind === 'HELP') {
        if (f.help !== null) throw new Error(`${where}: second HELP for ${name}`);
        if (/\\[^\\n]/.test(rest.replace(/\\\\/g, ''))) throw new Error(`${where}: bad escape in HELP`);
        f.help = rest;
      } else {
        if (f.typed) throw new Error(`${where}: second TYPE for ${name}`);
        if (!TYPES.has(rest.trim()) || rest !== rest.trim()) throw new Error(`${where}: bad type ${JSON.stringify(rest)}`);
        f.type = rest;
        f.typed = true;
      }
      return;
    }
    const m = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
    if (!m) throw new Error(`${where}: bad metric name`);
    const name = m[0];
    let i = name.length;
    let labels = {};
    if (line[i] === '{') [labels, i] = parseLabels(line, i, where);
    const rest = line.slice(i);
    const vm = /^ (\S+)(?: (-?\d+))?$/.exec(rest);
    if (!vm) throw new Error(`${where}: expected " value [timestamp]" after the name and labels`);
    const value = parseValue(vm[1], where);
    const fam = familyOf(name);
    if (!fam) throw new Error(`${where}: sample ${name} of no declared family (TYPE missing)`);
    const f = families.get(fam);
    if (!f.typed) throw new Error(`${where}: family ${fam} has no TYPE line`);
    if (current !== fam) {
      if (closed.has(fam)) throw new Error(`${where}: the samples of ${fam} are not contiguous`);
      if (current) closed.add(current);
      current = fam;
    }
    const key = name + JSON.stringify(Object.entries(labels).sort());
    if (series.has(key)) throw new Error(`${where}: duplicate series`);
    series.add(key);
    if ((f.type === 'counter' || f.type === 'gauge' || f.type === 'untyped') && name !== fam)
      throw new Error(`${where}: sample name ${name} for ${f.type} ${fam}`);
    if (f.type === 'counter' && !(value >= 0)) throw new Error(`${where}: counter value ${value}`);
    if (f.type === 'histogram' && name === `${fam}_bucket` && !('le' in labels)) throw new Error(`${where}: bucket without le`);
    if (f.type !== 'histogram' && 'le' in labels) throw new Error(`${where}: le label outside a histogram`);
    if (f.type === 'histogram' && name === fam) throw new Error(`${where}: a bare histogram sample`);
    f.samples.push({ name, labels, value, where });
  });
  for (const [fam, f] of families) {
    if (f.type === 'histogram') checkHistogram(fam, f);
    if (f.type === 'summary') checkSummary(fam, f);
  }
  return { families };
}

function groupBy(samples, drop) {
  const groups = new Map();
  for (const s of samples) {
    const rest = Object.entries(s.labels).filter(([k]) => k !== drop).sort();
    const key = JSON.stringify(rest);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(s);
  }
  return groups;
}

function checkHistogram(fam, f) {
  for (const [key, samples] of groupBy(f.samples, 'le')) {
    const buckets = samples.filter((s) => s.name === `${fam}_bucket`);
    const sum = samples.filter((s) => s.name === `${fam}_sum`);
    const count = samples.filter((s) => s.name === `${fam}_count`);
    const what = `histogram ${fam}${key}`;
    if (buckets.length === 0) throw new Error(`${what}: no buckets`);
    if (sum.length !== 1) throw new Error(`${what}: ${sum.length} _sum samples`);
    if (count.length !== 1) throw new Error(`${what}: ${count.length} _count samples`);
    let prevLe = -Infinity;
    let prevCount = 0;
    for (const b of buckets) {
      const le = parseValue(b.labels.le, `${what} le`);
      if (!(le > prevLe)) throw new Error(`${what}: le ${b.labels.le} not ascending`);
      if (!Number.isInteger(b.value) || b.value < prevCount) throw new Error(`${what}: bucket le=${b.labels.le} count ${b.value} not cumulative`);
      prevLe = le;
      prevCount = b.value;
    }
    if (prevLe !== Infinity) throw new Error(`${what}: the last bucket is not le="+Inf"`);
    if (count[0].value !== prevCount) throw new Error(`${what}: _count ${count[0].value} != +Inf bucket ${prevCount}`);
    if (Number.isNaN(sum[0].value)) throw new Error(`${what}: _sum is NaN`);
  }
}

function checkSummary(fam, f) {
  for (const [key, samples] of groupBy(f.samples, 'quantile')) {
    const what = `summary ${fam}${key}`;
    if (samples.filter((s) => s.name === `${fam}_sum`).length !== 1) throw new Error(`${what}: _sum`);
    if (samples.filter((s) => s.name === `${fam}_count`).length !== 1) throw new Error(`${what}: _count`);
    for (const q of samples.filter((s) => s.name === fam)) {
      const v = parseValue(q.labels.quantile ?? 'x', `${what} quantile`);
      if (!(v >= 0 && v <= 1)) throw new Error(`${what}: quantile ${v}`);
    }
  }
}

// ---------------------------------------------------------------------------------------------

describe('the parser itself', () => {
  const good = [
    '# HELP a_total Requests.\n# TYPE a_total counter\na_total 3\n',
    '# TYPE g gauge\ng{x="a\\"b\\\\c\\n"} -1.5e3\ng{x="b"} NaN\n',
    '# TYPE h histogram\nh_bucket{le="0.1"} 1\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 3\nh_sum 1.7\nh_count 3\n',
    '# TYPE s summary\ns{quantile="0.5"} 1\ns_sum 2\ns_count 2\n',
    '',
  ];
  const bad = {
    'no trailing newline': '# TYPE a counter\na 1',
    'no TYPE': 'a 1\n',
    'negative counter': '# TYPE a counter\na -1\n',
    'bad value': '# TYPE a gauge\na one\n',
    'bad name': '# TYPE a gauge\n1a 1\n',
    'two TYPEs': '# TYPE a gauge\n# TYPE a gauge\na 1\n',
    'duplicate series': '# TYPE a gauge\na{x="1"} 1\na{x="1"} 2\n',
    'not contiguous': '# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x="2"} 1\n',
    'unterminated label': '# TYPE a gauge\na{x="1} 1\n',
    'no +Inf bucket': '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n',
    'count != +Inf': '# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n',
    'not cumulative': '# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 2\n',
    'le descending': '# TYPE h histogram\nh_bucket{le="2"} 1\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',
    'no _sum': '# TYPE h histogram\nh_bucket{le="+Inf"} 1\nh_count 1\n',
    'two spaces': '# TYPE a gauge\na  1\n',
    'TYPE after samples': '# TYPE a gauge\na 1\n# HELP a late\n',
  };
  test('accepts valid text', () => {
    for (const t of good) parsePrometheus(t);
  });
  for (const [name, t] of Object.entries(bad)) test(`rejects: ${name}`, () => assert.throws(() => parsePrometheus(t)));
});

describe('GET /metrics', () => {
  let srv;
  let model;
  before(async () => {
    srv = await startServer({ modelDir: makeModel(), backend: 'scripted', script: [REASONING_REPLY] });
    model = await modelId(srv);
  });
  after(async () => {
    await stopAllServers();
  });

  const scrape = async () => {
    const r = await probe(`${srv.url}/metrics`, { headers: srv.authHeaders() });
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers['content-type'], /^text\/plain/, 'content-type');
    return r;
  };

  test('parses strictly before and after traffic; samples change with requests', async () => {
    const before = parsePrometheus((await scrape()).text);
    assert.ok(before.families.size > 0, 'no metric families at all');
    const msgs = [{ role: 'user', content: 'hi' }];
    for (let i = 0; i < 3; i++) {
      const r = await postJson(srv, '/v1/chat/completions', { model, messages: msgs, stream: i === 1 });
      assert.equal(r.status, 200);
    }
    assert.equal((await postJson(srv, '/v1/chat/completions', { model, messages: [] })).status, 400);
    const text = (await scrape()).text;
    const afterTraffic = parsePrometheus(text);
    // Some histogram (latency, tokens, ...) has observations now, and some counter moved.
    const histos = [...afterTraffic.families].filter(([, f]) => f.type === 'histogram');
    assert.ok(histos.length > 0, `no histogram among ${[...afterTraffic.families.keys()]}`);
    assert.ok(histos.some(([fam, f]) => f.samples.some((s) => s.name === `${fam}_count` && s.value > 0)),
      `no histogram observed anything after 3 requests:\n${text}`);
    const counters = [...afterTraffic.families].filter(([, f]) => f.type === 'counter');
    const valueOf = (parsed, fam, s) =>
      parsed.families.get(fam)?.samples.find((x) => x.name === s.name && JSON.stringify(x.labels) === JSON.stringify(s.labels))?.value ?? 0;
    assert.ok(counters.some(([fam, f]) => f.samples.some((s) => s.value > valueOf(before, fam, s))),
      `no counter increased after 3 requests:\n${text}`);
    // Counters never go down.
    for (const [fam, f] of counters)
      for (const s of f.samples) assert.ok(s.value >= valueOf(before, fam, s), `counter ${s.name} went down`);
  });

  // orchid's own metric names (src/orchid/server/metrics.cpp): the token counters move by the
  // usage the responses report, the request counter by route and status.
  test('token and request counters agree with the responses', async () => {
    const value = (parsed, name, labels = {}) => {
      const f = parsed.families.get(name.replace(/_(bucket|sum|count)$/, '')) ?? parsed.families.get(name);
      assert.ok(f, `no metric family for ${name}`);
      const s = f.samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
      return s?.value ?? 0;
    };
    const names = ['orchid_prompt_tokens_total', 'orchid_cached_prompt_tokens_total', 'orchid_generation_tokens_total',
      'orchid_request_duration_seconds_count', 'orchid_time_to_first_token_seconds_count'];
    const chat200 = { route: '/v1/chat/completions', status: '200' };
    const chat400 = { route: '/v1/chat/completions', status: '400' };
    const before = parsePrometheus((await scrape()).text);
    let prompt = 0;
    let cached = 0;
    let completion = 0;
    const msgs = [{ role: 'user', content: 'count the requests' }];
    for (let i = 0; i < 4; i++) {
      const r = await postJson(srv, '/v1/chat/completions',
        { model, messages: msgs, stream: i % 2 === 1, stream_options: i % 2 ? { include_usage: true } : undefined });
      assert.equal(r.status, 200, r.text);
      const usage = i % 2 ? r.text.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6))).at(-1).usage : r.json.usage;
      prompt += usage.prompt_tokens;
      cached += usage.prompt_tokens_details.cached_tokens;
      completion += usage.completion_tokens;
    }
    assert.equal((await postJson(srv, '/v1/chat/completions', { model, messages: 'x' })).status, 400);
    const afterTraffic = parsePrometheus((await scrape()).text);
    const delta = (name, labels) => value(afterTraffic, name, labels) - value(before, name, labels);
    assert.equal(delta('orchid_prompt_tokens_total'), prompt, 'prompt tokens');
    assert.equal(delta('orchid_cached_prompt_tokens_total'), cached, 'cached prompt tokens');
    assert.ok(cached > 0, 'the repeated prompt was served from the state cache');
    assert.equal(delta('orchid_generation_tokens_total'), completion, 'generated tokens');
    assert.equal(delta('orchid_request_duration_seconds_count'), 4, 'request duration observations');
    assert.equal(delta('orchid_time_to_first_token_seconds_count'), 4, 'time-to-first-token observations');
    assert.equal(delta('orchid_http_requests_total', chat200), 4, 'chat 200s');
    assert.equal(delta('orchid_http_requests_total', chat400), 1, 'chat 400s');
    for (const n of names) assert.ok(value(afterTraffic, n) >= 0);
    // The slots: --parallel 4 by default; the one that served the repeated prompt holds it.
    assert.equal(value(afterTraffic, 'orchid_slots'), 4);
    const slots = afterTraffic.families.get('orchid_slot_tokens').samples;
    assert.equal(slots.length, 4);
    assert.ok(slots.some((s) => s.value > 0), JSON.stringify(slots));
    // The CPU backend picks on the host: no bursts of the batched on-device decode.
    for (const n of ['orchid_decode_bursts_total', 'orchid_decode_burst_lanes_total', 'orchid_decode_max_lanes'])
      assert.equal(value(afterTraffic, n), 0, n);
  });
});
