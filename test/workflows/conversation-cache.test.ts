import test from 'ava';
import type { TurnKey } from '../../activities/store/keys';
import { appendEntry, loadConversation, NOT_EXECUTED } from '../../activities/store/transcript';
import { testPool, uniqueId } from '../helpers/orchard';

/**
 * The model step's conversation read against real PostgreSQL (issue 23): an earlier turn the worker has already built
 * is not read from the store again while its rows are the same, and is read again as soon as a row is added to it.
 * The store's rows are append-only; a test-only UPDATE stands for "what the store would answer if it were asked".
 */
function transcript(pool: import('pg').Pool) {
  const sessionId = uniqueId('orch');
  const executionId = uniqueId('exec');
  const key = (turn: number): TurnKey => ({ sessionId, executionId, turnId: `${executionId}/turn-${turn}`, turn });
  return {
    key,
    user: (turn: number, content: string) => appendEntry(pool, { ...key(turn), step: 0, ordinal: 0 }, { role: 'user', content }),
    answer: (turn: number, step: number, content: string) => appendEntry(pool, { ...key(turn), step, ordinal: 0 }, { role: 'assistant', content }),
  };
}

test('an earlier turn is read from the store once while its rows stay the same, and again when one is added', async (t) => {
  const pool = await testPool(t);
  const { key, user, answer } = transcript(pool);
  await user(1, 'turn one');
  await answer(1, 1, 'answer one');
  await user(2, 'turn two');
  const first = await loadConversation(pool, key(2));
  t.deepEqual(
    first.messages.map((m) => m.content),
    ['turn one', 'answer one', 'turn two'],
  );

  // What the store would now answer for turn 1 differs; the worker's copy of it (same rows: same seq, same count) stands.
  await pool.query(`UPDATE transcript_entries SET content = 'changed behind the cache' WHERE turn_id = $1 AND step = 1`, [key(1).turnId]);
  await answer(2, 1, 'answer two');
  await user(3, 'turn three');
  t.deepEqual(
    (await loadConversation(pool, key(3))).messages.map((m) => m.content),
    ['turn one', 'answer one', 'turn two', 'answer two', 'turn three'],
  );

  // A row added to turn 1 (a late retry's, say) makes the copy stale: turn 1 is read again, whole.
  await answer(1, 2, 'a late answer');
  t.deepEqual(
    (await loadConversation(pool, key(3))).messages.map((m) => m.content),
    ['turn one', 'changed behind the cache', 'a late answer', 'turn two', 'answer two', 'turn three'],
  );
});

test('an earlier turn with a synthetic tool result is read again every time (a claim may still be written)', async (t) => {
  const pool = await testPool(t);
  const { key, user } = transcript(pool);
  await user(1, 'turn one');
  const call = { id: 'c1', type: 'function' as const, function: { name: 'bash', arguments: '{"command":"true"}' } };
  await appendEntry(pool, { ...key(1), step: 1, ordinal: 0 }, { role: 'assistant', content: null, tool_calls: [call] });
  await user(2, 'turn two');
  t.is((await loadConversation(pool, key(2))).messages.find((m) => m.role === 'tool')?.content, NOT_EXECUTED);
  await pool.query(`UPDATE transcript_entries SET content = 'read again' WHERE turn_id = $1 AND step = 0`, [key(1).turnId]);
  t.is((await loadConversation(pool, key(2))).messages[0].content, 'read again');
});
