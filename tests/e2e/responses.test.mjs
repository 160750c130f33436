// The OpenAI Responses API (/v1/responses) through the official openai client: text and
// reasoning items, streaming events, function calls and their outputs, previous_response_id
// resumed from the state cache, errors — against the scripted backend.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  REASONING_REPLY, TOOL_REPLY, WEATHER_TOOL as CHAT_WEATHER_TOOL, makeModel, postJson, startServer, stopAllServers,
} from './helpers.mjs';

// The chat tests' tool in the Responses API's flat form.
const WEATHER_TOOL = { type: 'function', ...CHAT_WEATHER_TOOL.function };

let reasoningSrv; // scripted: REASONING_REPLY
let toolSrv; // scripted: reasoning then TOOL_REPLY, or an answer once a tool output is in the prompt
const model = 'orchid';

before(async () => {
  const modelDir = makeModel();
  [reasoningSrv, toolSrv] = await Promise.all([
    startServer({ modelDir, backend: 'scripted', script: [REASONING_REPLY] }),
    startServer({
      modelDir, backend: 'scripted',
      // As a model writes it after the template's "<think>\n": reasoning, then the call.
      script: { replies: [`I will call the tool.\n</think>\n\n${TOOL_REPLY}`], rules: [{ contains: 'sunny', reply: 'It is sunny.\n</think>\n\nSunny in Paris.' }] },
    }),
  ]);
});

after(async () => {
  await stopAllServers();
});

function checkResponse(r, what) {
  assert.equal(r.object, 'response', what);
  assert.match(r.id, /^resp_/, what);
  assert.ok(Number.isInteger(r.created_at), what);
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, `${what}: ${JSON.stringify(r.usage)}`);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens, what);
}

const shape = (output) => output.map((o) =>
  o.type === 'reasoning' ? { type: o.type, summary: o.summary.map((s) => s.text).join('') }
    : o.type === 'message' ? { type: o.type, role: o.role, text: o.content.map((c) => c.text).join('') }
      : { type: o.type, name: o.name, arguments: JSON.parse(o.arguments) });

describe('scripted backend: text and reasoning', () => {
  const expected = [
    { type: 'reasoning', summary: 'Let me think.' },
    { type: 'message', role: 'assistant', text: 'Hello there!' },
  ];

  test('non-streaming: a reasoning item and a message; output_text; instructions echoed', async () => {
    const r = await reasoningSrv.client().responses.create({ model, input: 'Hi?', instructions: 'Be brief.' });
    checkResponse(r, 'create');
    assert.equal(r.status, 'completed');
    assert.deepEqual(shape(r.output), expected);
    assert.equal(r.output_text, 'Hello there!');
    assert.equal(r.instructions, 'Be brief.');
  });

  test('streaming: typed events in order with rising sequence numbers; the same response', async () => {
    const stream = reasoningSrv.client().responses.stream({ model, input: [{ role: 'user', content: 'Hi?' }] });
    const events = [];
    stream.on('event', (e) => events.push(e));
    const r = await stream.finalResponse();
    checkResponse(r, 'stream');
    assert.deepEqual(shape(r.output), expected);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
    assert.equal(types.at(-1), 'response.completed');
    for (const t of ['response.output_item.added', 'response.reasoning_summary_text.delta', 'response.content_part.added',
      'response.output_text.delta', 'response.output_text.done', 'response.output_item.done'])
      assert.ok(types.includes(t), `${t} missing: ${types.join(',')}`);
    events.forEach((e, i) => assert.equal(e.sequence_number, i, JSON.stringify(e)));
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(text, 'Hello there!');
  });

  test('max_output_tokens: status incomplete', async () => {
    const r = await reasoningSrv.client().responses.create({ model, input: 'Hi?', max_output_tokens: 2 });
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  });
});

describe('scripted backend: function calls', () => {
  test('a function_call item; the output resumed by previous_response_id hits the state cache', async () => {
    const c = toolSrv.client();
    const first = await c.responses.create({ model, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
    checkResponse(first, 'first');
    const call = first.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(first.output));
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris', days: 3 });
    assert.match(call.call_id, /^call_/);
    const second = await c.responses.create({
      model, previous_response_id: first.id, tools: [WEATHER_TOOL],
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"forecast":"sunny"}' }],
    });
    checkResponse(second, 'second');
    assert.equal(second.output_text, 'Sunny in Paris.');
    assert.equal(second.previous_response_id, first.id);
    // The state cache holds the first prompt and its reply (all but the last token, never fed back).
    assert.ok(second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens + first.usage.output_tokens - 1,
      `${JSON.stringify(second.usage)} after ${JSON.stringify(first.usage)}`);
  });

  test('streaming: the call arrives as added, arguments delta and done events', async () => {
    const stream = toolSrv.client().responses.stream({ model, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
    const types = [];
    stream.on('event', (e) => types.push(e.type));
    const r = await stream.finalResponse();
    assert.deepEqual(shape(r.output).filter((o) => o.type === 'function_call'),
      [{ type: 'function_call', name: 'get_weather', arguments: { city: 'Paris', days: 3 } }]);
    assert.ok(types.includes('response.function_call_arguments.delta'), types.join(','));
    assert.ok(types.includes('response.function_call_arguments.done'), types.join(','));
  });

  test('the whole conversation as input items, unstored', async () => {
    const c = toolSrv.client();
    const first = await c.responses.create({ model, input: 'Weather in Paris?', tools: [WEATHER_TOOL], store: false });
    const call = first.output.find((o) => o.type === 'function_call');
    const r = await c.responses.create({
      model, tools: [WEATHER_TOOL],
      input: [{ role: 'user', content: 'Weather in Paris?' }, ...first.output,
        { type: 'function_call_output', call_id: call.call_id, output: 'sunny' }],
    });
    assert.equal(r.output_text, 'Sunny in Paris.');
    const missing = await postJson(toolSrv, '/v1/responses', { model, previous_response_id: first.id, input: 'x' });
    assert.equal(missing.status, 404, missing.text);
  });
});

test('bad bodies are 400s naming the field', async () => {
  const cases = [
    [{ model }, 'input'],
    [{ model, input: 3 }, 'input'],
    [{ model, input: [{ type: 'input_image', image_url: 'x' }] }, 'input[0].type'],
    [{ model, input: [{ role: 'user', content: [{ type: 'input_image' }] }] }, 'input[0].content[0].type'],
    [{ model, input: 'x', tools: [{ type: 'function', name: 'f', parameters: 3 }] }, 'tools[0].parameters'],
    [{ model, input: 'x', tool_choice: 'required' }, 'tool_choice'],
    [{ model, input: 'x', tool_choice: { type: 'function', name: 'nope' }, tools: [WEATHER_TOOL] }, 'tool_choice.name'],
    [{ model, input: 'x', text: { format: { type: 'xml' } } }, 'text.format.type'],
    [{ model, input: 'x', text: { format: { type: 'json_schema', schema: { type: 'string', format: 'email' } } } }, 'text.format.schema'],
    [{ model, input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '[1]' }] }, 'input[0].arguments'],
  ];
  for (const [body, param] of cases) {
    const r = await postJson(reasoningSrv, '/v1/responses', body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.param, param, `${JSON.stringify(body)}: ${r.text}`);
  }
});
