// Server hardening on the demo model (CPU backend), where a long prompt's prefill takes
// seconds: a client that leaves during its prefill frees the model within about one chunk;
// SIGTERM during a prefill and during a decode gives every open request an answer that says it
// was cut (an error event in a stream, a 503 otherwise, never finish_reason "stop") and exits
// 0 within 5 s. Then the process-level items: the warning for a non-loopback --host without
// --api-key, --cors preflights, and the memory a large request leaves behind.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';

import {
  ORCHID, REASONING_REPLY, REPO, makeModel, parseSse, postJson, rawRequest, sleep, startServer, stopAllServers,
} from './helpers.mjs';

const DEMO = path.join(REPO, 'models/orchid-demo');

after(async () => {
  await stopAllServers();
});

// A prompt of about `words` × 3.3 tokens of the demo tokenizer (numbers split into digits).
function longText(words) {
  const vocab = 'the of a orchid flower garden river mountain light quick brown fox jumps over lazy dog'.split(' ');
  let seed = 1;
  const out = [];
  for (let i = 0; i < words; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    out.push(vocab[seed % vocab.length] + (seed % 97));
  }
  return out.join(' ');
}

const chat = (content, extra = {}) => ({
  model: 'orchid-demo', messages: [{ role: 'user', content }], max_tokens: 8, temperature: 0, ...extra,
});

// A request whose answer is read as it comes: {response: Promise<{status, text}>, abort()}.
function openRequest(srv, body) {
  let req;
  const response = new Promise((resolve) => {
    const data = JSON.stringify(body);
    req = http.request(`${srv.url}/v1/chat/completions`, {
      method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', (e) => resolve({ status: res.statusCode, text, error: e.code || e.message }));
    });
    req.on('error', (e) => resolve({ status: 0, text: '', error: e.code || e.message }));
    req.end(data);
  });
  return { response, abort: () => req.destroy() };
}

// Seconds a short non-streamed request takes from sending to its answer.
async function shortRequestSeconds(srv, content = 'What does orchid mean?') {
  const t0 = performance.now();
  const r = await postJson(srv, '/v1/chat/completions', chat(content, { max_tokens: 1 }));
  assert.equal(r.status, 200, r.text);
  return (performance.now() - t0) / 1000;
}

// A stream's answer was cut and says so: an error event, then [DONE], no finish "stop".
function assertCutStream(r, what) {
  assert.equal(r.status, 200, `${what}: ${JSON.stringify(r)}`);
  const events = parseSse(r.text);
  assert.equal(events.at(-1), '[DONE]', `${what}: ${r.text.slice(-500)}`);
  const errors = events.filter((e) => e !== '[DONE]' && e.error);
  assert.equal(errors.length, 1, `${what}: ${r.text.slice(-500)}`);
  assert.equal(errors[0].error.code, 'server_shutting_down', what);
  assert.ok(!/"finish_reason":"stop"/.test(r.text), `${what}: passed off as finished: ${r.text.slice(-500)}`);
}

test('a client that leaves during a long prefill frees the model within about one chunk', async () => {
  const srv = await startServer({ modelDir: DEMO, backend: 'cpu', ctx: 16384 });
  await shortRequestSeconds(srv); // warm
  const alone = await shortRequestSeconds(srv);
  // One prefill chunk's time: a 256-token prompt (the CPU backend's chunk) alone.
  const chunk = await shortRequestSeconds(srv, longText(78));
  const long = openRequest(srv, chat(longText(2000), { stream: true }));
  await sleep(700); // well inside its prefill (several seconds)
  long.abort();
  const t0 = performance.now();
  const after = await shortRequestSeconds(srv);
  const waited = (performance.now() - t0) / 1000;
  assert.ok(waited <= alone + chunk + 0.5,
    `the next request took ${waited.toFixed(2)} s (alone ${alone.toFixed(2)} s, one chunk ${chunk.toFixed(2)} s)`);
  assert.ok(after > 0);
  await srv.stop();
});

test('SIGTERM during a prefill: the running and queued streams get an error event, a queued request a 503; exit 0 within 5 s', async () => {
  const srv = await startServer({ modelDir: DEMO, backend: 'cpu', ctx: 16384 });
  const running = openRequest(srv, chat(longText(2000), { stream: true }));
  await sleep(300);
  const queuedStream = openRequest(srv, chat('hi', { stream: true }));
  const queuedPlain = openRequest(srv, chat('hello'));
  await sleep(400);
  const t0 = performance.now();
  const stopped = srv.stop(5000);
  const [a, b, c] = await Promise.all([running.response, queuedStream.response, queuedPlain.response]);
  const r = await stopped;
  assert.ok(r.graceful && (performance.now() - t0) < 5000, `exit took too long: ${JSON.stringify(r)}`);
  assert.equal(r.code, 0, srv.describe());
  assertCutStream(a, 'the stream in prefill');
  assertCutStream(b, 'the queued stream');
  assert.equal(c.status, 503, `the queued request: ${JSON.stringify(c)}`);
  assert.equal(JSON.parse(c.text).error.code, 'server_shutting_down');
});

test('SIGTERM during a decode: the stream gets an error event after its tokens; exit 0 within 5 s', async () => {
  // The tiny random model practically never picks its end-of-sequence id: it decodes on.
  const srv = await startServer({ modelDir: makeModel(), backend: 'cpu' });
  const s = openRequest(srv, chat('What does garden mean?', { stream: true, max_tokens: 4000 }));
  // Let some tokens arrive, then stop.
  await sleep(1000);
  const r = await srv.stop(5000);
  const a = await s.response;
  assert.ok(r.graceful, srv.describe());
  assert.equal(r.code, 0, srv.describe());
  assertCutStream(a, 'the decoding stream');
  assert.ok(parseSse(a.text).some((e) => e.choices?.[0]?.delta?.content || e.choices?.[0]?.delta?.reasoning_content),
    'no token arrived before the stop');
});

test('--host 0.0.0.0 without --api-key warns; with a key it does not', async () => {
  const modelDir = makeModel();
  const start = (args) => new Promise((resolve) => {
    const p = spawn(ORCHID, ['serve', '-m', modelDir, '--port', '0', '--host', '0.0.0.0', '--backend', 'scripted',
      '--script', path.join(modelDir, 'none.json'), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => {
      stderr += d;
      if (stderr.includes('listening on')) setTimeout(() => p.kill('SIGKILL'), 100);
    });
    p.on('exit', () => resolve(stderr));
  });
  await import('node:fs').then((fs) => fs.writeFileSync(path.join(modelDir, 'none.json'), JSON.stringify({ replies: ['x'] })));
  const open = await start([]);
  assert.match(open, /warning: listening on 0\.0\.0\.0 without --api-key/, open);
  const keyed = await start(['--api-key', 'k']);
  assert.ok(keyed.includes('listening on') && !keyed.includes('warning'), keyed);
});

test('--cors answers browser preflights for the allowed origin only', async () => {
  const srv = await startServer({ modelDir: makeModel(), backend: 'scripted', script: [REASONING_REPLY], apiKey: 'k',
    extraArgs: ['--cors', 'http://localhost:5173'] });
  const pre = await rawRequest(srv, { method: 'OPTIONS', path: '/v1/chat/completions', auth: false, headers: {
    origin: 'http://localhost:5173', 'access-control-request-method': 'POST',
    'access-control-request-headers': 'authorization,content-type' } });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers['access-control-allow-origin'], 'http://localhost:5173');
  assert.match(pre.headers['access-control-allow-methods'], /POST/);
  assert.equal(pre.headers['access-control-allow-headers'], 'authorization,content-type');
  const other = await rawRequest(srv, { method: 'OPTIONS', path: '/v1/chat/completions', auth: false,
    headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' } });
  assert.equal(other.headers['access-control-allow-origin'], undefined);
  const head = await rawRequest(srv, { method: 'HEAD', path: '/health', auth: false });
  assert.equal(head.status, 200);
  assert.equal(head.text, '');
});

test('a large request leaves no lasting memory behind', async () => {
  const srv = await startServer({ modelDir: makeModel(), backend: 'scripted', script: [REASONING_REPLY] });
  const small = () => rawRequest(srv, { path: '/apply-template', body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }) });
  for (let i = 0; i < 5; i++) assert.equal((await small()).status, 200);
  const base = srv.rssKb();
  const big = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(7 << 20) }] });
  for (let i = 0; i < 3; i++) {
    const r = await rawRequest(srv, { path: '/apply-template', body: big });
    assert.equal(r.status, 200, r.text.slice(0, 300));
  }
  await small();
  const grown = (srv.rssKb() - base) / 1024;
  assert.ok(grown < 24, `resident memory grew ${grown.toFixed(1)} MiB over ${(base / 1024).toFixed(1)} MiB after 7 MiB requests`);
});
