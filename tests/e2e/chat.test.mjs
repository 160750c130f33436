// Chat and completions through the official openai client: non-streaming and streaming,
// usage (include_usage), stop strings, tool calls, reasoning, abort, the utility endpoints —
// against the scripted backend (exact, deterministic replies) and the real CPU backend.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { APIUserAbortError } from 'openai';

import {
  REASONING_REPLY, TOOL_REPLY, WEATHER_TOOL, applyTemplate, checkUsage, collectStream, detokenize,
  makeModel, modelId, parseSse, postJson, sleep, startServer, stopAllServers, tokenize,
} from './helpers.mjs';

const USER = [{ role: 'user', content: 'What is the weather in Paris?' }];
const UNICODE_REASONING = '思考中… ça va';
const UNICODE_CONTENT = 'Ünïcödé 你好 🙂 𝔘𝔫𝔦 — done';
const WEATHER_ARGS = { city: 'Paris', days: 3 };

let modelDir;
let reasoningSrv; // scripted: every request gets REASONING_REPLY
let toolSrv; // scripted: every request gets TOOL_REPLY
let altSrv; // scripted: [REASONING_REPLY, TOOL_REPLY] in turn
let cpuSrv; // the real CPU backend
let unicodeSrv; // scripted: multi-byte text in reasoning and content
let model; // the model id the servers list

before(async () => {
  modelDir = makeModel();
  [reasoningSrv, toolSrv, altSrv, cpuSrv, unicodeSrv] = await Promise.all([
    startServer({ modelDir, backend: 'scripted', script: [REASONING_REPLY] }),
    startServer({ modelDir, backend: 'scripted', script: [TOOL_REPLY] }),
    startServer({ modelDir, backend: 'scripted', script: [REASONING_REPLY, TOOL_REPLY] }),
    startServer({ modelDir, backend: 'cpu', ctx: 8192 }),
    startServer({ modelDir, backend: 'scripted', script: [`<think>\n${UNICODE_REASONING}\n</think>\n\n${UNICODE_CONTENT}`] }),
  ]);
  model = await modelId(reasoningSrv);
});

after(async () => {
  await stopAllServers();
});

// The message of a non-streaming chat completion, with the envelope checked.
function checkCompletion(r, what) {
  assert.equal(r.object, 'chat.completion', what);
  assert.equal(typeof r.id, 'string', `${what}: id`);
  assert.ok(r.id.length > 0, `${what}: id`);
  assert.ok(Number.isInteger(r.created), `${what}: created`);
  assert.equal(typeof r.model, 'string', `${what}: model`);
  assert.equal(r.choices.length, 1, `${what}: one choice`);
  assert.equal(r.choices[0].index, 0, `${what}: choice index`);
  assert.equal(r.choices[0].message.role, 'assistant', `${what}: role`);
  checkUsage(assert, r.usage, what);
  return r.choices[0];
}

// Streaming envelope: one id, chunk objects, the role first, the usage chunk (if any) last
// with no choices, exactly one finish_reason.
function checkStreamEnvelope(s, { usage }, what) {
  assert.ok(s.chunks.length > 0, `${what}: no chunks`);
  assert.equal(s.ids.size, 1, `${what}: chunk ids differ: ${[...s.ids]}`);
  for (const c of s.chunks) {
    assert.equal(c.object, 'chat.completion.chunk', `${what}: chunk object`);
    assert.ok(Number.isInteger(c.created), `${what}: chunk created`);
  }
  assert.deepEqual(s.roles, ['assistant'], `${what}: delta.role must be sent once, first`);
  assert.equal(s.chunks[0].choices[0]?.delta?.role, 'assistant', `${what}: first chunk carries the role`);
  const finishes = s.chunks.flatMap((c) => (c.choices ?? []).filter((ch) => ch.finish_reason));
  assert.equal(finishes.length, 1, `${what}: finish_reason chunks: ${finishes.length}`);
  if (usage) {
    const last = s.chunks.at(-1);
    assert.ok(last.usage, `${what}: the last chunk carries usage (stream_options.include_usage)`);
    assert.deepEqual(last.choices, [], `${what}: the usage chunk has choices: []`);
    for (const c of s.chunks.slice(0, -1))
      assert.ok(c.usage === undefined || c.usage === null, `${what}: usage only on the last chunk`);
    checkUsage(assert, s.usage, what);
  } else {
    for (const c of s.chunks) assert.ok(c.usage === undefined || c.usage === null, `${what}: usage without include_usage`);
  }
}

async function chat(srv, body, opts) {
  return srv.client().chat.completions.create({ model, messages: USER, ...body }, opts);
}

async function chatStream(srv, body, opts) {
  return collectStream(await chat(srv, { stream: true, ...body }, opts));
}

async function assertHealthy(srv) {
  const h = await srv.health();
  assert.equal(h.status, 200, `GET /health after the test: ${h.status}; ${srv.describe()}`);
}

// ---------------------------------------------------------------------------------------------

describe('scripted backend: reasoning and content', () => {
  test('non-streaming: reasoning_content and content split, finish_reason stop, usage', async () => {
    const r = await chat(reasoningSrv, {});
    const c = checkCompletion(r, 'chat');
    assert.equal(c.message.reasoning_content, 'Let me think.');
    assert.equal(c.message.content, 'Hello there!');
    assert.equal(c.finish_reason, 'stop');
    assert.ok(!c.message.tool_calls || c.message.tool_calls.length === 0, 'no tool calls');
    // completion_tokens: the scripted reply's tokens (the end-of-turn token excluded).
    const replyTokens = await tokenize(reasoningSrv, { prompt: REASONING_REPLY, add_special_tokens: false });
    assert.equal(r.usage.completion_tokens, replyTokens.length,
      `completion_tokens ${r.usage.completion_tokens} vs ${replyTokens.length} reply tokens`);
    // prompt_tokens: the rendered prompt's tokens.
    const promptTokens = await tokenize(reasoningSrv, { messages: USER, add_generation_prompt: true });
    assert.equal(r.usage.prompt_tokens, promptTokens.length, 'prompt_tokens vs POST /tokenize {messages}');
  });

  test('streaming with include_usage: deltas assemble to the same message', async () => {
    const s = await chatStream(reasoningSrv, { stream_options: { include_usage: true } });
    checkStreamEnvelope(s, { usage: true }, 'stream');
    assert.equal(s.reasoning, 'Let me think.');
    assert.equal(s.content, 'Hello there!');
    assert.equal(s.finishReason, 'stop');
    const r = await chat(reasoningSrv, {});
    assert.equal(s.usage.prompt_tokens, r.usage.prompt_tokens);
    assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
    // No delta may end inside a tag: nothing of "<think>"/"</think>" leaks into any delta.
    for (const c of s.chunks)
      for (const ch of c.choices) {
        const text = (ch.delta.content ?? '') + (ch.delta.reasoning_content ?? '');
        assert.ok(!/<\/?t|think>/.test(text), `a delta leaks tag text: ${JSON.stringify(ch.delta)}`);
      }
  });

  test('streaming without include_usage sends no usage', async () => {
    const s = await chatStream(reasoningSrv, {});
    checkStreamEnvelope(s, { usage: false }, 'stream (no usage)');
    assert.equal(s.content, 'Hello there!');
  });

  test('the SSE wire format: text/event-stream, data: lines, data: [DONE] last', async () => {
    const r = await postJson(reasoningSrv, '/v1/chat/completions',
      { model, messages: USER, stream: true, stream_options: { include_usage: true } });
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers['content-type'] ?? '', /^text\/event-stream/);
    const events = parseSse(r.text);
    assert.equal(events.at(-1), '[DONE]', `the stream must end with data: [DONE]: ${r.text.slice(-200)}`);
    assert.equal(events.filter((e) => e === '[DONE]').length, 1, 'one [DONE]');
    assert.ok(events.at(-2).usage, 'the usage chunk comes right before [DONE]');
  });

  test('max_tokens cuts the reply: finish_reason length, completion_tokens = max_tokens', async () => {
    const r = await chat(reasoningSrv, { max_tokens: 3 });
    const c = checkCompletion(r, 'max_tokens 3');
    assert.equal(c.finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 3);
    const s = await chatStream(reasoningSrv, { max_tokens: 3, stream_options: { include_usage: true } });
    assert.equal(s.finishReason, 'length');
    assert.equal(s.usage.completion_tokens, 3);
  });

  test('max_completion_tokens is honoured like max_tokens', async () => {
    const r = await chat(reasoningSrv, { max_completion_tokens: 2 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 2);
  });
});

describe('scripted backend: stop strings', () => {
  // [stop, expected reasoning, expected content]
  const cases = [
    [['ere'], 'Let me think.', 'Hello th'], // inside one token
    [['o the'], 'Let me think.', 'Hell'], // across tokens
    ['ere', 'Let me think.', 'Hello th'], // a plain string
    [['xyz', '!'], 'Let me think.', 'Hello there'], // the second of two
    [['me think'], 'Let', null], // inside the reasoning: no content at all
  ];
  for (const [stop, reasoning, content] of cases) {
    test(`stop ${JSON.stringify(stop)} cuts exactly there (non-streaming and streaming)`, async () => {
      const r = await chat(reasoningSrv, { stop });
      const c = checkCompletion(r, `stop ${JSON.stringify(stop)}`);
      assert.equal(c.finish_reason, 'stop');
      assert.equal(c.message.reasoning_content ?? null, reasoning);
      assert.equal(c.message.content || null, content);
      const s = await chatStream(reasoningSrv, { stop, stream_options: { include_usage: true } });
      checkStreamEnvelope(s, { usage: true }, 'stream with stop');
      assert.equal(s.finishReason, 'stop');
      assert.equal(s.reasoning || null, reasoning);
      assert.equal(s.content || null, content);
    });
  }

  test('a stop string that never matches leaves the reply whole', async () => {
    const r = await chat(reasoningSrv, { stop: ['nowhere'] });
    assert.equal(r.choices[0].message.content, 'Hello there!');
    assert.equal(r.choices[0].finish_reason, 'stop');
  });
});

describe('scripted backend: multi-byte text', () => {
  test('reasoning and content exact, no delta splits a character', async () => {
    const r = await chat(unicodeSrv, {});
    assert.equal(r.choices[0].message.reasoning_content, UNICODE_REASONING);
    assert.equal(r.choices[0].message.content, UNICODE_CONTENT);
    const s = await chatStream(unicodeSrv, {});
    assert.equal(s.reasoning, UNICODE_REASONING);
    assert.equal(s.content, UNICODE_CONTENT);
    for (const c of s.chunks)
      for (const ch of c.choices) {
        const text = (ch.delta.content ?? '') + (ch.delta.reasoning_content ?? '');
        assert.ok(!text.includes('\uFFFD'), `a delta holds a replacement character: ${JSON.stringify(ch.delta)}`);
      }
  });

  test('a multi-byte stop string', async () => {
    for (const stream of [false, true]) {
      const body = { stop: ['你好'], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) };
      const out = stream ? await collectStream(await chat(unicodeSrv, body)) : (await chat(unicodeSrv, body)).choices[0];
      const content = stream ? out.content : out.message.content;
      assert.equal(content, 'Ünïcödé ', `stream ${stream}`);
      assert.equal(stream ? out.finishReason : out.finish_reason, 'stop');
    }
  });
});

describe('scripted backend: tool calls', () => {
  const checkCall = (call, args, what) => {
    assert.equal(call.type, 'function', `${what}: type`);
    assert.equal(typeof call.id, 'string', `${what}: id`);
    assert.ok(call.id.length > 0, `${what}: empty id`);
    assert.equal(call.function.name, 'get_weather', `${what}: name`);
    assert.equal(typeof call.function.arguments, 'string', `${what}: arguments must be a JSON string`);
    assert.deepEqual(JSON.parse(call.function.arguments), args, `${what}: arguments ${call.function.arguments}`);
  };

  test('non-streaming: tool_calls typed by the schema (days integer), finish_reason tool_calls', async () => {
    const r = await chat(toolSrv, { tools: [WEATHER_TOOL] });
    const c = checkCompletion(r, 'tool call');
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls?.length, 1, JSON.stringify(c.message));
    checkCall(c.message.tool_calls[0], WEATHER_ARGS, 'tool call');
    assert.ok(c.message.content === null || c.message.content === '', `content: ${JSON.stringify(c.message.content)}`);
    assert.ok(!c.message.reasoning_content, `reasoning_content: ${JSON.stringify(c.message.reasoning_content)}`);
  });

  test('streaming: tool_call deltas assemble to the same call', async () => {
    const s = await chatStream(toolSrv, { tools: [WEATHER_TOOL], stream_options: { include_usage: true } });
    checkStreamEnvelope(s, { usage: true }, 'tool stream');
    assert.equal(s.finishReason, 'tool_calls');
    assert.equal(s.toolCalls.length, 1, JSON.stringify(s.toolCalls));
    checkCall(s.toolCalls[0], WEATHER_ARGS, 'streamed tool call');
    assert.equal(s.content, '');
    // Every tool_calls delta names its index; the first for a call carries id, type and name.
    const deltas = s.chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
    for (const d of deltas) assert.ok(Number.isInteger(d.index), `tool_calls delta without index: ${JSON.stringify(d)}`);
    assert.ok(deltas[0].id && deltas[0].type === 'function' && deltas[0].function?.name === 'get_weather',
      `first tool_calls delta: ${JSON.stringify(deltas[0])}`);
  });

  test('a schema typing days as string gives "3"', async () => {
    const tool = structuredClone(WEATHER_TOOL);
    tool.function.parameters.properties.days = { type: 'string' };
    const r = await chat(toolSrv, { tools: [tool] });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris', days: '3' });
  });

  test('tool_choice "none" and no tools: the reply is not parsed as a call', async () => {
    for (const body of [{ tools: [WEATHER_TOOL], tool_choice: 'none' }, {}]) {
      const r = await chat(toolSrv, body);
      const c = r.choices[0];
      assert.ok(!c.message.tool_calls || c.message.tool_calls.length === 0, `${JSON.stringify(body)}: tool_calls`);
      assert.equal(c.finish_reason, 'stop', JSON.stringify(body));
      const text = (c.message.reasoning_content ?? '') + (c.message.content ?? '');
      assert.ok(text.includes('<function=get_weather>'), `${JSON.stringify(body)}: the XML stays as text: ${JSON.stringify(c.message)}`);
    }
  });

  test('a follow-up with the call and its tool result in the history', async () => {
    const first = await chat(toolSrv, { tools: [WEATHER_TOOL] });
    const call = first.choices[0].message.tool_calls[0];
    const messages = [
      ...USER,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"forecast":"sunny"}' },
    ];
    // The history renders the call's JSON arguments as the template's XML parameters.
    const prompt = await applyTemplate(toolSrv, { messages, tools: [WEATHER_TOOL], add_generation_prompt: true });
    assert.ok(prompt.includes('<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>'),
      `rendered history: ${prompt}`);
    assert.ok(prompt.includes('<tool_response>\n{"forecast":"sunny"}\n</tool_response>'), prompt);
    assert.ok(prompt.endsWith('<|im_start|>assistant\n<think>\n'), prompt.slice(-100));
    const r = await toolSrv.client().chat.completions.create({ model, messages, tools: [WEATHER_TOOL] });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
  });
});

test('scripted backend: request i gets reply i mod n', async () => {
  const kinds = [];
  for (let i = 0; i < 4; i++) {
    const r = await chat(altSrv, { tools: [WEATHER_TOOL] });
    const c = r.choices[0];
    if (c.finish_reason === 'tool_calls' && c.message.tool_calls?.[0]?.function.name === 'get_weather') kinds.push('tool');
    else if (c.message.content === 'Hello there!' && c.message.reasoning_content === 'Let me think.') kinds.push('reasoning');
    else kinds.push(JSON.stringify(c));
  }
  assert.deepEqual(kinds, ['reasoning', 'tool', 'reasoning', 'tool']);
});

describe('scripted backend: /v1/completions', () => {
  test('non-streaming: the raw reply text', async () => {
    const r = await reasoningSrv.client().completions.create({ model, prompt: 'Hello', max_tokens: 100 });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].text, REASONING_REPLY);
    assert.equal(r.choices[0].finish_reason, 'stop');
    checkUsage(assert, r.usage, 'completions');
  });

  test('streaming with include_usage and a stop string', async () => {
    const stream = await reasoningSrv.client().completions.create({
      model, prompt: 'Hello', max_tokens: 100, stream: true, stop: ['there'], stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const c of stream) {
      assert.equal(c.object, 'text_completion');
      for (const ch of c.choices ?? []) {
        text += ch.text ?? '';
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      if (c.usage) usage = c.usage;
    }
    assert.equal(text, '<think>\nLet me think.\n</think>\n\nHello ');
    assert.equal(finish, 'stop');
    checkUsage(assert, usage, 'completions stream');
  });
});

describe('scripted backend: models and utility endpoints', () => {
  test('GET /v1/models', async () => {
    const page = await reasoningSrv.client().models.list();
    assert.ok(page.data.length >= 1);
    for (const m of page.data) {
      assert.equal(typeof m.id, 'string');
      assert.equal(m.object, 'model');
    }
  });

  test('/tokenize, /detokenize and /apply-template agree with each other', async () => {
    const text = 'Hello there! Ünïcödé 你好 🙂';
    const ids = await tokenize(reasoningSrv, { prompt: text });
    assert.ok(ids.length > 0 && ids.every(Number.isInteger), JSON.stringify(ids));
    assert.equal(await detokenize(reasoningSrv, ids), text);
    const prompt = await applyTemplate(reasoningSrv, { messages: USER, add_generation_prompt: true });
    assert.equal(prompt, '<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n');
    const fromMessages = await tokenize(reasoningSrv, { messages: USER, add_generation_prompt: true });
    assert.deepEqual(fromMessages, await tokenize(reasoningSrv, { prompt }));
  });
});

// ---------------------------------------------------------------------------------------------
// The real CPU backend (random weights: gibberish, but the same paths end to end).

describe('cpu backend', () => {
  const GREEDY = { temperature: 0, max_tokens: 8 };

  test('non-streaming and streaming greedy replies agree; usage; cached_tokens on a repeat', async () => {
    const r = await chat(cpuSrv, GREEDY);
    const c = checkCompletion(r, 'cpu chat');
    assert.ok(['length', 'stop'].includes(c.finish_reason), c.finish_reason);
    if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 8);
    const text = (c.message.reasoning_content ?? '') + (c.message.content ?? '');
    assert.ok(text.length > 0, `empty reply: ${JSON.stringify(c.message)}`);

    const s = await chatStream(cpuSrv, { ...GREEDY, stream_options: { include_usage: true } });
    checkStreamEnvelope(s, { usage: true }, 'cpu stream');
    assert.equal(s.finishReason, c.finish_reason);
    assert.equal(s.reasoning, c.message.reasoning_content ?? '', 'greedy reasoning, streamed vs not');
    assert.equal(s.content, c.message.content ?? '', 'greedy content, streamed vs not');
    assert.equal(s.usage.prompt_tokens, r.usage.prompt_tokens);
    assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
    // The same prompt again: everything up to the generation prompt comes from the cache.
    assert.ok(s.usage.prompt_tokens_details.cached_tokens > 0, `cached_tokens on a repeat: ${JSON.stringify(s.usage)}`);
  });

  test('completions and a stop string cut exactly where it first occurs', async () => {
    const client = cpuSrv.client();
    const prompt = 'The capital of France is';
    const r = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    checkUsage(assert, r.usage, 'cpu completions');
    const text = r.choices[0].text;
    const chars = [...text];
    assert.ok(chars.length >= 6, `need some text to cut: ${JSON.stringify(text)}`);
    // A stop string from the middle of the greedy output (by code points, not across a
    // replacement character).
    const stop = chars.slice(3, 5).join('');
    assert.ok(!stop.includes('\uFFFD'), 'the greedy text has a replacement character where the stop string would be');
    const r2 = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stop: [stop] });
    assert.equal(r2.choices[0].text, text.slice(0, text.indexOf(stop)), `stop ${JSON.stringify(stop)} in ${JSON.stringify(text)}`);
    assert.equal(r2.choices[0].finish_reason, 'stop');
  });

  test('a request with tools is well formed', async () => {
    const r = await chat(cpuSrv, { ...GREEDY, tools: [WEATHER_TOOL] });
    const c = checkCompletion(r, 'cpu tools');
    assert.ok(['length', 'stop', 'tool_calls'].includes(c.finish_reason), c.finish_reason);
  });

  test('abort mid-stream, then the next request is served promptly', async () => {
    const ac = new AbortController();
    const stream = await chat(cpuSrv, { stream: true, max_tokens: 4000, temperature: 0 }, { signal: ac.signal });
    let n = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (++n === 3) {
        ac.abort(); // and stop reading: see ABORT_NOTE in helpers.mjs
        break;
      }
    }
    assert.equal(n, 3);
    // 4000 tokens would take minutes on this backend: only a stopped generation lets this
    // request through in time.
    const t1 = Date.now();
    const r = await chat(cpuSrv, { max_tokens: 4, temperature: 0 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(Date.now() - t1 < 15000, `the request after the abort took ${Date.now() - t1} ms`);
    await assertHealthy(cpuSrv);
  });

  test('the same seed gives the same sampled reply', async () => {
    const body = { temperature: 1, top_p: 1, seed: 1234, max_tokens: 8 };
    const a = await chat(cpuSrv, body);
    const b = await chat(cpuSrv, body);
    assert.deepEqual(b.choices[0].message, a.choices[0].message);
  });

  test('a request aborted while queued behind another is not run to its end', async () => {
    // A: a long stream. B: non-streaming, queued behind A, its client gone before A ends.
    const acA = new AbortController();
    const streamA = await chat(cpuSrv, { stream: true, max_tokens: 4000, temperature: 0 }, { signal: acA.signal });
    const itA = streamA[Symbol.asyncIterator]();
    await itA.next();
    const acB = new AbortController();
    const pB = chat(cpuSrv, { max_tokens: 4000, temperature: 0 }, { signal: acB.signal });
    await sleep(300);
    acB.abort();
    await assert.rejects(pB, APIUserAbortError);
    await sleep(200);
    acA.abort();
    await itA.return();
    const t1 = Date.now();
    const r = await chat(cpuSrv, { max_tokens: 4, temperature: 0 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(Date.now() - t1 < 15000, `the request after two aborts took ${Date.now() - t1} ms`);
  });

  test('aborting a non-streaming request frees the engine too', async () => {
    const ac = new AbortController();
    const p = chat(cpuSrv, { max_tokens: 4000, temperature: 0 }, { signal: ac.signal });
    await sleep(500);
    ac.abort();
    await assert.rejects(p, APIUserAbortError);
    const t1 = Date.now();
    const r = await chat(cpuSrv, { max_tokens: 4, temperature: 0 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(Date.now() - t1 < 15000, `the request after the abort took ${Date.now() - t1} ms`);
  });
});

test('scripted backend: abort mid-stream, then the next request succeeds', async () => {
  const ac = new AbortController();
  const stream = await chat(reasoningSrv, { stream: true }, { signal: ac.signal });
  for await (const _ of stream) {
    ac.abort(); // after the first chunk, and stop reading (ABORT_NOTE in helpers.mjs)
    break;
  }
  const r = await chat(reasoningSrv, {});
  assert.equal(r.choices[0].message.content, 'Hello there!');
  await assertHealthy(reasoningSrv);
});

test('every server is still up and GET /health is 200', async () => {
  for (const s of [reasoningSrv, toolSrv, altSrv, cpuSrv, unicodeSrv]) await assertHealthy(s);
});
