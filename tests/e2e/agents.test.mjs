// Real agent CLIs against `orchid serve`, non-interactively, on a one-tool task: Claude Code
// (Messages API), Codex (Responses API) and Qwen Code (chat completions). The scripted
// backend stands in for a model that calls tools: its fallback reply is a Bash call whose
// output (42-orchid) differs from its text ($((6*7))-orchid), and a rule answers with that output
// only once a prompt holds it — so a CLI that finishes with the answer ran the tool and sent
// its result back.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { REPO, makeModel, makeTempDir, startServer, stopAllServers } from './helpers.mjs';

const MARKER = '42-orchid';
const ANSWER = `The marker file holds ${MARKER}.`;
const bashCall = (tool, arg) =>
  `<tool_call>\n<function=${tool}>\n<parameter=${arg}>\necho $((6*7))-orchid | tee marker.txt\n</parameter>\n` +
  '<parameter=description>\nWrite a marker file\n</parameter>\n</function>\n</tool_call>';

let modelDir;

before(() => {
  modelDir = makeModel();
});

after(async () => {
  await stopAllServers();
});

// Runs a CLI; resolves {code, stdout, stderr}.
function run(bin, args, { cwd, env, timeoutMs = 120000 }) {
  return new Promise((resolve) => {
    const child = execFile(bin, args, { cwd, env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 16 << 20 },
      (error, stdout, stderr) => resolve({ code: error ? error.code ?? 1 : 0, stdout, stderr }));
    child.stdin.end();  // no more input (Codex reads a piped stdin as more prompt)
  });
}

test('Claude Code (Messages API) completes a one-tool task', async () => {
  // Claude Code asks for thinking, so its prompts end in "<think>\n": the answer closes it.
  const srv = await startServer({
    modelDir, backend: 'scripted', ctx: 65536, apiKey: 'sk-ant-e2e',
    script: { replies: [bashCall('Bash', 'command')], rules: [{ contains: MARKER, reply: `The command printed its marker.\n</think>\n\n${ANSWER}` }] },
  });
  const work = makeTempDir('orchid-claude-');
  const r = await run(path.join(REPO, 'node_modules/.bin/claude'),
    ['-p', 'Write the marker file', '--allowedTools', 'Bash', '--output-format', 'json'], {
      cwd: work,
      env: {
        ANTHROPIC_BASE_URL: srv.url, ANTHROPIC_API_KEY: srv.apiKey, HOME: work,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1',
      },
    });
  assert.equal(r.code, 0, `exit ${r.code}\nstdout: ${r.stdout.slice(-2000)}\nstderr: ${r.stderr.slice(-2000)}\n${srv.describe()}`);
  const out = JSON.parse(r.stdout);
  assert.equal(out.is_error, false, r.stdout);
  assert.equal(out.result, ANSWER, r.stdout);
  assert.equal(fs.readFileSync(path.join(work, 'marker.txt'), 'utf8').trim(), MARKER);
  // Its second turn reused the first from the state cache.
  assert.ok(out.usage.cache_read_input_tokens > 1000, JSON.stringify(out.usage));
});

test('Codex CLI (Responses API) completes a one-tool task', async () => {
  // Codex sends reasoning requests too: the replies close the template's "<think>\n" first.
  const call = 'I will run it.\n</think>\n\n<tool_call>\n<function=exec_command>\n<parameter=cmd>\n' +
    'echo $((6*7))-orchid | tee marker.txt\n</parameter>\n</function>\n</tool_call>';
  const srv = await startServer({
    modelDir, backend: 'scripted', ctx: 65536, apiKey: 'sk-codex-e2e',
    script: { replies: [call], rules: [{ contains: MARKER, reply: `The command printed its marker.\n</think>\n\n${ANSWER}` }] },
  });
  const work = makeTempDir('orchid-codex-');
  const provider = `model_providers.orchid={name="orchid",base_url="${srv.baseURL}",wire_api="responses",env_key="ORCHID_KEY"}`;
  // The sandbox needs user namespaces a CI container may not have; the task runs in a temp dir.
  const r = await run(path.join(REPO, 'node_modules/.bin/codex'),
    ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', '-c', provider,
      '-c', 'model_provider=orchid', '-m', 'orchid', 'Write the marker file'], {
      cwd: work, env: { ORCHID_KEY: srv.apiKey, HOME: work },
    });
  assert.equal(r.code, 0, `exit ${r.code}\nstdout: ${r.stdout.slice(-2000)}\nstderr: ${r.stderr.slice(-2000)}\n${srv.describe()}`);
  assert.equal(r.stdout.trim().split('\n').at(-1), ANSWER, r.stdout);
  assert.equal(fs.readFileSync(path.join(work, 'marker.txt'), 'utf8').trim(), MARKER);
});

test('Qwen Code (chat completions) completes a one-tool task', async () => {
  const call = 'I will run it.\n</think>\n\n<tool_call>\n<function=run_shell_command>\n<parameter=command>\n' +
    'echo $((6*7))-orchid | tee marker.txt\n</parameter>\n</function>\n</tool_call>';
  const srv = await startServer({
    modelDir, backend: 'scripted', ctx: 65536, apiKey: 'sk-qwen-e2e',
    script: { replies: [call], rules: [{ contains: MARKER, reply: `The command printed its marker.\n</think>\n\n${ANSWER}` }] },
  });
  const work = makeTempDir('orchid-qwen-');
  // Qwen Code needs Node.js 22 or later: the `node` npm package's binary, first on PATH.
  const bin = path.join(REPO, 'node_modules/.bin');
  const r = await run(path.join(bin, 'qwen'), ['-p', 'Write the marker file', '--yolo'], {
    cwd: work,
    env: {
      PATH: `${bin}:${process.env.PATH}`, HOME: work, QWEN_CODE_SUPPRESS_YOLO_WARNING: '1',
      OPENAI_BASE_URL: srv.baseURL, OPENAI_API_KEY: srv.apiKey, OPENAI_MODEL: 'orchid',
    },
  });
  assert.equal(r.code, 0, `exit ${r.code}\nstdout: ${r.stdout.slice(-2000)}\nstderr: ${r.stderr.slice(-2000)}\n${srv.describe()}`);
  assert.equal(r.stdout.trim(), ANSWER, r.stdout);
  assert.equal(fs.readFileSync(path.join(work, 'marker.txt'), 'utf8').trim(), MARKER);
});
