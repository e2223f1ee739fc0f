import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import test from 'ava';
import { createHostActivities } from '../../activities';
import { turnKeyOf } from '../../activities/store/keys';
import { appendEntry } from '../../activities/store/transcript';
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
  const callOnce = async (step: number) => {
    await appendEntry(pool, { ...turnKeyOf({ sessionId, turn: 1 }), step, ordinal: 0 }, {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `c${step}`, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command: 'echo ran >> counter.txt' }) } }],
    });
    return (attempt: number) =>
      new MockActivityEnvironment({ attempt }).run(host.executeTool, {
        sessionId,
        turn: 1,
        step,
        callId: `c${step}`,
        index: 0,
        profile: 'child' as const,
        worktree: prepared.worktree,
        branch: prepared.branch,
        bashTimeoutSeconds: 30,
        lease: prepared.lease,
      });
  };
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
    `INSERT INTO tool_dispatches (session_id, turn, step, call_id, tool, host, state) VALUES ($1, 1, 2, 'c2', 'bash', 'gone', 'claimed')`,
    [sessionId],
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
  await pool.query(`UPDATE worktree_leases SET holder = 'session/other@run-2', generation = generation + 1 WHERE worktree = $1`, [
    prepared.lease.worktree,
  ]);
  const err = await t.throwsAsync(attempt(1));
  t.is((err as { type?: string }).type, 'lease_stale');
  t.false(existsSync(counter), 'the command never ran');
  const claims = await pool.query(`SELECT count(*)::int AS n FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
  t.is(claims.rows[0].n, 0, 'nothing was written, not even the claim');
  const tools = await pool.query(`SELECT count(*)::int AS n FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.is(tools.rows[0].n, 0);
});
