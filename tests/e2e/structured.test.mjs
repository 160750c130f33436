// Structured output and forced tool calls through the official clients, against the built-in
// demo model on the CPU backend (a trained model, sampling at temperature 1): json_schema
// answers validate (Ajv) in 100 of 100 choices, json_object answers parse, tool_choice
// "required" / a named function / Anthropic "any" and "tool" always give a call whose
// arguments validate; n choices, logit_bias, GET /v1/models/{id} and the default context.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import { Ajv } from 'ajv';
import { NotFoundError } from 'openai';

import { REPO, postJson, startServer, stopAllServers, tokenize } from './helpers.mjs';

const DEMO = path.join(REPO, 'models/orchid-demo');
const ajv = new Ajv({ strict: true, allErrors: true });

// What the demo model was trained to answer, as a schema with unbounded strings and arrays.
const DEFINITION = {
  type: 'object',
  properties: {
    word: { type: 'string' },
    part_of_speech: { type: 'string', enum: ['noun', 'verb', 'adjective', 'adverb'] },
    meaning: { type: 'string' },
    examples: { type: 'array', items: { type: 'string' } },
    syllables: { type: 'integer' },
    common: { type: 'boolean' },
  },
  required: ['word', 'part_of_speech', 'meaning', 'examples', 'syllables', 'common'],
  additionalProperties: false,
};
const ASK = [{ role: 'user', content: 'What does orchid mean? Answer as JSON.' }];
// A tool whose arguments the grammar bounds (enum, integer range, boolean).
const FORECAST = {
  type: 'function',
  function: {
    name: 'forecast',
    description: 'Weather forecast for a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
        days: { type: 'integer', minimum: 1, maximum: 7 },
        metric: { type: 'boolean' },
      },
      required: ['city', 'days', 'metric'],
    },
  },
};
const CLOCK = { type: 'function', function: { name: 'clock', description: 'The time', parameters: { type: 'object', properties: {} } } };

let srv;
let model;

before(async () => {
  srv = await startServer({ modelDir: DEMO, backend: 'cpu' });
  model = (await srv.client().models.list()).data[0].id;
});

after(async () => {
  await stopAllServers();
});

describe('json_schema', () => {
  // Thinking off (reasoning_effort "none"), so the choices are the JSON alone; the streamed test
  // below runs with the template's default (thinking on): the grammar applies after </think>.
  // The demo model rambles inside strings at temperature 1; max_tokens 100 keeps the run short
  // (the shortest answer is about 40 tokens), and the constraint closes every answer within it.
  test('100 of 100 sampled choices at temperature 1 validate against the schema', async () => {
    const validate = ajv.compile(DEFINITION);
    let valid = 0;
    const failures = [];
    for (let request = 0; request < 10; request++) {
      const r = await srv.client().chat.completions.create({
        model, messages: ASK, temperature: 1, n: 10, max_tokens: 100, reasoning_effort: 'none',
        response_format: { type: 'json_schema', json_schema: { name: 'definition', strict: true, schema: DEFINITION } },
      }, { timeout: 300000 });
      assert.equal(r.choices.length, 10);
      for (const c of r.choices) {
        let v;
        try {
          v = JSON.parse(c.message.content);
        } catch (e) {
          failures.push(`${c.finish_reason}: ${c.message.content}`);
          continue;
        }
        if (validate(v)) valid += 1;
        else failures.push(`${JSON.stringify(validate.errors)}: ${c.message.content}`);
      }
    }
    assert.equal(valid, 100, failures.join('\n'));
  });

  test('streamed: the deltas join into JSON that validates', async () => {
    const validate = ajv.compile(DEFINITION);
    const stream = await srv.client().chat.completions.create({
      model, messages: ASK, temperature: 1, stream: true, max_tokens: 1000,
      response_format: { type: 'json_schema', json_schema: { name: 'definition', schema: DEFINITION } },
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.ok(validate(JSON.parse(text)), text);
  });

  test('json_object: an object, whatever the model would have said', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await srv.client().chat.completions.create({
        model, messages: [{ role: 'user', content: 'What does cat mean?' }], temperature: 1, max_tokens: 300,
        response_format: { type: 'json_object' },
      });
      const v = JSON.parse(r.choices[0].message.content);
      assert.equal(typeof v, 'object');
      assert.ok(v !== null && !Array.isArray(v), r.choices[0].message.content);
    }
  });

  test('a schema the grammar cannot enforce is a 400 naming it, not an unchecked answer', async () => {
    const r = await postJson(srv, '/v1/chat/completions', {
      messages: ASK,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a+$' } } },
    });
    assert.equal(r.status, 400);
    const e = r.json.error;
    assert.equal(e.param, 'response_format.json_schema.schema');
    assert.match(e.message, /pattern/);
  });

  test('Responses API text.format json_schema', async () => {
    const validate = ajv.compile(DEFINITION);
    const r = await srv.client().responses.create({
      model, input: 'What does orchid mean?', temperature: 1, max_output_tokens: 300,
      text: { format: { type: 'json_schema', name: 'definition', strict: true, schema: DEFINITION } },
    });
    assert.ok(validate(JSON.parse(r.output_text)), r.output_text);
  });
});

describe('forced tool calls', () => {
  const validateArgs = ajv.compile(FORECAST.function.parameters);

  test('tool_choice "required": one call with valid arguments, every time', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await srv.client().chat.completions.create({
        model, messages: [{ role: 'user', content: 'Will it rain in Oslo?' }], temperature: 1,
        tools: [FORECAST, CLOCK], tool_choice: 'required', parallel_tool_calls: false,
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0].function;
      assert.ok(['forecast', 'clock'].includes(call.name), call.name);
      if (call.name === 'forecast') assert.ok(validateArgs(JSON.parse(call.arguments)), call.arguments);
    }
  });

  test('a named function is the one called', async () => {
    const r = await srv.client().chat.completions.create({
      model, messages: [{ role: 'user', content: 'What time is it?' }], temperature: 1,
      tools: [CLOCK, FORECAST], tool_choice: { type: 'function', function: { name: 'forecast' } },
    });
    const calls = r.choices[0].message.tool_calls;
    assert.ok(calls.length >= 1);
    for (const c of calls) {
      assert.equal(c.function.name, 'forecast');
      assert.ok(validateArgs(JSON.parse(c.function.arguments)), c.function.arguments);
    }
  });

  test('Anthropic tool_choice "tool" and "any" give a tool_use block', async () => {
    const client = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    const { name, description, parameters } = FORECAST.function;
    for (const tool_choice of [{ type: 'tool', name: 'forecast' }, { type: 'any', disable_parallel_tool_use: true }]) {
      const m = await client.messages.create({
        model, max_tokens: 200, messages: [{ role: 'user', content: 'Rain in Lima?' }],
        tools: [{ name, description, input_schema: parameters }], tool_choice,
      });
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
      const uses = m.content.filter((b) => b.type === 'tool_use');
      assert.equal(uses.length, 1);
      assert.equal(uses[0].name, 'forecast');
      assert.ok(validateArgs(uses[0].input), JSON.stringify(uses[0].input));
    }
  });

  test('Responses API tool_choice "required" gives a function_call item', async () => {
    const r = await srv.client().responses.create({
      model, input: 'Rain in Paris?', temperature: 1, tools: [{ type: 'function', ...FORECAST.function }],
      tool_choice: 'required',
    });
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.ok(calls.length >= 1, JSON.stringify(r.output));
    assert.ok(validateArgs(JSON.parse(calls[0].arguments)), calls[0].arguments);
  });
});

describe('sampling fields', () => {
  test('n choices, streamed and not', async () => {
    const r = await srv.client().chat.completions.create({ model, messages: ASK, n: 3, temperature: 1, max_tokens: 30 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of r.choices) assert.equal(typeof c.message.content, 'string');
    assert.ok(r.usage.completion_tokens >= 3);
    const stream = await srv.client().chat.completions.create({ model, messages: ASK, n: 2, temperature: 1, max_tokens: 20, stream: true });
    const finishes = new Map();
    for await (const chunk of stream)
      for (const c of chunk.choices) if (c.finish_reason) finishes.set(c.index, c.finish_reason);
    assert.deepEqual([...finishes.keys()].sort(), [0, 1]);
  });

  test('logit_bias: -100 bans the greedy first token, +100 forces another', async () => {
    const ask = (extra) => srv.client().chat.completions.create({
      model, messages: ASK, temperature: 0, max_tokens: 3, reasoning_effort: 'none', ...extra,
    });
    const plain = (await ask({})).choices[0].message.content;
    const first = (await tokenize(srv, { prompt: plain }))[0];
    const banned = (await ask({ logit_bias: { [first]: -100 } })).choices[0].message.content;
    assert.notEqual((await tokenize(srv, { prompt: banned }))[0], first, `${plain} / ${banned}`);
    const forced = (await tokenize(srv, { prompt: 'Zebra' }))[0];
    const zebra = (await ask({ logit_bias: { [forced]: 100 } })).choices[0].message.content;
    assert.equal((await tokenize(srv, { prompt: zebra }))[0], forced, zebra);
  });
});

describe('models and defaults', () => {
  test('GET /v1/models/{id}: the served model, and 404 for another', async () => {
    const m = await srv.client().models.retrieve(model);
    assert.equal(m.id, model);
    assert.equal(m.object, 'model');
    await assert.rejects(srv.client().models.retrieve('no-such-model'), NotFoundError);
  });

  test('the default context is the model\'s limit, reported at start-up', async () => {
    const m = await srv.client().models.retrieve(model);
    assert.equal(m.max_model_len, 32768); // the demo model's max_position_embeddings
    assert.match(srv.stderr, /orchid: context 32768 tokens/);
  });
});
