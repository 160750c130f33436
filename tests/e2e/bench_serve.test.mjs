// `orchid bench serve` against a running server (the demo-size random model, CPU backend, two
// slots): each (prompt length, streams) case comes back with its streams' tokens, prompt lengths
// near the asked ones, positive times to first token, and the JSON it writes; a dead server and
// a bad --url are clear errors.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { ORCHID, freePort, makeModel, makeTempDir, startServer, stopAllServers } from './helpers.mjs';

let modelDir;
let srv;

before(async () => {
  modelDir = makeModel();
  srv = await startServer({ modelDir, extraArgs: ['--parallel', '2'] });
});

after(async () => {
  await stopAllServers();
});

test('bench serve measures every case and writes its JSON', () => {
  const out = path.join(makeTempDir(), 'serve.json');
  const stdout = execFileSync(ORCHID, ['bench', 'serve', '--url', `http://127.0.0.1:${srv.port}`,
    '--streams', '1,2', '--prompt-tokens', '100,400', '--max-tokens', '6', '--out', out],
  { encoding: 'utf8', timeout: 120000 });
  assert.match(stdout, /aggregate tok\/s/);
  const j = JSON.parse(fs.readFileSync(out, 'utf8'));
  assert.equal(j.what, 'orchid bench serve');
  assert.equal(j.cases.length, 4);
  for (const [i, c] of j.cases.entries()) {
    const asked = i < 2 ? 100 : 400;
    assert.equal(c.streams, i % 2 ? 2 : 1);
    assert.equal(c.completion_tokens, 6 * c.streams, JSON.stringify(c));
    assert.ok(c.prompt_tokens > asked * 0.7 && c.prompt_tokens < asked * 1.3, `prompt ${c.prompt_tokens} for ${asked}`);
    assert.equal(c.time_to_first_token_s.length, c.streams);
    for (const t of c.time_to_first_token_s) assert.ok(t > 0 && t < c.seconds, String(t));
    assert.ok(c.aggregate_tok_s > 0);
  }
});

test('bench serve says why it cannot measure', async () => {
  const port = await freePort(); // nobody listens there
  const dead = spawnSync(ORCHID, ['bench', 'serve', '--url', `http://127.0.0.1:${port}`, '--streams', '1',
    '--prompt-tokens', '10', '--max-tokens', '2'], { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(dead.status, 0);
  assert.match(dead.stderr, /cannot connect/);
  const bad = spawnSync(ORCHID, ['bench', 'serve', '--url', 'localhost'], { encoding: 'utf8', timeout: 30000 });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--url/);
});
