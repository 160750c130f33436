// Bad input: each request is answered with the right 4xx in the OpenAI error shape, and the
// server keeps serving (GET /health is 200 after each). The server runs the scripted backend
// with --api-key and --ctx 64, so every request but the auth tests carries the right key.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import {
  REASONING_REPLY, WEATHER_TOOL, checkErrorShape, makeModel, modelId, postJson, rawRequest, sendOversize, sleep,
  startServer, stopAllServers,
} from './helpers.mjs';

const KEY = 'sk-orchid-e2e-secret';
let srv;
let model;

before(async () => {
  const modelDir = makeModel();
  srv = await startServer({ modelDir, backend: 'scripted', script: [REASONING_REPLY], apiKey: KEY, ctx: 64 });
  model = await modelId(srv);
});

after(async () => {
  await stopAllServers();
});

const USER = [{ role: 'user', content: 'hi' }];

async function expectError(res, status, what) {
  assert.equal(res.status, status, `${what}: status ${res.status}, body ${String(res.text).slice(0, 300)}`);
  assert.match(res.headers?.['content-type'] ?? 'application/json', /^application\/json/, `${what}: content-type`);
  checkErrorShape(assert, res.json, what);
  const h = await srv.health();
  assert.equal(h.status, 200, `${what}: GET /health afterwards: ${h.status} ${h.error ?? ''}; ${srv.describe()}`);
}

const chatRaw = (body, extra) => rawRequest(srv, { path: '/v1/chat/completions', body, ...extra });

test('a good request works (the baseline for the rest)', async () => {
  const r = await postJson(srv, '/v1/chat/completions', { model, messages: USER });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, 'Hello there!');
});

describe('400: malformed JSON', () => {
  const bodies = {
    'truncated object': '{"model":"m","messages":[{"role":"user","content":"hi"}',
    'trailing garbage': '{"messages":[{"role":"user","content":"hi"}]} xyz',
    'not JSON at all': 'hello',
    'empty body': '',
    'single quotes': "{'messages': []}",
    'a lone surrogate escape': '{"messages":[{"role":"user","content":"\\ud800"}]}',
  };
  for (const [name, body] of Object.entries(bodies)) {
    test(name, async () => expectError(await chatRaw(body), 400, name));
  }
});

test('400: invalid UTF-8 bytes inside a JSON string', async () => {
  for (const bad of [[0xff], [0xc3], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0xf4, 0x90, 0x80, 0x80]]) {
    const body = Buffer.concat([
      Buffer.from('{"model":"m","messages":[{"role":"user","content":"ab'),
      Buffer.from(bad),
      Buffer.from('cd"}]}'),
    ]);
    await expectError(await chatRaw(body), 400, `bytes ${bad.map((b) => b.toString(16)).join(' ')}`);
  }
});

describe('400: wrong types and values', () => {
  const cases = {
    'body is an array': [1, 2],
    'body is a string': 'x',
    'body is null': null,
    'messages: "x"': { model, messages: 'x' },
    'messages missing': { model },
    'messages: []': { model, messages: [] },
    'messages: [1]': { model, messages: [1] },
    'a message without role': { model, messages: [{ content: 'hi' }] },
    'an unknown role': { model, messages: [{ role: 'wizard', content: 'hi' }] },
    'content: 5': { model, messages: [{ role: 'user', content: 5 }] },
    'max_tokens: "a"': { model, messages: USER, max_tokens: 'a' },
    'max_tokens: -1': { model, messages: USER, max_tokens: -1 },
    'max_tokens: 1.5': { model, messages: USER, max_tokens: 1.5 },
    'temperature: "hot"': { model, messages: USER, temperature: 'hot' },
    'temperature: -1': { model, messages: USER, temperature: -1 },
    'top_p: 1.5': { model, messages: USER, top_p: 1.5 },
    'stream: "yes"': { model, messages: USER, stream: 'yes' },
    'stop: 5': { model, messages: USER, stop: 5 },
    'tools: "x"': { model, messages: USER, tools: 'x' },
    'n: 17': { model, messages: USER, n: 17 },
    'n: 0 streaming': { model, messages: USER, n: 0, stream: true },
    'logit_bias: an id past the vocabulary': { model, messages: USER, logit_bias: { 99999999: 1 } },
    'response_format: an unsupported schema keyword': {
      model, messages: USER, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { not: {} } } },
    },
    'tool_choice: a function that is not among the tools': {
      model, messages: USER, tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'nope' } },
    },
  };
  for (const [name, body] of Object.entries(cases)) {
    test(name, async () => expectError(await postJson(srv, '/v1/chat/completions', body), 400, name));
  }

  test('n: 1 and 3 are fine', async () => {
    for (const n of [1, 3]) {
      const r = await postJson(srv, '/v1/chat/completions', { model, messages: USER, n });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices.length, n);
    }
  });

  test('/v1/completions: prompt missing, prompt: 5, n: 30', async () => {
    for (const body of [{ model }, { model, prompt: 5 }, { model, prompt: 'hi', n: 30 }])
      await expectError(await postJson(srv, '/v1/completions', body), 400, `completions ${JSON.stringify(body)}`);
  });

  test('/tokenize and /detokenize: wrong types', async () => {
    await expectError(await postJson(srv, '/tokenize', { prompt: 5 }), 400, 'tokenize prompt: 5');
    await expectError(await postJson(srv, '/detokenize', { tokens: 'x' }), 400, 'detokenize tokens: "x"');
    await expectError(await postJson(srv, '/detokenize', { tokens: [-1] }), 400, 'detokenize tokens: [-1]');
    await expectError(await postJson(srv, '/detokenize', { tokens: [1e12] }), 400, 'detokenize tokens: [1e12]');
  });
});

test('400: a prompt longer than the context (--ctx 64)', async () => {
  const long = [{ role: 'user', content: 'hello '.repeat(200) }];
  await expectError(await postJson(srv, '/v1/chat/completions', { model, messages: long }), 400, 'long chat prompt');
  await expectError(await postJson(srv, '/v1/chat/completions', { model, messages: long, stream: true }), 400,
    'long chat prompt, streaming');
  await expectError(await postJson(srv, '/v1/completions', { model, prompt: 'hello '.repeat(200) }), 400,
    'long completions prompt');
});

describe('413: an oversize body', () => {
  // Far beyond any sane request limit. With Content-Length the server may refuse at the
  // headers or after skipping the body; sent chunked, it must stop reading at its limit
  // (otherwise it buffers whatever it is sent).
  const TOTAL = 256 << 20;
  for (const chunked of [false, true]) {
    test(chunked ? 'sent chunked, without Content-Length' : 'with Content-Length', async () => {
      const t0 = Date.now();
      const r = await sendOversize(srv, { totalBytes: TOTAL, chunked });
      assert.equal(r.status, 413, `status ${r.status} ${r.error ?? ''} after ${r.bytesWritten} bytes: ${r.text ?? ''}`);
      if (chunked) assert.ok(r.bytesWritten < TOTAL, `the server read all ${TOTAL} chunked bytes before refusing`);
      assert.ok(Date.now() - t0 < 20000);
      const h = await srv.health();
      assert.equal(h.status, 200, `GET /health afterwards: ${h.status}; ${srv.describe()}`);
    });
  }
});

describe('401: API key', () => {
  const cases = {
    'wrong key': { authorization: 'Bearer sk-wrong' },
    'no key': {},
    'key without Bearer': { authorization: KEY },
    'key prefix only': { authorization: `Bearer ${KEY.slice(0, -1)}` },
  };
  for (const [name, headers] of Object.entries(cases)) {
    test(name, async () => {
      for (const [method, p, body] of [
        ['POST', '/v1/chat/completions', JSON.stringify({ model, messages: USER })],
        ['POST', '/v1/completions', JSON.stringify({ model, prompt: 'hi' })],
        ['GET', '/v1/models', undefined],
      ]) {
        const r = await rawRequest(srv, { method, path: p, body, headers, auth: false });
        await expectError(r, 401, `${name}: ${method} ${p}`);
      }
    });
  }

  test('the openai client with a wrong key gets AuthenticationError', async () => {
    const client = srv.client({ apiKey: 'sk-wrong' });
    await assert.rejects(client.chat.completions.create({ model, messages: USER }), (e) => e.status === 401);
  });

  test('the openai client gets BadRequestError with the message for empty messages', async () => {
    await assert.rejects(srv.client().chat.completions.create({ model, messages: [] }),
      (e) => e.status === 400 && typeof e.message === 'string' && e.error?.message?.length > 0);
  });
});

test('a kept-alive connection keeps working after a 400', async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const send = (body) => new Promise((resolve, reject) => {
      const req = http.request(`${srv.url}/v1/chat/completions`, {
        method: 'POST', agent,
        headers: { ...srv.authHeaders(), 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode, text, reused: req.reusedSocket }));
      });
      req.on('error', reject);
      req.end(body);
    });
    const good = JSON.stringify({ model, messages: USER });
    const results = [];
    for (const body of [good, '{"messages": [', good, JSON.stringify({ model, messages: [] }), good])
      results.push(await send(body));
    assert.deepEqual(results.map((r) => r.status), [200, 400, 200, 400, 200], JSON.stringify(results.map((r) => r.text.slice(0, 100))));
    assert.ok(results.slice(1).every((r) => r.reused), 'the connection was not kept alive across the requests');
    assert.equal(JSON.parse(results.at(-1).text).choices[0].message.content, 'Hello there!');
  } finally {
    agent.destroy();
  }
});

test('404 for an unknown path, 404/405 for a wrong method', async () => {
  const r = await rawRequest(srv, { method: 'GET', path: '/v1/nope' });
  assert.equal(r.status, 404, r.text);
  const r2 = await rawRequest(srv, { method: 'GET', path: '/v1/chat/completions' });
  assert.ok([404, 405].includes(r2.status), `GET /v1/chat/completions: ${r2.status}`);
  assert.equal((await srv.health()).status, 200);
});

test('after all of it the server still answers a good request', async () => {
  await sleep(50);
  const r = await postJson(srv, '/v1/chat/completions', { model, messages: USER });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, 'Hello there!');
  assert.ok(srv.alive, srv.describe());
});
