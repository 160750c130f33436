// Load: 8 concurrent clients × 25 requests (streaming, non-streaming, aborted mid-stream)
// against the scripted backend: no server errors, every completed response well formed, all
// within a minute, and the resident memory after the run within 5% of after the first round.
// Then the state cache's byte bound under load, and the queue limit: with --max-queue 1 the
// overflow is answered 503 (and nothing else fails).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  REASONING_REPLY, TOOL_REPLY, WEATHER_TOOL, checkErrorShape, checkUsage, collectStream, makeModel,
  modelId, postJson, probe, startServer, stopAllServers,
} from './helpers.mjs';

const CLIENTS = 8;
const REQUESTS = 25; // per client

let modelDir;
let srv;
let model;

before(async () => {
  modelDir = makeModel();
  // A queue no load here can fill: no 503. The state cache off: it is a store meant to grow to
  // its bound (checked below), and would hide whether anything else grows.
  srv = await startServer({ modelDir, backend: 'scripted', script: [REASONING_REPLY, TOOL_REPLY], maxQueue: 10000,
    extraArgs: ['--state-cache-mb', '0'] });
  model = await modelId(srv);
});

after(async () => {
  await stopAllServers();
});

// A completed reply is one of the two scripted ones, whole.
function checkReply({ reasoning, content, toolCalls, finishReason }, what) {
  if (finishReason === 'tool_calls') {
    assert.equal(toolCalls.length, 1, `${what}: ${JSON.stringify(toolCalls)}`);
    assert.equal(toolCalls[0].type, 'function', what);
    assert.ok(toolCalls[0].id, `${what}: tool call id`);
    assert.equal(toolCalls[0].function.name, 'get_weather', what);
    assert.deepEqual(JSON.parse(toolCalls[0].function.arguments), { city: 'Paris', days: 3 }, what);
    assert.ok(!content, `${what}: content ${JSON.stringify(content)}`);
  } else {
    assert.equal(finishReason, 'stop', `${what}: finish_reason`);
    assert.equal(reasoning, 'Let me think.', `${what}: reasoning`);
    assert.equal(content, 'Hello there!', `${what}: content`);
    assert.ok(!toolCalls || toolCalls.length === 0, `${what}: tool calls`);
  }
}

async function oneRequest(client, kind, what, stats) {
  const body = {
    model,
    messages: [{ role: 'user', content: `${what}: what is the weather in Paris?` }],
    tools: [WEATHER_TOOL],
  };
  try {
    if (kind === 0) {
      const r = await client.chat.completions.create(body);
      assert.equal(r.object, 'chat.completion', what);
      assert.equal(r.choices.length, 1, what);
      checkUsage(assert, r.usage, what);
      const m = r.choices[0].message;
      checkReply({ reasoning: m.reasoning_content, content: m.content, toolCalls: m.tool_calls ?? [],
        finishReason: r.choices[0].finish_reason }, what);
      stats.completed++;
    } else if (kind === 1) {
      const s = await collectStream(await client.chat.completions.create({
        ...body, stream: true, stream_options: { include_usage: true } }));
      assert.equal(s.ids.size, 1, what);
      checkUsage(assert, s.usage, what);
      checkReply(s, what);
      stats.completed++;
    } else {
      const ac = new AbortController();
      const stream = await client.chat.completions.create({ ...body, stream: true }, { signal: ac.signal });
      for await (const _ of stream) {
        ac.abort(); // after the first chunk, and stop reading (ABORT_NOTE in helpers.mjs)
        break;
      }
      stats.aborted++;
    }
  } catch (e) {
    if (e?.status >= 500) stats.serverErrors.push(`${what}: ${e.status} ${e.message}`);
    else if (e?.status) stats.clientErrors.push(`${what}: ${e.status} ${e.message}`);
    else stats.failures.push(`${what}: ${e?.stack ?? e}`);
  }
}

// The run: round 1 is one request from every client at once; then each client runs its other
// REQUESTS - 1 requests freely. VmRSS is read after round 1 and after the run.
const run = { stats: null, rssAfterFirstRound: 0, rssAfterRun: 0, elapsed: 0 };

test(`${CLIENTS} clients × ${REQUESTS} requests: no server errors, every response well formed, under 60 s`, { timeout: 90000 }, async () => {
  const t0 = Date.now();
  const stats = { completed: 0, aborted: 0, serverErrors: [], clientErrors: [], failures: [] };
  run.stats = stats;
  const clients = Array.from({ length: CLIENTS }, () => srv.client());
  await Promise.all(clients.map((client, c) => oneRequest(client, c % 3, `client ${c} request 0`, stats)));
  run.rssAfterFirstRound = srv.rssKb();
  await Promise.all(clients.map(async (client, c) => {
    for (let i = 1; i < REQUESTS; i++) await oneRequest(client, (c + i) % 3, `client ${c} request ${i}`, stats);
  }));
  run.rssAfterRun = srv.rssKb();
  run.elapsed = Date.now() - t0;
  console.log(`load: ${stats.completed} completed, ${stats.aborted} aborted in ${run.elapsed} ms; ` +
    `VmRSS ${run.rssAfterFirstRound} kB after round 1, ${run.rssAfterRun} kB after the run`);
  const all = [...stats.serverErrors, ...stats.clientErrors, ...stats.failures];
  assert.deepEqual(all, [], `${all.length} failed requests`);
  assert.equal(stats.completed + stats.aborted, CLIENTS * REQUESTS);
  assert.ok(run.elapsed < 60000, `the run took ${run.elapsed} ms`);
  const h = await srv.health();
  assert.equal(h.status, 200, srv.describe());
  const r = await srv.client().chat.completions.create({ model, messages: [{ role: 'user', content: 'still there?' }] });
  assert.ok(['stop', 'tool_calls'].includes(r.choices[0].finish_reason));
});

test('VmRSS after the run is within 5% of after the first round', () => {
  assert.ok(run.rssAfterFirstRound > 0 && run.rssAfterRun > 0, 'the load run did not complete');
  const growth = run.rssAfterRun / run.rssAfterFirstRound - 1;
  assert.ok(growth <= 0.05, `VmRSS grew ${(growth * 100).toFixed(1)}%: ${run.rssAfterFirstRound} kB after round 1, ` +
    `${run.rssAfterRun} kB after ${CLIENTS * REQUESTS} requests`);
});

test('the state cache stays within --state-cache-mb under load', { timeout: 60000 }, async () => {
  // Long distinct prompts: 200 requests want ~10 MiB of snapshots; the bound is 1 MiB.
  const capped = await startServer({ modelDir, backend: 'scripted', script: [REASONING_REPLY], extraArgs: ['--state-cache-mb', '1'] });
  try {
    const pad = ' The weather in Paris in May is mild.'.repeat(150);
    const clients = Array.from({ length: 4 }, () => capped.client());
    await Promise.all(clients.map(async (client, c) => {
      for (let i = 0; i < 50; i++) {
        const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: `${c}/${i}${pad}` }] });
        assert.equal(r.choices[0].message.content, 'Hello there!');
      }
    }));
    const m = await probe(`${capped.url}/metrics`);
    const gauge = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(m.text)?.[1]);
    const bytes = gauge('orchid_state_cache_bytes');
    const entries = gauge('orchid_state_cache_entries');
    assert.ok(Number.isFinite(bytes) && Number.isFinite(entries), `no cache gauges in /metrics:\n${m.text}`);
    assert.ok(bytes <= 1 << 20, `orchid_state_cache_bytes ${bytes} > 1 MiB`);
    assert.ok(entries > 0 && bytes > (1 << 20) / 2, `the cache should be near full: ${bytes} bytes, ${entries} entries`);
    // The host tier is the GPU's: the scripted backend's snapshots live in host memory already.
    assert.equal(gauge('orchid_state_cache_host_entries'), 0, `host tier gauges:\n${m.text}`);
    assert.equal(gauge('orchid_state_cache_host_bytes'), 0);
  } finally {
    await capped.stop();
  }
});

test('--max-queue 1: overflowing requests get 503 in the error shape, the rest succeed', { timeout: 90000 }, async () => {
  // --parallel 1: one request runs at a time, so the queue fills.
  const small = await startServer({ modelDir, backend: 'cpu', maxQueue: 1, extraArgs: ['--parallel', '1'] });
  try {
    const N = 6;
    const body = { model, messages: [{ role: 'user', content: 'count to a hundred' }], max_tokens: 24, temperature: 0 };
    const results = await Promise.all(Array.from({ length: N }, () => postJson(small, '/v1/chat/completions', body)));
    const statuses = results.map((r) => r.status);
    for (const r of results) {
      assert.ok([200, 503].includes(r.status), `status ${r.status}: ${r.text.slice(0, 300)}`);
      if (r.status === 503) checkErrorShape(assert, r.json, '503');
      else assert.ok(r.json.choices[0].finish_reason, 'a 200 is a whole completion');
    }
    // One runs and one waits; at least 1 of the other 4 is refused, and no more than N - 1.
    assert.ok(statuses.includes(200), `statuses ${statuses}`);
    assert.ok(statuses.includes(503), `statuses ${statuses}: nothing was refused with --max-queue 1`);
    assert.ok(statuses.filter((s) => s === 200).length <= 2 + 1, `statuses ${statuses}: more than 2 (+1 race) accepted`);
    assert.equal((await small.health()).status, 200);
  } finally {
    await small.stop();
  }
});
