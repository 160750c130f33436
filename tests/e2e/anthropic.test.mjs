// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) through the official
// @anthropic-ai/sdk client: text, thinking blocks, tool_use and tool_result, streaming events,
// stop sequences, errors in Anthropic's shape, x-api-key, and the state cache across turns —
// against the scripted backend (exact replies) and the real CPU backend.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import {
  REASONING_REPLY, TOOL_REPLY, WEATHER_TOOL as CHAT_WEATHER_TOOL, makeModel, parseSse, postJson, startServer,
  stopAllServers,
} from './helpers.mjs';

const KEY = 'sk-ant-test-key';
const USER = [{ role: 'user', content: 'What is the weather in Paris?' }];
// The chat tests' tool in Anthropic's form.
const { name, description, parameters } = CHAT_WEATHER_TOOL.function;
const WEATHER_TOOL = { name, description, input_schema: parameters };

let reasoningSrv; // scripted: REASONING_REPLY
let toolSrv; // scripted: TOOL_REPLY
let cpuSrv; // the real CPU backend
let model;
let dir;
const modelDir = () => dir;

before(async () => {
  dir = makeModel();
  [reasoningSrv, toolSrv, cpuSrv] = await Promise.all([
    startServer({ modelDir: dir, backend: 'scripted', script: [REASONING_REPLY], apiKey: KEY }),
    startServer({ modelDir: dir, backend: 'scripted', script: [TOOL_REPLY], apiKey: KEY }),
    startServer({ modelDir: dir, backend: 'cpu', ctx: 8192 }),
  ]);
  model = 'orchid';
});

after(async () => {
  await stopAllServers();
});

// The official client, no retries; it sends the key as x-api-key.
const client = (srv, opts = {}) =>
  new Anthropic({ baseURL: srv.url, apiKey: srv.apiKey ?? 'unused', maxRetries: 0, timeout: 60000, ...opts });

const create = (srv, body) => client(srv).messages.create({ model, max_tokens: 64, messages: USER, ...body });

// The message envelope every answer has.
function checkMessage(m, what) {
  assert.equal(m.type, 'message', what);
  assert.equal(m.role, 'assistant', what);
  assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/, `${what}: id`);
  assert.equal(typeof m.model, 'string', what);
  assert.ok(Array.isArray(m.content), `${what}: content`);
  assert.ok(Number.isInteger(m.usage.input_tokens) && m.usage.input_tokens > 0, `${what}: ${JSON.stringify(m.usage)}`);
  assert.ok(Number.isInteger(m.usage.output_tokens) && m.usage.output_tokens > 0, `${what}: ${JSON.stringify(m.usage)}`);
}

const withoutSignature = (content) => content.map(({ signature, ...b }) => b);

describe('scripted backend: text and thinking', () => {
  const expected = [
    { type: 'thinking', thinking: 'Let me think.' },
    { type: 'text', text: 'Hello there!' },
  ];

  test('non-streaming: a thinking block, then a text block; stop_reason end_turn', async () => {
    for (const thinking of [undefined, { type: 'enabled', budget_tokens: 1024 }, { type: 'disabled' }]) {
      const m = await create(reasoningSrv, thinking ? { thinking } : {});
      checkMessage(m, JSON.stringify(thinking));
      assert.deepEqual(withoutSignature(m.content), expected, JSON.stringify(m.content));
      assert.equal(m.stop_reason, 'end_turn');
      assert.equal(m.stop_sequence, null);
    }
  });

  test('the system prompt and text blocks reach the template', async () => {
    const body = {
      model, max_tokens: 16,
      system: [{ type: 'text', text: 'You are terse.' }],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: 'there' }] }],
    };
    const counted = await client(reasoningSrv).messages.countTokens({ model, system: body.system, messages: body.messages });
    const plain = await client(reasoningSrv).messages.countTokens({ model, messages: [{ role: 'user', content: 'Hi' }] });
    assert.ok(counted.input_tokens > plain.input_tokens + 3, `${counted.input_tokens} vs ${plain.input_tokens}`);
    const m = await client(reasoningSrv).messages.create(body);
    // Anthropic counts cache reads apart from input_tokens: the two add up to the prompt.
    assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, counted.input_tokens);
  });

  test('streaming: the event sequence, and the SDK assembles the same message', async () => {
    const stream = client(reasoningSrv).messages.stream({ model, max_tokens: 64, messages: USER });
    const names = [];
    stream.on('streamEvent', (e) => names.push(e.type));
    const m = await stream.finalMessage();
    checkMessage(m, 'stream');
    assert.deepEqual(withoutSignature(m.content), expected);
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(names[0], 'message_start');
    assert.equal(names.at(-1), 'message_stop');
    assert.equal(names.at(-2), 'message_delta');
    // Each block opens, takes deltas and closes before the next opens.
    const blocks = names.filter((n) => n.startsWith('content_block'));
    assert.equal(blocks[0], 'content_block_start');
    assert.equal(blocks.filter((n) => n === 'content_block_start').length, 2, blocks.join(','));
    assert.equal(blocks.filter((n) => n === 'content_block_stop').length, 2, blocks.join(','));
  });

  test('raw stream: named events, matching indexes, usage in message_start and message_delta', async () => {
    const r = await postJson(reasoningSrv, '/v1/messages', { model, max_tokens: 64, messages: USER, stream: true },
      { headers: { 'x-api-key': KEY }, auth: false });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /text\/event-stream/);
    const named = r.text.split('\n\n').filter(Boolean).map((b) => /^event: (\S+)\ndata: /.exec(b)?.[1]);
    assert.ok(named.every(Boolean), r.text);
    assert.deepEqual(named.slice(0, 2), ['message_start', 'ping']);
    const events = parseSse(r.text);
    events.forEach((e, i) => assert.equal(e.type, named[i]));
    assert.ok(events[0].message.usage.input_tokens > 0);
    const delta = events.find((e) => e.type === 'message_delta');
    assert.ok(delta.usage.output_tokens > 0);
    for (const e of events.filter((x) => x.type.startsWith('content_block')))
      assert.ok(e.index === 0 || e.index === 1, JSON.stringify(e));
  });

  test('stop_sequences: stop_reason stop_sequence with the string; the text ends before it', async () => {
    const m = await create(reasoningSrv, { stop_sequences: ['nothing', 'there'] });
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, 'there');
    assert.deepEqual(withoutSignature(m.content).at(-1), { type: 'text', text: 'Hello ' });
  });

  test('max_tokens: stop_reason max_tokens', async () => {
    const m = await create(reasoningSrv, { max_tokens: 2 });
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 2);
  });
});

describe('scripted backend: tools', () => {
  const checkToolUse = (m, what) => {
    assert.equal(m.stop_reason, 'tool_use', what);
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1, `${what}: ${JSON.stringify(m.content)}`);
    assert.match(uses[0].id, /^toolu_/, what);
    assert.equal(uses[0].name, 'get_weather', what);
    assert.deepEqual(uses[0].input, { city: 'Paris', days: 3 }, what);
    return uses[0];
  };

  test('non-streaming and streaming: one tool_use block, input typed by the schema', async () => {
    checkToolUse(await create(toolSrv, { tools: [WEATHER_TOOL] }), 'create');
    const m = await client(toolSrv).messages.stream({ model, max_tokens: 64, messages: USER, tools: [WEATHER_TOOL] }).finalMessage();
    checkToolUse(m, 'stream');
  });

  test('tool_choice none: no tool_use, the call stays text', async () => {
    const m = await create(toolSrv, { tools: [WEATHER_TOOL], tool_choice: { type: 'none' } });
    assert.equal(m.stop_reason, 'end_turn');
    assert.ok(m.content.every((b) => b.type !== 'tool_use'), JSON.stringify(m.content));
  });

  test('a follow-up with tool_use and tool_result renders both and answers', async () => {
    const first = await create(toolSrv, { tools: [WEATHER_TOOL] });
    const use = checkToolUse(first, 'first');
    const messages = [
      ...USER,
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"forecast":"sunny"}' }] },
    ];
    const before = await client(toolSrv).messages.countTokens({ model, messages: USER, tools: [WEATHER_TOOL] });
    const after = await client(toolSrv).messages.countTokens({ model, messages, tools: [WEATHER_TOOL] });
    assert.ok(after.input_tokens > before.input_tokens + 20, `${after.input_tokens} vs ${before.input_tokens}`);
    checkToolUse(await client(toolSrv).messages.create({ model, max_tokens: 64, messages, tools: [WEATHER_TOOL] }), 'follow-up');
  });
});

describe('errors in Anthropic\'s shape', () => {
  const checkError = (r, status, type) => {
    assert.equal(r.status, status, r.text);
    assert.equal(r.json?.type, 'error', r.text);
    assert.equal(r.json.error.type, type, r.text);
    assert.equal(typeof r.json.error.message, 'string');
  };
  const post = (body, headers = { 'x-api-key': KEY }) =>
    postJson(reasoningSrv, '/v1/messages', body, { headers, auth: false });

  test('bad bodies are 400 invalid_request_error naming the field; the server keeps serving', async () => {
    const cases = [
      [{ model, messages: USER }, 'max_tokens'],
      [{ model, max_tokens: 8 }, 'messages'],
      [{ model, max_tokens: 8, messages: [{ role: 'tool', content: 'x' }] }, 'role'],
      [{ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, 'image'],
      [{ model, max_tokens: 8, messages: USER, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 'server tools'],
      [{ model, max_tokens: 8, messages: USER, tool_choice: { type: 'any' } }, 'tool_choice'],
      [{ model, max_tokens: 8, messages: USER, thinking: { type: 'sometimes' } }, 'thinking'],
      [{ model, max_tokens: 0, messages: USER }, 'max_tokens'],
    ];
    for (const [body, word] of cases) {
      const r = await post(body);
      checkError(r, 400, 'invalid_request_error');
      assert.ok(r.json.error.message.includes(word), `${JSON.stringify(body)}: ${r.json.error.message}`);
    }
    const ok = await create(reasoningSrv, {});
    assert.equal(ok.stop_reason, 'end_turn');
  });

  test('the SDK raises its typed errors', async () => {
    await assert.rejects(client(reasoningSrv).messages.create({ model, messages: USER }), (e) =>
      e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === 'invalid_request_error');
    await assert.rejects(client(reasoningSrv, { apiKey: 'wrong' }).messages.create({ model, max_tokens: 8, messages: USER }),
      (e) => e instanceof Anthropic.AuthenticationError && e.error?.error?.type === 'authentication_error');
  });

  test('x-api-key and Bearer both authenticate; none is 401 naming x-api-key', async () => {
    checkError(await post({ model, max_tokens: 8, messages: USER }, {}), 401, 'authentication_error');
    const none = await post({ model, max_tokens: 8, messages: USER }, {});
    assert.ok(none.json.error.message.includes('x-api-key'), none.text);
    const bearer = await post({ model, max_tokens: 8, messages: USER }, { authorization: `Bearer ${KEY}` });
    assert.equal(bearer.status, 200, bearer.text);
  });
});

// Each turn's prompt extends the last one's prompt and reply byte for byte (past thinking kept),
// so the state cache serves all of it. The scripted reply is what a model writes after the
// template's "<think>\n", tokenized as the next turn's prompt will tokenize it.
test('scripted backend: each turn reuses the whole previous turn from the state cache', async () => {
  const srv = await startServer({ modelDir: modelDir(), backend: 'scripted', script: ['Let me think.\n</think>\n\nHello there!'] });
  const c = client(srv);
  const messages = [{ role: 'user', content: 'Tell me about orchids.' }];
  let previous = 0; // the last turn's prompt + reply tokens
  for (let turn = 0; turn < 4; turn++) {
    const m = await c.messages.create({ model, max_tokens: 64, messages, thinking: { type: 'enabled', budget_tokens: 64 } });
    assert.deepEqual(withoutSignature(m.content), [{ type: 'thinking', thinking: 'Let me think.' }, { type: 'text', text: 'Hello there!' }]);
    const prompt = m.usage.input_tokens + m.usage.cache_read_input_tokens;
    // The state holds the prompt and every reply token but the last (never fed back).
    if (turn > 0)
      assert.ok(m.usage.cache_read_input_tokens >= previous - 1,
        `turn ${turn}: ${m.usage.cache_read_input_tokens} cached of ${prompt}; the last turn held ${previous}`);
    previous = prompt + m.usage.output_tokens;
    messages.push({ role: 'assistant', content: m.content }, { role: 'user', content: `And more, part ${turn + 2}?` });
  }
});

test('CPU backend: a conversation hits the state cache on every turn', async () => {
  const c = client(cpuSrv);
  const messages = [{ role: 'user', content: 'Tell me about orchids.' }];
  let cached = 0;
  for (let turn = 0; turn < 3; turn++) {
    const m = await c.messages.create({ model, max_tokens: 12, temperature: 0, messages });
    checkMessage(m, `turn ${turn}`);
    // A random model's tokens need not be the ones its text re-tokenizes to, so the reuse reaches
    // at least the last turn's history (the snapshot where its generation prompt began).
    if (turn > 0)
      assert.ok(m.usage.cache_read_input_tokens > cached, `turn ${turn}: ${JSON.stringify(m.usage)}`);
    cached = m.usage.cache_read_input_tokens;
    messages.push({ role: 'assistant', content: m.content }, { role: 'user', content: `And more, part ${turn + 2}?` });
  }
});
