import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import test from 'ava';
import { createHostActivities } from '../../activities';
import { turnKeyOf } from '../../activities/store/keys';
import { claimDispatch } from '../../activities/store/dispatch';
import { NOT_EXECUTED, UNKNOWN_OUTCOME, appendEntry, loadConversation } from '../../activities/store/transcript';
import { waitFor as until } from '../helpers/wait';
import { recordToolCall } from '../helpers/tool-call';
import { makeRepo, testPool, uniqueId } from '../helpers/orchard';

/**
 * Invariant 11a against real Postgres, bash and files: the activity runs in the SDK's activity context
 * harness so the same call can be re-delivered as a retried attempt would be.
 */
async function setup(t: import('ava').ExecutionContext) {
  const pool = await testPool(t);
  const repo = makeRepo();
  const host = createHostActivities({
    pool,
    hostId: 'dispatch-test',
    worktreeRoot: join(repo, '..', `${repo.split('/').pop()}-wt`),
    holderLiveness: async () => 'running',
  });
  const sessionId = uniqueId('dispatch');
  const env = new MockActivityEnvironment();
  const prepared: Awaited<ReturnType<typeof host.prepareWorktree>> = await env.run(host.prepareWorktree, {
    sessionId,
    repo,
    holder: `session/${sessionId}@run-1`,
  });
  const counter = join(prepared.worktree, 'counter.txt');
  const callOnce = (step: number, call: { name: string; args: unknown } = { name: 'bash', args: { command: 'echo ran >> counter.txt' } }) =>
    recordToolCall(pool, host, { sessionId, prepared }, step, call);
  const runs = () => readFileSync(counter, 'utf8').split('\n').filter(Boolean).length;
  return { pool, sessionId, callOnce, runs, counter, prepared };
}

test('a retried tool call that finds its recorded result returns it and does not run the tool again', async (t) => {
  const { callOnce, runs, pool, sessionId } = await setup(t);
  const attempt = await callOnce(1);
  t.like(await attempt(1), { outcome: 'settled', ok: true });
  t.is(runs(), 1);
  t.like(await attempt(2), { outcome: 'already-settled', ok: true });
  t.is(runs(), 1);
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.is(rows[0].n, 1);
});

test('a retried tool call that finds only the claim reports unknown and does not run the tool', async (t) => {
  const { callOnce, pool, sessionId, counter } = await setup(t);
  const attempt = await callOnce(2);
  // What a worker that died mid-command leaves behind: the claim, no result.
  await pool.query(
    `INSERT INTO tool_dispatches (session_id, execution_id, turn_id, turn, step, call_id, tool, host, state)
     VALUES ($1, $2, $3, 1, 2, 'c2', 'bash', 'gone', 'claimed')`,
    [sessionId, turnKeyOf({ sessionId, turn: 1 }).executionId, turnKeyOf({ sessionId, turn: 1 }).turnId],
  );
  t.like(await attempt(2), { outcome: 'unknown', ok: false });
  const { rows } = await pool.query(
    `SELECT d.state, t.content FROM tool_dispatches d JOIN transcript_entries t
       ON t.session_id = d.session_id AND t.turn = d.turn AND t.step = d.step AND t.role = 'tool'
     WHERE d.session_id = $1 AND d.step = 2`,
    [sessionId],
  );
  t.is(rows[0].state, 'unknown');
  t.regex(rows[0].content, /outcome unknown/);
  t.false(existsSync(counter), 'the command never ran');
});

test('a stale attempt after the lease moved to a new generation is refused and changes nothing', async (t) => {
  const { callOnce, pool, sessionId, counter, prepared } = await setup(t);
  const attempt = await callOnce(3);
  // Another execution took the worktree over (what a handoff or a re-created session does).
  await pool.query(`UPDATE worktree_leases SET holder = 'session/other@run-2', generation = generation + 1 WHERE worktree = $1`, [prepared.lease.worktree]);
  const err = await t.throwsAsync(attempt(1));
  t.is((err as { type?: string }).type, 'lease_stale');
  t.false(existsSync(counter), 'the command never ran');
  const claims = await pool.query(`SELECT count(*)::int AS n FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
  t.is(claims.rows[0].n, 0, 'nothing was written, not even the claim');
  const tools = await pool.query(`SELECT count(*)::int AS n FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.is(tools.rows[0].n, 0);
});

test('a claim declared unknown by a retry stays unknown when the first attempt settles late; the model was told unknown', async (t) => {
  const { callOnce, pool, sessionId, counter } = await setup(t);
  const attempt = await callOnce(4, { name: 'bash', args: { command: 'echo ran >> counter.txt; sleep 30' } });
  // Attempt 1 runs the command; meanwhile a retry (the worker looked dead) finds only the claim, declares the
  // outcome unknown and stops the earlier attempt's command.
  const first = attempt(1);
  await until(async () => (await pool.query(`SELECT 1 FROM tool_dispatches WHERE session_id = $1 AND step = 4`, [sessionId])).rowCount === 1);
  t.like(await attempt(2), { outcome: 'unknown', ok: false });
  t.like(await first, { outcome: 'unknown', ok: false });
  t.true(existsSync(counter), 'the first attempt did start the command');
  const claim = await pool.query(`SELECT state, unknown_reason FROM tool_dispatches WHERE session_id = $1 AND step = 4`, [sessionId]);
  t.is(claim.rows[0].state, 'unknown');
  const shown = await pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND step = 4 AND role = 'tool'`, [sessionId]);
  t.deepEqual(
    shown.rows.map((r) => r.content),
    [UNKNOWN_OUTCOME],
  );
  // The late output (the command was stopped) is kept for operators.
  const output = await pool.query(`SELECT ok FROM tool_outputs WHERE session_id = $1 AND step = 4`, [sessionId]);
  t.deepEqual(output.rows, [{ ok: false }]);
});

test('a read-only tool is run again by a retry instead of going through a claim', async (t) => {
  const { callOnce, pool, sessionId } = await setup(t);
  const attempt = await callOnce(5, { name: 'read_file', args: { path: 'README.md' } });
  t.like(await attempt(1), { outcome: 'settled', ok: true });
  t.like(await attempt(2), { outcome: 'settled', ok: true });
  const claims = await pool.query(`SELECT count(*)::int AS n FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
  t.is(claims.rows[0].n, 0);
});

test('the rebuilt transcript says unknown for a claimed call without a result and not executed only for an unclaimed one', async (t) => {
  const pool = await testPool(t);
  const key = { sessionId: uniqueId('rebuild'), executionId: uniqueId('exec'), turnId: uniqueId('turn'), turn: 1 };
  await appendEntry(pool, { ...key, step: 0, ordinal: 0 }, { role: 'user', content: 'do two things' });
  await appendEntry(
    pool,
    { ...key, step: 1, ordinal: 0 },
    {
      role: 'assistant',
      content: null,
      tool_calls: ['claimed', 'never'].map((id) => ({ id, type: 'function' as const, function: { name: 'bash', arguments: '{"command":"true"}' } })),
    },
  );
  await claimDispatch(pool, { ...key, step: 1, callId: 'claimed' }, 'bash', 'gone-host');
  // The next turn (or the next run after continue-as-new) rebuilds the conversation from Postgres.
  const { messages } = await loadConversation(pool, { ...key, turnId: uniqueId('turn'), turn: 2 });
  const results = messages.filter((m) => m.role === 'tool').map((m) => [(m as { tool_call_id: string }).tool_call_id, m.content]);
  t.deepEqual(results, [
    ['claimed', UNKNOWN_OUTCOME],
    ['never', NOT_EXECUTED],
  ]);
});
