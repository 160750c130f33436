// Server lifecycle: the "listening" line, GET /health (503 while loading, then 200, never
// back), a clean exit on SIGTERM, and start-up errors (missing model, port in use) that exit
// non-zero with a message instead of hanging.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, test } from 'node:test';

import {
  ORCHID, REASONING_REPLY, makeModel, makeTempDir, modelId, startServer, stopAllServers, writeScript,
} from './helpers.mjs';

let modelDir;

before(() => {
  modelDir = makeModel();
});

after(async () => {
  await stopAllServers();
});

// Runs orchid with args; resolves {code, signal, stderr} or kills it after ms.
function runOrchid(args, ms = 20000) {
  return new Promise((resolve) => {
    const p = spawn(ORCHID, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), ms);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr });
    });
  });
}

test('listening line, /health 503 then 200 (never 200 then 503), SIGTERM exits cleanly', async () => {
  const srv = await startServer({ modelDir, backend: 'cpu' });
  assert.ok(srv.stderr.includes(`orchid: listening on http://127.0.0.1:${srv.port}`), srv.stderr);
  // healthLog: the statuses seen while starting, deduplicated (0 = nothing listening yet).
  const log = srv.healthLog;
  assert.equal(log.at(-1), 200, JSON.stringify(log));
  for (const s of log) assert.ok([0, 503, 200].includes(s), `unexpected /health status while starting: ${JSON.stringify(log)}`);
  assert.ok(log.indexOf(200) === log.length - 1, `/health went back from 200: ${JSON.stringify(log)}`);
  // Loading the tokenizer alone takes a few hundred ms, and /health is polled every 20-50 ms.
  assert.ok(log.includes(503), `/health was never 503 while the model loaded: ${JSON.stringify(log)}`);
  const h = await srv.health();
  assert.equal(h.status, 200);
  const r = await srv.stop(5000);
  assert.ok(r.graceful, 'the server did not exit within 5 s of SIGTERM');
  assert.ok(r.code === 0 || r.signal === 'SIGTERM', `exit after SIGTERM: ${JSON.stringify(r)}; ${srv.describe()}`);
});

test('SIGTERM during a streaming request still exits within 5 s', async () => {
  const srv = await startServer({ modelDir, backend: 'cpu' });
  const stream = await srv.client().chat.completions.create({
    model: await modelId(srv), messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 4000,
  });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  const r = await srv.stop(5000);
  assert.ok(r.graceful, 'the server did not exit within 5 s of SIGTERM while generating');
  await it.return?.().catch(() => {});
});

test('a missing model directory: non-zero exit with a message', async () => {
  const r = await runOrchid(['serve', '-m', `${makeTempDir()}/nope`, '--port', '0', '--host', '127.0.0.1']);
  assert.notEqual(r.code, 0, `exit ${JSON.stringify(r)}`);
  assert.equal(r.signal, null, `it hung and was killed: ${r.stderr}`);
  assert.match(r.stderr, /orchid: error:/, r.stderr);
});

test('a port in use: non-zero exit with a message', async () => {
  const blocker = net.createServer();
  await new Promise((res) => blocker.listen(0, '127.0.0.1', res));
  const port = blocker.address().port;
  try {
    const r = await runOrchid(['serve', '-m', modelDir, '--port', String(port), '--host', '127.0.0.1',
      '--backend', 'scripted', '--script', writeScript([REASONING_REPLY])]);
    assert.notEqual(r.code, 0, `exit ${JSON.stringify(r)}`);
    assert.equal(r.signal, null, `it hung and was killed: ${r.stderr}`);
    assert.match(r.stderr, /orchid: error:/, r.stderr);
  } finally {
    blocker.close();
  }
});

test('the scripted backend without --script, and a bad script: non-zero exit with a message', async () => {
  const r = await runOrchid(['serve', '-m', modelDir, '--port', '0', '--backend', 'scripted']);
  assert.notEqual(r.code, 0);
  assert.equal(r.signal, null, `it hung and was killed: ${r.stderr}`);
  const bad = `${makeTempDir()}/bad.json`;
  fs.writeFileSync(bad, '{"replies": "not an array"}');
  const r2 = await runOrchid(['serve', '-m', modelDir, '--port', '0', '--backend', 'scripted', '--script', bad]);
  assert.notEqual(r2.code, 0);
  assert.equal(r2.signal, null, `it hung and was killed: ${r2.stderr}`);
  assert.match(r2.stderr, /orchid: error:/, r2.stderr);
});
