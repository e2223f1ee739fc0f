import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import test from 'ava';
import { createHostActivities } from '../../activities';
import { createTask, createTeamRun, fenceHandoff, startTask } from '../../activities/store/team';
import { memberSessionId } from '../../contract/member-session';
import { makeRepo, testPool, uniqueId } from '../helpers/orchard';
import { recordToolCall } from '../helpers/tool-call';

/**
 * Invariant 14's fence, by effect: once the fence transaction has committed, every mutating tool call of the old
 * execution is refused `lease_stale` before it runs — whatever its session has not yet heard — and a read-only one
 * still answers. Real Postgres, git worktree, bash and files; the tool activity runs in the SDK's activity harness.
 */
test('after the fence commits, the old execution’s mutating tool calls are refused lease_stale and change nothing on disk', async (t) => {
  const pool = await testPool(t);
  const repo = makeRepo();
  const host = createHostActivities({
    pool,
    hostId: 'fence-test',
    worktreeRoot: join(repo, '..', `${repo.split('/').pop()}-wt`),
    holderLiveness: async () => 'running',
  });
  const teamId = uniqueId('team');
  const sessionId = memberSessionId(teamId, 'implementer');
  const env = new MockActivityEnvironment();
  // The member's session holds its worktree lease, as a session workflow run in namespace `default` does.
  const prepared: Awaited<ReturnType<typeof host.prepareWorktree>> = await env.run(host.prepareWorktree, {
    sessionId,
    repo,
    holder: `default/session/${sessionId}@run-1`,
  });
  await createTeamRun(pool, {
    teamId,
    repo,
    goal: 'write',
    members: [
      { memberId: 'implementer', role: 'Implementer', sessionId },
      { memberId: 'reviewer', role: 'Reviewer', sessionId: memberSessionId(teamId, 'reviewer') },
    ],
  });
  await createTask(pool, teamId, { kind: 'coordinator', turnId: 'turn-1' }, { taskId: 'write', title: 'Write', owner: 'implementer' });
  await startTask(pool, teamId, 'write', 'exec-1');

  let step = 0;
  const call = async (name: string, args: unknown) => (await recordToolCall(pool, host, { sessionId, prepared }, ++step, { name, args }))();
  // Before the fence the execution writes.
  t.like(await call('bash', { command: 'echo before > before.txt' }), { ok: true });
  t.true(existsSync(join(prepared.worktree, 'before.txt')));

  const fenced = await fenceHandoff(pool, teamId, {
    eventId: 'ev-1',
    oldTaskId: 'write',
    kind: 'reassign',
    reason: 'move it',
    sessionId,
    executionId: 'exec-1',
    namespace: 'default',
    replacement: { taskId: 'write-r1', owner: 'reviewer' },
  });
  t.deepEqual(fenced.result.lease, { worktree: prepared.lease.worktree, holder: prepared.lease.holder, generation: prepared.lease.generation });

  // Every mutating tool of the old execution is refused before it runs.
  for (const [name, args, file] of [
    ['bash', { command: 'echo after > after.txt' }, 'after.txt'],
    ['write_file', { path: 'written.txt', content: 'x' }, 'written.txt'],
  ] as const) {
    const err = await t.throwsAsync(call(name, args));
    t.is((err as { type?: string }).type, 'lease_stale', `${name} refused`);
    t.false(existsSync(join(prepared.worktree, file)), `${name} changed nothing`);
  }
  const lease = (await pool.query(`SELECT generation FROM worktree_leases WHERE worktree = $1`, [prepared.lease.worktree])).rows[0];
  t.is(Number(lease.generation), prepared.lease.generation + 1);
});
