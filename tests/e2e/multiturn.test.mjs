// Multi-turn reuse on the real CPU backend: a 4-turn conversation that re-sends its whole
// history each turn prefills only the new tokens in turns 2-4, and its greedy replies are
// the same as a fresh server's full prefill of the same histories.
//
// What "new tokens" means. The engine keeps a snapshot where a prompt's last message ends
// (before the generation prompt "<|im_start|>assistant\n<think>\n"), because the next turn
// re-renders the reply its own way (the template drops the reasoning of earlier turns). So
// with H(k-1) = the tokens of turn k-1's messages rendered without the generation prompt,
// P(k) = the tokens of turn k's prompt and L = the common prefix of P(k-1) and P(k):
//   |H(k-1)| <= cached_tokens(k) <= L, and H(k-1) is a prefix of P(k);
// so prompt_tokens - cached_tokens is at most |P(k)| - |H(k-1)|: the previous reply as
// re-rendered, the new user message and the generation prompt. L - |H(k-1)| is the few tokens
// of "<|im_start|>assistant\n" the generation prompt and the re-rendered reply share. The
// token counts come from POST /tokenize {messages, add_generation_prompt}.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { checkUsage, makeModel, modelId, startServer, stopAllServers, tokenize } from './helpers.mjs';

const USER_TURNS = [
  'Hi! Can you help me plan a trip to Paris?',
  'I will be there for three days in May.',
  'What about museums? I like modern art.',
  'Great, and where should I eat on the last evening?',
];
const GREEDY = { temperature: 0, max_tokens: 8 };

let modelDir;
let model;

before(() => {
  modelDir = makeModel();
});

after(async () => {
  await stopAllServers();
});

const commonPrefix = (a, b) => {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
};

const replyOf = (r) => ({
  reasoning: r.choices[0].message.reasoning_content ?? '',
  content: r.choices[0].message.content ?? '',
  finish: r.choices[0].finish_reason,
});

test('4 turns re-sending the history: only new tokens are prefilled; same greedy output as a fresh prefill', { timeout: 120000 }, async () => {
  const srv = await startServer({ modelDir, backend: 'cpu', ctx: 4096 });
  model = await modelId(srv);
  const client = srv.client();
  const messages = [];
  const turns = []; // {messages (sent), reply, usage, promptIds, historyIds}
  for (let k = 0; k < USER_TURNS.length; k++) {
    messages.push({ role: 'user', content: USER_TURNS[k] });
    const sent = structuredClone(messages);
    const r = await client.chat.completions.create({ model, messages: sent, ...GREEDY });
    checkUsage(assert, r.usage, `turn ${k + 1}`);
    const promptIds = await tokenize(srv, { messages: sent, add_generation_prompt: true });
    const historyIds = await tokenize(srv, { messages: sent, add_generation_prompt: false });
    assert.equal(r.usage.prompt_tokens, promptIds.length, `turn ${k + 1}: prompt_tokens vs POST /tokenize`);
    const reply = replyOf(r);
    turns.push({ messages: sent, reply, usage: r.usage, promptIds, historyIds });
    // The reply goes back into the history the way a client sends it.
    const m = r.choices[0].message;
    messages.push({ role: 'assistant', content: m.content ?? '', ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}) });
  }

  const report = [];
  for (let k = 1; k < turns.length; k++) {
    const prev = turns[k - 1];
    const cur = turns[k];
    const cached = cur.usage.prompt_tokens_details.cached_tokens;
    const H = prev.historyIds.length;
    const L = commonPrefix(prev.promptIds, cur.promptIds);
    const what = `turn ${k + 1}: prompt ${cur.usage.prompt_tokens}, cached ${cached}, |H(prev)| ${H}, L ${L}`;
    report.push(what);
    assert.equal(commonPrefix(prev.historyIds, cur.promptIds), H, `${what}: the previous history is not a prefix of this prompt`);
    assert.ok(cached >= H, `${what}: cached_tokens below the previous turn's history — the prefix was prefilled again`);
    assert.ok(cached <= L, `${what}: cached_tokens beyond the common prefix — reused a state that does not match`);
    assert.ok(L - H <= 4, `${what}: the shared head of the generation prompt should be a few tokens`);
    assert.ok(cur.usage.prompt_tokens - cached <= cur.promptIds.length - H, `${what}: prefilled more than the new tokens`);
  }
  console.log(`multi-turn cache: ${report.join('; ')}`);
  assert.equal(turns[0].usage.prompt_tokens_details.cached_tokens, 0, 'turn 1 on a fresh server has nothing cached');

  // The same histories on a fresh server, each a full prefill (nothing cached), in reverse so
  // no request extends another's snapshot: the same greedy replies.
  await srv.stop();
  const fresh = await startServer({ modelDir, backend: 'cpu', ctx: 4096 });
  const fclient = fresh.client();
  for (let k = turns.length - 1; k >= 0; k--) {
    const r = await fclient.chat.completions.create({ model, messages: turns[k].messages, ...GREEDY });
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0, `fresh turn ${k + 1}: a full prefill`);
    assert.equal(r.usage.prompt_tokens, turns[k].usage.prompt_tokens, `fresh turn ${k + 1}: prompt_tokens`);
    assert.deepEqual(replyOf(r), turns[k].reply, `turn ${k + 1}: the reply after cache reuse differs from a full prefill`);
  }
});

// Two conversations interleaved (X1 Y1 X2 Y2 X3 Y3): each resumes from its own live state (the
// server keeps --parallel 4 of them), so every turn after a conversation's first prefills only
// its new tokens.
test('two interleaved conversations both hit the cache on every turn after the first', { timeout: 120000 }, async () => {
  const srv = await startServer({ modelDir, backend: 'cpu', ctx: 4096 });
  model = await modelId(srv);
  const client = srv.client();
  const talks = [
    { turns: ['Plan a trip to Paris.', 'Three days in May.', 'Where to eat?'], messages: [], last: null },
    { turns: ['Explain tides to a child.', 'Why twice a day?', 'And spring tides?'], messages: [], last: null },
  ];
  const report = [];
  for (let k = 0; k < 3; k++) {
    for (const [i, t] of talks.entries()) {
      t.messages.push({ role: 'user', content: t.turns[k] });
      const sent = structuredClone(t.messages);
      const r = await client.chat.completions.create({ model, messages: sent, ...GREEDY });
      const cached = r.usage.prompt_tokens_details.cached_tokens;
      const what = `conversation ${i + 1} turn ${k + 1}: prompt ${r.usage.prompt_tokens}, cached ${cached}`;
      report.push(what);
      if (k > 0) {
        const H = (await tokenize(srv, { messages: t.last, add_generation_prompt: false })).length;
        assert.ok(cached >= H, `${what}: below the previous turn's history (${H}): the other conversation evicted it`);
      }
      t.last = sent;
      t.messages.push({ role: 'assistant', content: r.choices[0].message.content ?? '' });
    }
  }
  console.log(`interleaved: ${report.join('; ')}`);
});
