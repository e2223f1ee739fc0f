import test from 'ava';
import { join } from 'node:path';
import { orchestratorPrompt } from '../../activities/model/prompt';
import { loadScenario, parseScenario } from '../../activities/model/scenario';
import { rosterRowsOf, topicOf } from '../../activities/model/router';
import { ScriptedProvider } from '../../activities/model/scripted';
import type { ChatMessage, ModelRequest } from '../../activities/model/types';
import { renderRoster, type RosterChild } from '../../workflows/orchestrator/roster';
import { CHILD_TOOLS, TOOL_PROFILES } from '../../workflows/tools';

const ROUTE_FIRST = join(__dirname, '../../scenarios/route-first.json');

const scenario = parseScenario({
  name: 'router-unit',
  router: {
    topics: [
      { title: 'Login page flaky test', topic: 'login-flake', keywords: ['login', 'sign in', 'logging in', 'flaky'] },
      { title: 'Billing CSV export', topic: 'billing-export', keywords: ['billing', 'csv', 'export', 'invoices'] },
    ],
  },
  turns: [{ steps: [{ content: 'child did task {{turn}}' }], repeat: true }],
});

const child = (childId: string, title: string, status: RosterChild['status'] = 'running', lastActivity = 1): RosterChild => ({
  childId,
  title,
  agent: 'coder',
  status,
  lastActivity,
});

/** The bytes an orchestrator request carries: its system message (prompt + roster) and the conversation. */
function orchestratorRequest(children: RosterChild[], conversation: ChatMessage[]): ModelRequest {
  const system = orchestratorPrompt({ title: 'fleet', agent: 'orchestrator', worktree: '', branch: '', roster: renderRoster(children) });
  return { messages: [{ role: 'system', content: system }, ...conversation], tools: TOOL_PROFILES.orchestrator };
}

const user = (content: string): ChatMessage => ({ role: 'user', content });

const routed: {
  name: string;
  roster: RosterChild[];
  message: string;
  expected: unknown;
}[] = [
  {
    name: 'no child owns the topic: create one with its title and topic, the message as the task',
    roster: [],
    message: 'The login page test is flaky on CI',
    expected: { operation: 'create', args: { title: 'Login page flaky test', task: 'The login page test is flaky on CI', topic: 'login-flake' } },
  },
  {
    name: 'a paraphrase is sent to the row whose title is about its topic',
    roster: [child('login-1', 'Login page flaky test'), child('billing-2', 'Billing CSV export')],
    message: 'Sign-in keeps failing at random',
    expected: { operation: 'send', args: { sessionID: 'login-1', task: 'Sign-in keeps failing at random' } },
  },
  {
    name: '"dispatch a new child" about an owned topic is still sent to the owner',
    roster: [child('billing-2', 'Billing CSV export', 'idle')],
    message: 'Dispatch a new child to fix the invoices export',
    expected: { operation: 'send', args: { sessionID: 'billing-2', task: 'Dispatch a new child to fix the invoices export' } },
  },
  {
    name: 'a row of another topic is not an owner: create',
    roster: [child('billing-2', 'Billing CSV export')],
    message: 'logging in times out',
    expected: { operation: 'create', args: { title: 'Login page flaky test', task: 'logging in times out', topic: 'login-flake' } },
  },
  {
    name: 'the topic with most keywords wins over one that shares a word',
    roster: [child('login-1', 'Login page flaky test'), child('billing-2', 'Billing CSV export')],
    message: 'the billing CSV export is flaky',
    expected: { operation: 'send', args: { sessionID: 'billing-2', task: 'the billing CSV export is flaky' } },
  },
];

for (const row of routed) {
  test(`router: ${row.name}`, async (t) => {
    const provider = new ScriptedProvider(scenario);
    const { message, finishReason } = await provider.complete(orchestratorRequest(row.roster, [user(row.message)]));
    t.is(finishReason, 'tool_calls');
    t.is(message.tool_calls?.length, 1);
    const call = message.tool_calls![0];
    t.is(call.function.name, 'session');
    t.is(call.id, 'call_t1_s1_1');
    t.deepEqual(JSON.parse(call.function.arguments), row.expected);
  });
}

test('router: the owner is whatever the roster in this request says, not what an earlier turn did', async (t) => {
  const provider = new ScriptedProvider(scenario);
  // An earlier turn created login-1, but the roster of this request no longer lists it (e.g. it failed).
  const earlier: ChatMessage[] = [
    user('login is flaky'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'session', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'created child login-1 (task t1)' },
    { role: 'assistant', content: 'Routed.' },
  ];
  const { message } = await provider.complete(orchestratorRequest([], [...earlier, user('sign in fails again')]));
  t.is(JSON.parse(message.tool_calls![0].function.arguments).operation, 'create');
  t.is(message.tool_calls![0].id, 'call_t2_s1_1');
});

test("router: after a tool result the answer is text with the result's first line, no tool call", async (t) => {
  const provider = new ScriptedProvider(scenario);
  const conversation: ChatMessage[] = [
    user('login is flaky'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'session', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'sent to login-1 (task t4)\nYour child sessions…\nROUTE FIRST — session send <id> <task>' },
  ];
  const response = await provider.complete(orchestratorRequest([child('login-1', 'Login page flaky test')], conversation));
  t.is(response.finishReason, 'stop');
  t.deepEqual(response.message, { role: 'assistant', content: 'Routed: sent to login-1 (task t4)' });
});

test('router: a manifest of child results, or a message about no topic, is answered without a tool call', async (t) => {
  const provider = new ScriptedProvider(scenario);
  const roster = [child('login-page-flaky-test-1a2b3c', 'Login page flaky test')];
  // The manifest names the child, whose id carries the topic's words: it is still a report, not a request.
  for (const text of ['Child results (1):\n- login-page-flaky-test-1a2b3c: turn finished — done', 'what is the weather like?']) {
    const response = await provider.complete(orchestratorRequest(roster, [user(text)]));
    t.is(response.finishReason, 'stop', text);
    t.is(response.message.tool_calls, undefined);
    t.is(response.message.content, 'Nothing to route.');
  }
});

test('router: a child request (no session tool) is answered from turns, not routed', async (t) => {
  const provider = new ScriptedProvider(scenario);
  const request: ModelRequest = {
    messages: [{ role: 'system', content: 'You are coder' }, user('login is flaky'), { role: 'assistant', content: 'x' }, user('again')],
    tools: CHILD_TOOLS,
  };
  const { message } = await provider.complete(request);
  t.deepEqual(message, { role: 'assistant', content: 'child did task 2' });
});

test('router: roster rows are read from the header line down, and none without a roster', (t) => {
  const withRows = orchestratorRequest([child('a-1', 'Login page flaky test'), child('b-2', 'Billing CSV export', 'idle')], []);
  t.deepEqual(rosterRowsOf(withRows.messages), [
    { id: 'a-1', title: 'Login page flaky test', agent: 'coder', status: 'running' },
    { id: 'b-2', title: 'Billing CSV export', agent: 'coder', status: 'idle' },
  ]);
  t.deepEqual(rosterRowsOf(orchestratorRequest([], []).messages), []);
});

test('router: keywords match whole words, case-folded, across punctuation', (t) => {
  const topics = scenario.router!.topics;
  t.is(topicOf(topics, 'SIGN-IN broken')?.topic, 'login-flake');
  t.is(topicOf(topics, 'the loginservice'), undefined, 'part of a word is not the word');
  t.is(topicOf(topics, 'nothing relevant'), undefined);
});

test('router: a topic whose title is not about itself, a duplicate topic, or a message naming no topic is scenario_invalid', (t) => {
  const base = { name: 'bad', turns: [{ steps: [{ content: 'x' }] }] };
  const titleErr = t.throws(() => parseScenario({ ...base, router: { topics: [{ title: 'Search speed', topic: 's', keywords: ['latency'] }] } }));
  t.regex(String(titleErr), /router: topics\[0\]\.title: "Search speed" is not recognised as its own topic/);
  const dupErr = t.throws(() =>
    parseScenario({
      ...base,
      router: {
        topics: [
          { title: 'a b', topic: 'x', keywords: ['a'] },
          { title: 'c d', topic: 'X', keywords: ['c'] },
        ],
      },
    }),
  );
  t.regex(String(dupErr), /"X" is listed twice/);
  const msgErr = t.throws(() =>
    parseScenario({ ...base, router: { topics: [{ title: 'a', topic: 'x', keywords: ['a'] }] }, messages: [{ text: 'hi', topic: 'y' }] }),
  );
  t.regex(String(msgErr), /messages\[0\]\.topic: "y" is not a router topic/);
});

test('scenarios/route-first.json: every message is about the topic it names, and each topic title about itself', async (t) => {
  const file = await loadScenario(ROUTE_FIRST);
  t.is(file.messages?.length, 8);
  t.is(new Set(file.messages!.map((m) => m.topic)).size, 3);
  t.true(file.messages!.some((m) => /dispatch a new child/i.test(m.text)));
  for (const m of file.messages!) t.is(topicOf(file.router!.topics, m.text)?.topic, m.topic, m.text);
});

test('scenarios/route-first.json played against a roster it grows itself: 3 creates, then sends to the owners', async (t) => {
  const file = await loadScenario(ROUTE_FIRST);
  const provider = new ScriptedProvider(file);
  const children: RosterChild[] = [];
  const owner = new Map<string, string>();
  for (const [i, m] of file.messages!.entries()) {
    const { message } = await provider.complete(orchestratorRequest(children, [user(m.text)]));
    const call = JSON.parse(message.tool_calls![0].function.arguments);
    if (call.operation === 'create') {
      t.false(owner.has(m.topic), `message ${i + 1} created a second child for ${m.topic}`);
      const childId = `child-${children.length + 1}`;
      children.push(child(childId, call.args.title, 'idle', i));
      owner.set(m.topic, childId);
    } else {
      t.is(call.args.sessionID, owner.get(m.topic), `message ${i + 1}`);
    }
  }
  t.is(children.length, 3);
});
