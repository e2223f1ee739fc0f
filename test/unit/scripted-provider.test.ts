import test, { type ExecutionContext } from 'ava';
import { mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadScenario, parseScenario, type Scenario } from '../../activities/model/scenario';
import { ScriptedProvider } from '../../activities/model/scripted';
import { ModelError, type ChatMessage, type ModelErrorCode, type ModelRequest } from '../../activities/model/types';
import { CHILD_TOOLS } from '../../workflows/tools';

const scenario: Scenario = parseScenario({
  name: 'unit',
  turns: [
    {
      expect: { taskIncludes: ['NOTES.md'] },
      steps: [
        { tool_calls: [{ name: 'write_file', arguments: { path: 'NOTES.md', content: 'hello' } }] },
        {
          content: 'Checking.',
          tool_calls: [{ name: 'bash', arguments: { command: 'cat NOTES.md' } }, { name: 'git_status' }],
        },
        { content: 'Done with turn {{turn}}.' },
      ],
    },
    {
      expect: { historyIncludes: ['NOTES.md', 'Done with turn 1.'] },
      steps: [
        { content: 'Looping.' },
        {
          content: 'Step {{step}}.',
          tool_calls: [{ name: 'bash', arguments: { command: 'echo {{step}}' } }],
          repeat: true,
        },
      ],
    },
  ],
});

/** Builds the conversation a session would send: each turn's task, then per step the answer and tool results. */
function conversation(...turns: { task: string; answered: ChatMessage[] }[]): ModelRequest {
  const messages: ChatMessage[] = [{ role: 'system', content: 'You are a scripted test.' }];
  for (const turn of turns) messages.push({ role: 'user', content: turn.task }, ...turn.answered);
  return { messages, tools: CHILD_TOOLS };
}

/** Plays a turn against the provider, answering every tool call, until `steps` answers have been collected. */
async function play(provider: ScriptedProvider, request: ModelRequest, steps: number): Promise<ChatMessage[]> {
  const answered: ChatMessage[] = [];
  for (let i = 0; i < steps; i++) {
    const { message } = await provider.complete({ ...request, messages: [...request.messages, ...answered] });
    answered.push(message);
    for (const call of message.tool_calls ?? []) {
      answered.push({ role: 'tool', tool_call_id: call.id, content: `ran ${call.function.name}` });
    }
  }
  return answered;
}

async function modelError(t: ExecutionContext, promise: Promise<unknown>, code: ModelErrorCode): Promise<ModelError> {
  const err = await t.throwsAsync(promise);
  if (!(err instanceof ModelError)) throw new Error(`expected a ModelError, got ${String(err)}`);
  t.is(err.code, code);
  t.false(err.retryable);
  return err;
}

test('turn 1 step 1 answers its tool call with a deterministic id and JSON arguments', async (t) => {
  const provider = new ScriptedProvider(scenario);
  t.is(provider.name, 'scripted');
  const response = await provider.complete(conversation({ task: 'Create NOTES.md please', answered: [] }));
  t.deepEqual(response.message, {
    role: 'assistant',
    content: null,
    tool_calls: [
      {
        id: 'call_t1_s1_1',
        type: 'function',
        function: { name: 'write_file', arguments: '{"path":"NOTES.md","content":"hello"}' },
      },
    ],
  });
  t.is(response.finishReason, 'tool_calls');
  t.is(response.model, 'scripted-unit');
  t.true(response.usage!.promptTokens > 0);
  t.true(response.usage!.completionTokens > 0);
  t.is(response.usage!.totalTokens, response.usage!.promptTokens + response.usage!.completionTokens);
});

test('the step is the number of assistant messages since the last user message', async (t) => {
  const provider = new ScriptedProvider(scenario);
  const answered = await play(provider, conversation({ task: 'Create NOTES.md', answered: [] }), 3);
  const assistants = answered.filter((m) => m.role === 'assistant');
  t.deepEqual(
    assistants.map((m) => m.content),
    [null, 'Checking.', 'Done with turn 1.'],
  );
  const second = assistants[1];
  t.deepEqual(second.role === 'assistant' ? second.tool_calls?.map((c) => [c.id, c.function.name, c.function.arguments]) : [], [
    ['call_t1_s2_1', 'bash', '{"command":"cat NOTES.md"}'],
    ['call_t1_s2_2', 'git_status', '{}'],
  ]);
  const last = await provider.complete(conversation({ task: 'Create NOTES.md', answered: answered.slice(0, 5) }));
  t.is(last.finishReason, 'stop');
});

test('the turn is the number of user messages, and a repeating last step answers every later step', async (t) => {
  const provider = new ScriptedProvider(scenario);
  const turn1 = await play(provider, conversation({ task: 'Create NOTES.md', answered: [] }), 3);
  const request = conversation({ task: 'Create NOTES.md', answered: turn1 }, { task: 'Keep going', answered: [] });
  const turn2 = (await play(provider, request, 6)).filter((m) => m.role === 'assistant');
  t.deepEqual(
    turn2.map((m) => m.content),
    ['Looping.', 'Step 2.', 'Step 3.', 'Step 4.', 'Step 5.', 'Step 6.'],
  );
  const ids = turn2.flatMap((m) => (m.role === 'assistant' ? (m.tool_calls ?? []).map((c) => c.id) : []));
  t.deepEqual(ids, ['call_t2_s2_1', 'call_t2_s3_1', 'call_t2_s4_1', 'call_t2_s5_1', 'call_t2_s6_1']);
  const sixth = turn2[5];
  t.is(sixth.role === 'assistant' ? sixth.tool_calls?.[0].function.arguments : '', '{"command":"echo 6"}');
});

test('a repeating last turn answers every later turn; a repeat on an earlier turn is invalid', async (t) => {
  const repeating = new ScriptedProvider(
    parseScenario({ name: 'many', turns: [{ steps: [{ content: 'first' }] }, { repeat: true, steps: [{ content: 'turn {{turn}}' }] }] }),
  );
  const turns = Array.from({ length: 5 }, (_, i) => ({ task: `task ${i + 1}`, answered: [] as ChatMessage[] }));
  for (let n = 1; n <= 5; n++) {
    const { message } = await repeating.complete(conversation(...turns.slice(0, n)));
    t.is(message.content, n === 1 ? 'first' : `turn ${n}`);
    turns[n - 1].answered = [message];
  }
  const err = t.throws(() => parseScenario({ name: 'bad', turns: [{ repeat: true, steps: [{ content: 'x' }] }, { steps: [{ content: 'y' }] }] }));
  t.regex(String(err), /turns\[0\]\.repeat: only the last turn may repeat/);
});

test('a step beyond the script is scenario_exhausted, naming the turn and step', async (t) => {
  const provider = new ScriptedProvider(scenario);
  const turn1 = await play(provider, conversation({ task: 'Create NOTES.md', answered: [] }), 3);
  const beyond = await modelError(t, provider.complete(conversation({ task: 'Create NOTES.md', answered: turn1 })), 'scenario_exhausted');
  t.regex(beyond.message, /turn 1 scripts 3 step\(s\); this request asks for step 4/);

  const three = conversation({ task: 'NOTES.md', answered: [] }, { task: 'Done with turn 1.', answered: [] }, { task: 'again', answered: [] });
  const noTurn = await modelError(t, provider.complete(three), 'scenario_exhausted');
  t.regex(noTurn.message, /scripts 2 turn\(s\); this request is turn 3/);
  const noUser: ModelRequest = { messages: [{ role: 'system', content: 's' }], tools: [] };
  await modelError(t, provider.complete(noUser), 'scenario_exhausted');
});

test('a task missing a taskIncludes string is scenario_expectation_failed, saying which string', async (t) => {
  const provider = new ScriptedProvider(scenario);
  const err = await modelError(t, provider.complete(conversation({ task: 'Write a README', answered: [] })), 'scenario_expectation_failed');
  t.true(err.message.includes('"NOTES.md"'), err.message);
  t.true(err.message.includes('Write a README'), err.message);
});

test('a conversation missing a historyIncludes string is scenario_expectation_failed, naming it', async (t) => {
  const provider = new ScriptedProvider(scenario);
  // Turn 2 without turn 1's final answer: the session lost part of its history.
  const turn1 = await play(provider, conversation({ task: 'Create NOTES.md', answered: [] }), 2);
  const err = await modelError(
    t,
    provider.complete(conversation({ task: 'Create NOTES.md', answered: turn1 }, { task: 'more', answered: [] })),
    'scenario_expectation_failed',
  );
  t.true(err.message.includes('"Done with turn 1."'), err.message);
});

test('expectations are checked on the first step of a turn only', async (t) => {
  const provider = new ScriptedProvider(scenario);
  // Step 2 of turn 1 with a task that would fail the expectation: no check, the step is answered.
  const response = await provider.complete(conversation({ task: 'Write a README', answered: [{ role: 'assistant', content: 'hm' }] }));
  t.is(response.message.content, 'Checking.');
});

test('the same request gets the same bytes, from any provider instance', async (t) => {
  const request = conversation({ task: 'Create NOTES.md', answered: [] });
  const a = await new ScriptedProvider(scenario).complete(request);
  const b = await new ScriptedProvider(scenario).complete(structuredClone(request));
  const c = await new ScriptedProvider(scenario).complete(request);
  t.is(JSON.stringify(a), JSON.stringify(b));
  t.is(JSON.stringify(a), JSON.stringify(c));
});

test('an aborted signal rejects with its reason', async (t) => {
  const controller = new AbortController();
  const reason = new Error('cancelled');
  controller.abort(reason);
  const err = await t.throwsAsync(new ScriptedProvider(scenario).complete(conversation({ task: 'NOTES.md', answered: [] }), controller.signal));
  t.is(err, reason);
});

test('an invalid scenario is scenario_invalid, naming the path of the bad field', (t) => {
  const cases: [unknown, RegExp][] = [
    [{ turns: [] }, /name: /],
    [{ name: 'x', turns: [] }, /turns: Too small/],
    [{ name: 'x', turns: [{ steps: [{}] }] }, /turns\[0\]\.steps\[0\]: a step needs/],
    [{ name: 'x', turns: [{ steps: [{ tool_calls: [{ arguments: {} }] }] }] }, /turns\[0\]\.steps\[0\]\.tool_calls\[0\]\.name/],
    [{ name: 'x', turns: [{ steps: [{ toolcalls: [] }] }] }, /turns\[0\]\.steps\[0\].*toolcalls/],
    [{ name: 'x', turns: [{ steps: [{ content: 'a', repeat: true }, { content: 'b' }] }] }, /turns\[0\]\.steps\[0\]\.repeat: only the last/],
    [{ name: 'x', turns: [{ steps: [{ content: 'a' }], expect: { taskIncludes: 'NOTES' } }] }, /turns\[0\]\.expect\.taskIncludes/],
  ];
  for (const [value, pattern] of cases) {
    const err = t.throws(() => parseScenario(value), { instanceOf: ModelError });
    t.is((err as ModelError).code, 'scenario_invalid');
    t.regex(err.message, pattern);
  }
});

test('loadScenario reads YAML and JSON, re-reads changed files, and reports bad ones as invalid', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'orchard-scenario-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const yamlPath = join(dir, 'flow.yaml');
  await writeFile(yamlPath, 'name: flow\nturns:\n  - steps:\n      - content: "Hi from YAML"\n');
  const fromYaml = await loadScenario(yamlPath);
  t.is(fromYaml.turns![0].steps[0].content, 'Hi from YAML');
  t.is(await loadScenario(yamlPath), fromYaml, 'an unchanged file comes from the cache');

  await writeFile(yamlPath, 'name: flow\nturns:\n  - steps:\n      - content: "Changed"\n');
  const later = new Date(Date.now() + 5_000);
  await utimes(yamlPath, later, later);
  t.is((await loadScenario(yamlPath)).turns![0].steps[0].content, 'Changed');

  const badJson = join(dir, 'bad.json');
  await writeFile(badJson, '{"name": "x", "turns": [');
  const notJson = await t.throwsAsync(loadScenario(badJson), { instanceOf: ModelError });
  t.is((notJson as ModelError).code, 'scenario_invalid');
  t.true(notJson.message.includes(badJson) && notJson.message.includes('not valid JSON'), notJson.message);

  const badField = join(dir, 'field.yml');
  await writeFile(badField, 'name: x\nturns:\n  - steps:\n      - tool_calls:\n          - name: 3\n');
  const wrong = await t.throwsAsync(loadScenario(badField), { instanceOf: ModelError });
  t.true(wrong.message.includes('turns[0].steps[0].tool_calls[0].name'), wrong.message);

  const missing = await t.throwsAsync(loadScenario(join(dir, 'nope.json')), { instanceOf: ModelError });
  t.is((missing as ModelError).code, 'scenario_invalid');
  t.true(missing.message.includes('nope.json'));
});

test('scenarios/demo.json loads, validates and plays both turns with the demo tools', async (t) => {
  const demo = await loadScenario(join(__dirname, '../../scenarios/demo.json'));
  t.is(demo.name, 'demo');
  const provider = new ScriptedProvider(demo);
  const toolNames = new Set(CHILD_TOOLS.map((tool) => tool.name));

  const task1 = 'Please create NOTES.md describing this repo';
  const turn1 = await play(provider, conversation({ task: task1, answered: [] }), 4);
  const turn2 = await play(
    provider,
    conversation({ task: task1, answered: turn1 }, { task: 'Now add a CHANGELOG that references the notes', answered: [] }),
    4,
  );
  const calls = [...turn1, ...turn2].flatMap((m) => (m.role === 'assistant' ? (m.tool_calls ?? []) : []));
  t.deepEqual(
    calls.map((c) => c.function.name),
    ['write_file', 'bash', 'git_commit', 'read_file', 'write_file', 'git_commit'],
  );
  for (const call of calls) {
    t.true(toolNames.has(call.function.name));
    t.notThrows(() => JSON.parse(call.function.arguments));
  }
  t.is(JSON.parse(calls[1].function.arguments).command, 'cat NOTES.md && ls');
  t.is(JSON.parse(calls[4].function.arguments).path, 'CHANGELOG.md');
  const finals = [turn1[turn1.length - 1], turn2[turn2.length - 1]];
  t.true(finals.every((m) => m.role === 'assistant' && !m.tool_calls && typeof m.content === 'string'));

  // Turn 2 insists on turn 1's history: a fresh session asked for the changelog fails loudly.
  await modelError(
    t,
    provider.complete(conversation({ task: 'Create NOTES.md', answered: [] }, { task: 'Now add a CHANGELOG', answered: [] })),
    'scenario_expectation_failed',
  );
});

test('the example in scenarios/FORMAT.md is a valid scenario', async (t) => {
  const doc = await readFile(join(__dirname, '../../scenarios/FORMAT.md'), 'utf8');
  const example = /```json\n([\s\S]*?)```/.exec(doc);
  t.truthy(example, 'FORMAT.md has a json example');
  t.notThrows(() => parseScenario(JSON.parse(example![1]), 'FORMAT.md'));
});
