import test from 'ava';
import type { Client } from '@temporalio/client';
import { orchestratorWorkflowId, sessionWorkflowId } from '../../contract/messages';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { calls, final, startFleet, session, lastUserText } from '../helpers/fleet-model';
import { completion, stubModel } from '../helpers/model-stub';
import { makeRepo, startOrchard, uniqueId } from '../helpers/orchard';

/**
 * The context contract for new children (issue 22, deliverable 5), against the real stack: the model is a local
 * OpenAI-compatible server, and the assertions read the bytes it received, the child's workflow history and the rows
 * in PostgreSQL.
 */

/** Every string in a workflow's history, payloads decoded (the default converter writes JSON text). */
async function historyText(temporal: Client, workflowId: string): Promise<string> {
  const history = await temporal.workflow.getHandle(workflowId).fetchHistory();
  const parts: string[] = [];
  const walk = (v: unknown): void => {
    if (v instanceof Uint8Array) parts.push(Buffer.from(v).toString('utf8'));
    else if (typeof v === 'string') parts.push(v);
    else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk(history.events);
  return parts.join('\n');
}

const texts = (body: any): string[] => body.messages.map((m: any) => String(m.content ?? ''));
const indexOf = (body: any, role: string, content: string): number => body.messages.findIndex((m: any) => m.role === role && m.content === content);

const EARLIER = 'Remember for later: the staging codename is HERON-7731.';
const NOTED = 'Noted: HERON-7731 is the staging codename.';
const ASK = 'Start someone on the login page, they will need the codename.';
const LATER = 'Unrelated and later: the release is called OSPREY-4410.';

test('includeContext: the child starts from the orchestrator conversation as it stood at the call, by reference; without it a child does not', async (t) => {
  const childRequests: any[] = [];
  const fleet = await startFleet(t, (body) => {
    if (!(body.tools ?? []).some((tool: any) => tool.function.name === 'session')) {
      childRequests.push(body);
      return completion({ content: `child done: ${lastUserText(body).slice(0, 40)}` });
    }
    const messages: any[] = body.messages;
    const lastUser = messages.map((m) => m.role).lastIndexOf('user');
    const text = String(messages[lastUser].content);
    const answered = messages.slice(lastUser + 1).some((m) => m.role === 'tool');
    if (text === EARLIER) return final(NOTED);
    if (text === ASK && !answered) {
      return calls(
        session('create', { title: 'login page', task: 'Fix the login page test', includeContext: true }),
        session('create', { title: 'docs', task: 'Proofread the docs' }),
      );
    }
    return final('ok');
  });
  await fleet.say(EARLIER);
  const asked = await fleet.say(ASK);
  const createdTurn = asked.turns.find((turn) => turn.taskId === asked.messageId)!;
  const withContext = asked.children.find((c) => c.title === 'login page')!;
  const independent = asked.children.find((c) => c.title === 'docs')!;
  t.truthy(withContext && independent, JSON.stringify(asked.children));
  t.regex(fleet.toolResults().find((r) => r.includes(withContext.childId)) ?? '', /starts from this conversation/);

  await fleet.orchard.client.waitUntilSettled(withContext.childId, { afterTurn: 1 });
  await fleet.orchard.client.waitUntilSettled(independent.childId, { afterTurn: 1 });
  const first = childRequests.find((b) => lastUserText(b) === 'Fix the login page test')!;
  // The orchestrator's earlier turn and the message that led to the create, before the child's task, in order.
  const earlier = indexOf(first, 'user', EARLIER);
  const noted = indexOf(first, 'assistant', NOTED);
  const ask = indexOf(first, 'user', ASK);
  const task = indexOf(first, 'user', 'Fix the login page test');
  t.true(earlier > 0 && earlier < noted && noted < ask && ask < task, JSON.stringify(first.messages.map((m: any) => [m.role, m.content])));
  // Not the orchestrator's role: its system prompt, its tool calls and their results stay with it.
  const orchestratorSystem = fleet.orchestratorRequests()[0].messages[0].content;
  t.is(first.messages.filter((m: any) => m.role === 'system').length, 1);
  t.not(first.messages[0].content, orchestratorSystem);
  t.false(
    first.messages.some((m: any) => m.role === 'tool' || m.tool_calls),
    'no orchestrator tool call or result',
  );
  // A child created without it starts independent: its task alone.
  const other = childRequests.find((b) => lastUserText(b) === 'Proofread the docs')!;
  t.false(texts(other).some((c) => c.includes('HERON-7731') || c === ASK));

  // The reference, in PostgreSQL: the orchestrator's chain, the turn attempt and the step of the call.
  const { rows } = await fleet.orchard.pool.query(
    'SELECT session_id, handoff, parent_session_id, parent_turn_id, parent_turn, parent_step FROM session_starting_context WHERE session_id = ANY($1)',
    [[withContext.childId, independent.childId]],
  );
  t.deepEqual(rows, [
    {
      session_id: withContext.childId,
      handoff: null,
      parent_session_id: fleet.id,
      parent_turn_id: createdTurn.turnId,
      parent_turn: createdTurn.turn,
      parent_step: 1,
    },
  ]);
  // The child's history carries the reference, never the orchestrator's words (its own task crosses it, once).
  const history = await historyText(fleet.orchard.temporal, sessionWorkflowId(withContext.childId));
  t.true(history.includes(createdTurn.turnId!), 'the reference is in the history');
  t.true(history.includes('Fix the login page test'), 'payloads are decoded');
  t.false(history.includes('HERON-7731'), "the orchestrator's earlier turn is not in the child's history");
  t.false(history.includes(ASK), "the orchestrator's user message is not in the child's history");

  // The conversation is the one at the call: what the orchestrator heard later never reaches the child, and what it
  // started from stays at the start of its conversation on its next turn.
  await fleet.say(LATER);
  await fleet.orchard.client.send(withContext.childId, 'Now check the logout page too');
  await fleet.orchard.client.waitUntilSettled(withContext.childId, { afterTurn: 2 });
  const second = childRequests.find((b) => lastUserText(b) === 'Now check the logout page too')!;
  t.true(indexOf(second, 'user', EARLIER) > 0);
  t.false(texts(second).some((c) => c.includes('OSPREY-4410')));
});

test('context: an explicit handoff is the message before the task; both kinds at once are refused context_conflict and create nothing', async (t) => {
  const HANDOFF = 'Handoff: the flaky test is login.spec.ts; the fix must keep the retry at 3.';
  const childRequests: any[] = [];
  const fleet = await startFleet(t, (body) => {
    if (!(body.tools ?? []).some((tool: any) => tool.function.name === 'session')) {
      childRequests.push(body);
      return completion({ content: 'child done' });
    }
    const messages: any[] = body.messages;
    const lastUser = messages.map((m) => m.role).lastIndexOf('user');
    const text = String(messages[lastUser].content);
    if (messages.slice(lastUser + 1).some((m) => m.role === 'tool')) return final('Done.');
    if (text === 'both please') return calls(session('create', { title: 'both', task: 'Do both', includeContext: true, context: HANDOFF }));
    if (text === 'hand it off') return calls(session('create', { title: 'handoff', task: 'Fix the flaky test', topic: 'flaky', context: HANDOFF }));
    if (text === 'more on it') return calls(session('create', { title: 'again', task: 'Also fix the retry log', topic: 'flaky', includeContext: true }));
    return final('ok');
  });

  const refused = await fleet.say('both please');
  t.deepEqual(refused.children, [], 'no child in the ledger');
  t.deepEqual(refused.deliveries, []);
  const result = fleet.toolResults().find((r) => r.includes('context_conflict')) ?? '';
  t.regex(result, /^error \(context_conflict\):.*nothing was created/);
  const stored = await fleet.orchard.pool.query('SELECT count(*)::int AS n FROM session_tasks WHERE sender = $1', [orchestratorWorkflowId(fleet.id)]);
  t.is(stored.rows[0].n, 0, 'no task stored for a child');
  t.is(childRequests.length, 0, 'no child called the model');

  const handed = await fleet.say('hand it off');
  const child = handed.children.find((c) => c.title === 'handoff')!;
  t.truthy(child, JSON.stringify(handed.children));
  await fleet.orchard.client.waitUntilSettled(child.childId, { afterTurn: 1 });
  const first = childRequests.find((b) => lastUserText(b) === 'Fix the flaky test')!;
  const handoff = indexOf(first, 'user', HANDOFF);
  t.true(handoff > 0 && handoff === indexOf(first, 'user', 'Fix the flaky test') - 1, JSON.stringify(first.messages.map((m: any) => [m.role, m.content])));
  // A handoff is not the conversation: the orchestrator's own messages are not there.
  t.false(texts(first).some((c) => c === 'hand it off' || c === 'both please'));
  const { rows } = await fleet.orchard.pool.query('SELECT handoff, parent_turn_id FROM session_starting_context WHERE session_id = $1', [child.childId]);
  t.deepEqual(rows, [{ handoff: HANDOFF, parent_turn_id: null }]);

  // A create routed to the topic's owner is a send: that child has its conversation, and the result says so.
  const routed = await fleet.say('more on it');
  t.deepEqual(
    routed.deliveries.filter((d) => d.messageId === routed.messageId).map((d) => [d.childId, d.via]),
    [[child.childId, 'topic']],
  );
  t.regex(fleet.toolResults().find((r) => r.includes('routed to')) ?? '', new RegExp(`^includeContext was not used: ${child.childId} already has`));
  await fleet.orchard.client.waitUntilSettled(child.childId, { afterTurn: 2 });
  const second = childRequests.find((b) => lastUserText(b) === 'Also fix the retry log')!;
  t.false(texts(second).some((c) => c === 'more on it'));
});

test('a client create with a context: the handoff precedes the first task; a create that binds to the running session with one is refused context_conflict', async (t) => {
  const stub = await stubModel(t, (body) => completion({ content: `done: ${lastUserText(body).slice(0, 30)}` }));
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 }) });
  const sessionId = uniqueId('handoff');
  const repo = makeRepo();
  const HANDOFF = 'From the last session: the migration 018 is already applied on staging.';
  const created = await orchard.client.createSession({ sessionId, title: 'handoff', repo, task: 'Write the next migration', context: HANDOFF });
  t.is(created.outcome, 'created');
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  const body = stub.requests.map((r) => r.body).find((b) => lastUserText(b) === 'Write the next migration')!;
  t.is(indexOf(body, 'user', HANDOFF), indexOf(body, 'user', 'Write the next migration') - 1);

  // Bound to the running chain: its conversation exists, so a context is refused and nothing is queued.
  const before = await orchard.client.status(sessionId);
  const err = await t.throwsAsync(orchard.client.createSession({ sessionId, title: 'handoff', repo, task: 'Another task', context: 'another handoff' }));
  t.is((err as any).code, 'context_conflict', err?.message);
  const after = await orchard.client.status(sessionId);
  t.deepEqual(after.tasks, before.tasks);
  const { rows } = await orchard.pool.query('SELECT handoff FROM session_starting_context WHERE session_id = $1', [sessionId]);
  t.deepEqual(rows, [{ handoff: HANDOFF }]);
  // The same create again (its request id) is answered as the first time, not refused, and queues nothing.
  const again = await orchard.client.createSession({
    sessionId,
    title: 'handoff',
    repo,
    task: 'Write the next migration',
    context: HANDOFF,
    requestId: created.requestId,
  });
  t.is(again.task?.taskId, created.task?.taskId);
  t.deepEqual((await orchard.client.status(sessionId)).tasks, before.tasks);
});
