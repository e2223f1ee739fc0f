import test, { type ExecutionContext } from 'ava';
import { join } from 'node:path';
import { coordinatorPrompt, systemPrompt } from '../../activities/model/prompt';
import { loadScenario, parseScenario, type Scenario } from '../../activities/model/scenario';
import { ScriptedProvider } from '../../activities/model/scripted';
import { ModelError, type AssistantMessage, type ChatMessage, type ModelErrorCode, type ModelRequest } from '../../activities/model/types';
import { CHILD_TOOLS, TOOL_PROFILES } from '../../workflows/tools';

const TEAM = join(__dirname, '../../scenarios/team.json');

const scenario: Scenario = parseScenario({
  name: 'coordinator-unit',
  coordinator: {
    tasks: [
      { taskId: 'implement', title: 'Implement', description: 'Write it on orchard/{{session:implementer}}.', owner: 'implementer' },
      { taskId: 'test', title: 'Test', description: 'Test what orchard/{{session:implementer}} has.', owner: 'tester', after: 'implement' },
    ],
    summary: 'Delivered, certificate {{certificate}}.',
    reply: 'Done: {{result}}',
    waiting: 'Waiting.',
  },
  members: {
    implementer: [{ steps: [{ content: 'implemented task {{turn}}' }], repeat: true }],
    tester: [
      {
        bind: { branch: 'on (orchard/[a-z0-9-]+)' },
        steps: [
          { content: 'testing {{branch}}', tool_calls: [{ name: 'bash', arguments: { command: 'git show {{branch}}:a.js' } }] },
          { content: 'tested {{branch}}' },
        ],
      },
    ],
  },
});

/** The member rows a team's Coordinator request carries under its prompt (as the team workflow renders them). */
const ROSTER = [
  'Your members (give each task to one of them):',
  'member | role | session',
  'implementer | Implementer | t1-implementer',
  'tester | Tester | t1-tester',
].join('\n');

function coordinatorRequest(conversation: ChatMessage[]): ModelRequest {
  const system = coordinatorPrompt({ title: 'Build it', agent: 'coordinator', worktree: '', branch: '', roster: ROSTER });
  return { messages: [{ role: 'system', content: system }, ...conversation], tools: TOOL_PROFILES.coordinator };
}

function memberRequest(agent: string, task: string, answered: ChatMessage[] = []): ModelRequest {
  const system = systemPrompt({ title: `${agent} of team t1`, agent, worktree: `/wt/t1-${agent}`, branch: `orchard/t1-${agent}` });
  return { messages: [{ role: 'system', content: system }, { role: 'user', content: task }, ...answered], tools: CHILD_TOOLS };
}

const user = (content: string): ChatMessage => ({ role: 'user', content });
const callsOf = (message: AssistantMessage) => (message.tool_calls ?? []).map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]);

async function answer(request: ModelRequest, s: Scenario = scenario): Promise<AssistantMessage> {
  return (await new ScriptedProvider(s).complete(request)).message as AssistantMessage;
}

async function modelError(t: ExecutionContext, promise: Promise<unknown>, code: ModelErrorCode): Promise<ModelError> {
  const err = await t.throwsAsync(promise);
  if (!(err instanceof ModelError)) throw new Error(`expected a ModelError, got ${String(err)}`);
  t.is(err.code, code);
  return err;
}

/** A finished first turn: the goal, the plan's calls and their results, the closing text. */
async function firstTurn(): Promise<ChatMessage[]> {
  const plan = await answer(coordinatorRequest([user('Build it')]));
  const results: ChatMessage[] = (plan.tool_calls ?? []).map((c) => ({ role: 'tool', tool_call_id: c.id, content: `ok ${c.function.name}` }));
  return [user('Build it'), plan, ...results, { role: 'assistant', content: 'Done: ok plan_approve' }];
}

test('on the goal it creates the planned tasks (owners for those that start with the plan, sessions from the request) and approves', async (t) => {
  const message = await answer(coordinatorRequest([user('Build a poker hand evaluator')]));
  t.deepEqual(callsOf(message), [
    ['call_t1_s1_1', 'task_create', { taskId: 'implement', title: 'Implement', description: 'Write it on orchard/t1-implementer.', owner: 'implementer' }],
    ['call_t1_s1_2', 'task_create', { taskId: 'test', title: 'Test', description: 'Test what orchard/t1-implementer has.' }],
    ['call_t1_s1_3', 'plan_approve', {}],
  ]);
});

test('after tool results it ends the turn: the summary cites the certificate when one was issued, else the reply', async (t) => {
  const plan = await answer(coordinatorRequest([user('Build it')]));
  const results: ChatMessage[] = plan.tool_calls!.map((c) => ({ role: 'tool', tool_call_id: c.id, content: `did ${c.function.name}\nmore` }));
  const ended = await new ScriptedProvider(scenario).complete(coordinatorRequest([user('Build it'), plan, ...results]));
  t.deepEqual(ended.message, { role: 'assistant', content: 'Done: did plan_approve' });
  t.is(ended.finishReason, 'stop');

  const wake = user(
    'Work facts changed (revision 7):\n- task test completed by tester: ok\n- completion_candidate.state is ready: call org_run_complete now, directly, without task_list first.',
  );
  const complete = await answer(coordinatorRequest([...(await firstTurn()), wake]));
  const certified: ChatMessage = {
    role: 'tool',
    tool_call_id: complete.tool_calls![0].id,
    content: 'delivered: certificate cert-t1-g1-r7\n{"certificateId":"cert-t1-g1-r7"}\nNow give the user your final summary, citing the certificate.',
  };
  const summary = await answer(coordinatorRequest([...(await firstTurn()), wake, complete, certified]));
  t.deepEqual(summary, { role: 'assistant', content: 'Delivered, certificate cert-t1-g1-r7.' });
});

test('a wake that says the candidate is ready is answered with org_run_complete, first and only', async (t) => {
  const wake = user(
    'Work facts changed (revision 7):\n- task test completed by tester: ok\n- completion_candidate.state is ready: call org_run_complete now, directly, without task_list first.',
  );
  const message = await answer(coordinatorRequest([...(await firstTurn()), wake]));
  t.deepEqual(callsOf(message), [['call_t2_s1_1', 'org_run_complete', { summary: 'Every planned task is completed with evidence.' }]]);
});

test('a wake that reports a task completed assigns the tasks planned after it; nothing else assigns them', async (t) => {
  const done = user('Work facts changed (revision 4):\n- task implement completed by implementer: implemented');
  t.deepEqual(callsOf(await answer(coordinatorRequest([...(await firstTurn()), done]))), [
    ['call_t2_s1_1', 'task_assign', { taskId: 'test', owner: 'tester' }],
  ]);
  // Another task's id that merely starts with it, a failure, a user message: no tool call, the turn ends.
  for (const text of [
    'Work facts changed (revision 4):\n- task implement-more completed by implementer: x',
    'Work facts changed (revision 4):\n- task implement failed by implementer: execution ended failed',
    'is the task implement completed?',
  ]) {
    const response = await new ScriptedProvider(scenario).complete(coordinatorRequest([...(await firstTurn()), user(text)]));
    t.deepEqual(response.message, { role: 'assistant', content: 'Waiting.' }, text);
    t.is(response.finishReason, 'stop');
  }
});

test('completeOn: a user message with one of its phrases is answered with org_run_complete whatever the board; without completeOn it waits', async (t) => {
  const asking = parseScenario({ ...scenario, coordinator: { ...scenario.coordinator, completeOn: ['complete the run'] } });
  const ask = user('Every task is cancelled: Complete the Run now.');
  t.deepEqual(callsOf(await answer(coordinatorRequest([...(await firstTurn()), ask]), asking)), [
    ['call_t2_s1_1', 'org_run_complete', { summary: 'Every planned task is completed with evidence.' }],
  ]);
  // The refusal that comes back ends the turn with the reply, which quotes it.
  const complete = await answer(coordinatorRequest([...(await firstTurn()), ask]), asking);
  const refused: ChatMessage = {
    role: 'tool',
    tool_call_id: complete.tool_calls![0].id,
    content: 'error (completion_refused): the run is cancelled: all_cancelled; nothing was changed',
  };
  t.deepEqual(await answer(coordinatorRequest([...(await firstTurn()), ask, complete, refused]), asking), {
    role: 'assistant',
    content: 'Done: error (completion_refused): the run is cancelled: all_cancelled; nothing was changed',
  });
  for (const [s, text] of [
    [scenario, 'Every task is cancelled: complete the run now.'],
    [asking, 'Work facts changed (revision 9):\n- the user cancelled task test (not needed) before it ran'],
  ] as const) {
    t.deepEqual(await answer(coordinatorRequest([...(await firstTurn()), user(text)]), s), { role: 'assistant', content: 'Waiting.' }, text);
  }
});

test('driver.reassign and driver.cancelAll name a planned task and a relative log path, or the scenario is scenario_invalid', (t) => {
  const reassign = { taskId: 'test', to: 'reviewer', reason: 'slow', log: 'sweep.log' };
  t.is(parseScenario({ ...scenario, driver: { reassign } }).driver!.reassign!.lines, 5);
  const invalid = (value: unknown) => t.throws(() => parseScenario({ ...scenario, driver: value }), { instanceOf: ModelError })!.message;
  t.regex(invalid({ reassign: { ...reassign, taskId: 'nope' } }), /driver\.reassign\.taskId: "nope" is not a task of the coordinator's plan/);
  t.regex(invalid({ reassign: { ...reassign, log: '../out.log' } }), /driver\.reassign\.log: a relative path inside the worktree/);
  t.regex(invalid({ reassign: { ...reassign, lines: 0 } }), /driver\.reassign\.lines/);
  t.regex(invalid({ reasign: reassign }), /driver/);
  const cancelAll = { taskId: 'implement', log: 'w.log', reason: 'dropped', message: 'complete the run' };
  t.is(parseScenario({ ...scenario, driver: { cancelAll } }).driver!.cancelAll!.lines, 5);
  t.regex(invalid({ cancelAll: { ...cancelAll, taskId: 'ghost' } }), /driver\.cancelAll\.taskId: "ghost" is not a task of the coordinator's plan/);
  t.regex(invalid({ cancelAll: { ...cancelAll, log: '/etc/passwd' } }), /driver\.cancelAll\.log: a relative path inside the worktree/);
  t.regex(invalid({ cancelAll: { ...cancelAll, message: undefined } }), /driver\.cancelAll\.message/);
});

test('a planned description naming a member the request does not list is scenario_expectation_failed', async (t) => {
  const ghost = parseScenario({
    ...scenario,
    coordinator: { tasks: [{ taskId: 'a', title: 'A', description: 'on {{session:ghost}}', owner: 'implementer' }] },
  });
  const err = await modelError(t, new ScriptedProvider(ghost).complete(coordinatorRequest([user('Build it')])), 'scenario_expectation_failed');
  t.regex(err.message, /\{\{session:ghost\}\}: the request lists no member ghost \(members: implementer, tester\)/);
});

test('member requests follow the turns of the agent their system message names; an unlisted agent falls back to `turns` or is exhausted', async (t) => {
  t.deepEqual(await answer(memberRequest('implementer', 'Task implement: write it')), { role: 'assistant', content: 'implemented task 1' });
  const withFallback = parseScenario({ ...scenario, turns: [{ steps: [{ content: 'fallback' }] }] });
  t.deepEqual(await answer(memberRequest('reviewer', 'review'), withFallback), { role: 'assistant', content: 'fallback' });
  const err = await modelError(t, new ScriptedProvider(scenario).complete(memberRequest('reviewer', 'review')), 'scenario_exhausted');
  t.regex(err.message, /scripts no turns for agent reviewer: its members are implementer, tester/);
});

test('bind reads a value from the task into the steps (JSON-escaped in arguments); a task it does not match fails the turn', async (t) => {
  const message = await answer(memberRequest('tester', 'Test what is on orchard/t1-implementer now'));
  t.is(message.content, 'testing orchard/t1-implementer');
  t.deepEqual(callsOf(message), [['call_t1_s1_1', 'bash', { command: 'git show orchard/t1-implementer:a.js' }]]);
  const quoting = parseScenario({
    name: 'q',
    turns: [{ bind: { v: 'say (.*)$' }, steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'echo {{v}}' } }] }] }],
  });
  const quoted = await answer(memberRequest('coder', 'say "hi" \\ there'), quoting);
  t.deepEqual(callsOf(quoted)[0][2], { command: 'echo "hi" \\ there' });
  const err = await modelError(t, new ScriptedProvider(scenario).complete(memberRequest('tester', 'no branch here')), 'scenario_expectation_failed');
  t.regex(err.message, /binds \{\{branch\}\} to \/on \(orchard\/\[a-z0-9-\]\+\)\/, which the task does not match/);
});

test('invalid coordinator, members and bind definitions are scenario_invalid, naming the field', (t) => {
  const invalid = (value: unknown) => t.throws(() => parseScenario(value), { instanceOf: ModelError })!.message;
  t.regex(invalid({ name: 'x' }), /turns: a scenario needs `turns`, `members`, or both/);
  t.regex(
    invalid({ ...scenario, coordinator: { tasks: [{ taskId: 'a', title: 'A', description: 'd', owner: 'o', after: 'zzz' }] } }),
    /coordinator\.tasks\[0\]\.after: "zzz" is not another planned task/,
  );
  t.regex(
    invalid({
      ...scenario,
      coordinator: {
        tasks: [
          { taskId: 'a', title: 'A', description: 'd', owner: 'o' },
          { taskId: 'a', title: 'B', description: 'd', owner: 'o' },
        ],
      },
    }),
    /coordinator\.tasks\[1\]\.taskId: "a" is listed twice/,
  );
  t.regex(
    invalid({ name: 'x', members: { tester: [{ bind: { v: '(' }, steps: [{ content: 'x' }] }] } }),
    /members\.tester\[0\]\.bind\.v: not a regular expression/,
  );
});

test("scenarios/team.json plays a whole run: the plan, the Tester reading the Implementer's branch named in its task, the completion", async (t) => {
  const team = await loadScenario(TEAM);
  const plan = await answer(coordinatorRequest([user('Build a poker hand evaluator with tests')]), team);
  const creates = callsOf(plan).filter(([, name]) => name === 'task_create');
  t.deepEqual(
    creates.map(([, , args]) => [args.taskId, args.owner]),
    [
      ['implement-evaluator', 'implementer'],
      ['test-evaluator', undefined],
    ],
  );
  // The Tester's task is the description the Coordinator wrote; its first command takes evaluator.js from that branch.
  const testTask = `Task test-evaluator: Test the poker hand evaluator\n\n${creates[1][2].description}`;
  const first = await answer(memberRequest('tester', testTask), team);
  t.deepEqual(callsOf(first)[0][2], { command: 'git show orchard/t1-implementer/work:evaluator.js > evaluator.js && wc -l evaluator.js' });
  const implementer = await answer(memberRequest('implementer', `Task implement-evaluator: Implement\n\n${creates[0][2].description}`), team);
  t.is(callsOf(implementer)[0][1], 'write_file');
  t.is(callsOf(implementer)[0][2].path, 'evaluator.js');
});
