import test from 'ava';
import { ApplicationFailure } from '@temporalio/common';
import type { ChatMessage } from '../../activities/model/types';
import type { TurnKey } from '../../activities/store/keys';
import { storeStartingContext } from '../../activities/store/starting-context';
import { appendEntry, loadConversation } from '../../activities/store/transcript';
import { ROUTE_FIRST } from '../../workflows/orchestrator/echo';
import { testPool, uniqueId } from '../helpers/orchard';

/**
 * The starting context as the model step reads it, against real PostgreSQL: a parent orchestrator's transcript written
 * the way its turns write it, a child chain that names a bound in it, and the conversation the child's model call gets.
 */
async function orchestratorTranscript(pool: import('pg').Pool) {
  const orchestratorId = uniqueId('orch');
  const executionId = uniqueId('exec');
  const key = (turn: number): TurnKey => ({ sessionId: orchestratorId, executionId, turnId: `${executionId}/turn-${turn}`, turn });
  const user = (turn: number, content: string) => appendEntry(pool, { ...key(turn), step: 0, ordinal: 0 }, { role: 'user', content });
  const say = (turn: number, step: number, message: Extract<ChatMessage, { role: 'assistant' }>) =>
    appendEntry(pool, { ...key(turn), step, ordinal: 0 }, message);
  const call = { id: 'c1', type: 'function' as const, function: { name: 'session', arguments: '{"operation":"list","args":{}}' } };

  await user(1, 'turn one: the codename is HERON');
  await say(1, 1, { role: 'assistant', content: `Noted HERON.\n${ROUTE_FIRST}` });
  await user(2, 'turn two: start a child');
  await say(2, 1, { role: 'assistant', content: 'Creating it now.', tool_calls: [call] });
  await appendEntry(pool, { ...key(2), step: 1, ordinal: 1 }, { role: 'tool', tool_call_id: 'c1', content: 'ROSTER RESULT' });
  await say(2, 2, { role: 'assistant', content: 'after the call' });
  await user(3, 'turn three: later');
  return { orchestratorId, executionId, bound: { orchestratorId, executionId, turnId: key(2).turnId, turn: 2, step: 1 } };
}

function childKey(): TurnKey {
  const executionId = uniqueId('child-exec');
  return { sessionId: uniqueId('child'), executionId, turnId: `${executionId}/turn-1`, turn: 1 };
}

test("a child's model call starts from the parent's user messages and assistant text up to the bound: no tool calls or results, no scaffolding, nothing after", async (t) => {
  const pool = await testPool(t);
  const { bound } = await orchestratorTranscript(pool);
  const child = childKey();
  await storeStartingContext(pool, { executionId: child.executionId, sessionId: child.sessionId, requestId: 'r1', parentConversation: bound });
  await appendEntry(pool, { ...child, step: 0, ordinal: 0 }, { role: 'user', content: 'the child task' });

  const { messages, omittedTurns, startingMessages } = await loadConversation(pool, child);
  t.deepEqual(messages, [
    { role: 'user', content: 'turn one: the codename is HERON' },
    { role: 'assistant', content: 'Noted HERON.' },
    { role: 'user', content: 'turn two: start a child' },
    { role: 'assistant', content: 'Creating it now.' },
    { role: 'user', content: 'the child task' },
  ]);
  t.is(omittedTurns, 0);
  t.is(startingMessages, 4);

  // A retried store keeps the first row; the conversation is the same.
  await storeStartingContext(pool, { executionId: child.executionId, sessionId: child.sessionId, requestId: 'r1', handoff: 'something else' });
  t.deepEqual((await loadConversation(pool, child)).messages, messages);
});

test("the parent's conversation is the oldest part of the child's: within contextChars its oldest turns are left out first, whole", async (t) => {
  const pool = await testPool(t);
  const { bound } = await orchestratorTranscript(pool);
  const child = childKey();
  await storeStartingContext(pool, { executionId: child.executionId, sessionId: child.sessionId, requestId: 'r1', parentConversation: bound });
  await appendEntry(pool, { ...child, step: 0, ordinal: 0 }, { role: 'user', content: 'the child task' });
  // Room for the child's task and the parent's second turn ('turn two: start a child' + 'Creating it now.'), not the first.
  const room = 'the child task'.length + 'turn two: start a child'.length + 'Creating it now.'.length;
  const { messages, omittedTurns, startingMessages } = await loadConversation(pool, child, room);
  t.deepEqual(
    messages.map((m) => m.content),
    ['turn two: start a child', 'Creating it now.', 'the child task'],
  );
  t.is(omittedTurns, 1);
  t.is(startingMessages, 2);
});

test('a handoff is one user message before the first task; a bound the parent transcript lacks is refused invalid_input and stores nothing', async (t) => {
  const pool = await testPool(t);
  const child = childKey();
  await storeStartingContext(pool, { executionId: child.executionId, sessionId: child.sessionId, requestId: 'r1', handoff: 'HANDOFF TEXT' });
  await appendEntry(pool, { ...child, step: 0, ordinal: 0 }, { role: 'user', content: 'the child task' });
  t.deepEqual((await loadConversation(pool, child)).messages, [
    { role: 'user', content: 'HANDOFF TEXT' },
    { role: 'user', content: 'the child task' },
  ]);

  const { bound } = await orchestratorTranscript(pool);
  const other = childKey();
  const err = await t.throwsAsync(
    storeStartingContext(pool, { executionId: other.executionId, sessionId: other.sessionId, requestId: 'r2', parentConversation: { ...bound, step: 7 } }),
  );
  t.true(err instanceof ApplicationFailure);
  t.is((err as ApplicationFailure).type, 'invalid_input');
  const { rows } = await pool.query('SELECT 1 FROM session_starting_context WHERE execution_id = $1', [other.executionId]);
  t.is(rows.length, 0);
});
