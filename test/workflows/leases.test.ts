import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { aliveInGroup, currentBootId, readProcessSync } from '../../activities/bash/process-tree';
import { acquireLease, leaseIsCurrent, recordProcessGroup, releaseLease, renewLease, type LivenessProbe } from '../../activities/store/leases';
import { sessionWorkflowId } from '../../contract/messages';
import { git, makeRepo, sharedOrchard, testPool, uniqueId, writeScenario } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

const shared = sharedOrchard(test);
const running: LivenessProbe = { holderLiveness: async () => 'running', aliveProcesses: async () => [] };
const closed: LivenessProbe = { holderLiveness: async () => 'closed', aliveProcesses: async () => [] };

test('concurrent acquires of one worktree end with exactly one holder; the others bind to it', async (t) => {
  const pool = await testPool(t);
  const worktree = `test:${uniqueId('/wt/race')}`;
  const outcomes = await Promise.all(Array.from({ length: 8 }, (_, i) => acquireLease(pool, { worktree, host: 'test', holder: `holder-${i}` }, running)));
  const winners = outcomes.filter((o) => o.kind === 'created');
  t.is(winners.length, 1);
  const winner = winners[0].kind === 'created' ? winners[0].lease.holder : '';
  t.true(outcomes.filter((o) => o.kind !== 'created').every((o) => o.kind === 'bound' && o.holder === winner));
  const { rows } = await pool.query(`SELECT holder, generation FROM worktree_leases WHERE worktree = $1`, [worktree]);
  t.deepEqual(
    rows.map((r) => [r.holder, Number(r.generation)]),
    [[winner, 1]],
  );
});

test('a closed holder with no live process is taken over with a new generation, and its lease goes stale', async (t) => {
  const pool = await testPool(t);
  const worktree = `test:${uniqueId('/wt/takeover')}`;
  const first = await acquireLease(pool, { worktree, host: 'test', holder: 'old' }, running);
  if (first.kind !== 'created') return t.fail(first.kind);
  t.like(await acquireLease(pool, { worktree, host: 'test', holder: 'old' }, running), { kind: 'reentered' });
  const second = await acquireLease(pool, { worktree, host: 'test', holder: 'new' }, closed);
  t.like(second, { kind: 'taken_over', previous: 'old', lease: { holder: 'new', generation: 2 } });
  t.false(await leaseIsCurrent(pool, first.lease));
  t.false(await renewLease(pool, first.lease));
  t.false(await releaseLease(pool, first.lease), 'a stale release changes nothing');
  if (second.kind === 'taken_over') t.true(await leaseIsCurrent(pool, second.lease));
});

test('a closed holder whose recorded process group is still alive makes liveness unknown: no takeover', async (t) => {
  const pool = await testPool(t);
  const worktree = `test:${uniqueId('/wt/zombie')}`;
  const first = await acquireLease(pool, { worktree, host: 'test', holder: 'old' }, running);
  if (first.kind !== 'created') return t.fail(first.kind);
  const child = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
  t.teardown(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  });
  const identity = { pgid: child.pid!, bootId: currentBootId(), startTime: readProcessSync(child.pid!)!.startTime, marker: uniqueId('m') };
  await recordProcessGroup(pool, first.lease, 'test', identity, 'call-1');
  const probe: LivenessProbe = {
    holderLiveness: async () => 'closed',
    aliveProcesses: async (w, g) => {
      const { rows } = await pool.query(`SELECT pgid FROM lease_process_groups WHERE worktree = $1 AND generation = $2`, [w, g]);
      return (await Promise.all(rows.map((r) => aliveInGroup(r.pgid)))).flat();
    },
  };
  const outcome = await acquireLease(pool, { worktree, host: 'test', holder: 'new' }, probe);
  t.is(outcome.kind, 'unknown');
  t.true(await leaseIsCurrent(pool, first.lease), 'the old holder keeps the lease');
  t.like(await acquireLease(pool, { worktree, host: 'test', holder: 'new' }, { ...closed, holderLiveness: async () => 'unknown' }), {
    kind: 'unknown',
  });
});

test('a cancelled session started again re-enters its worktree: same branch and commits, lease generation 2', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('reenter');
  const scenario = writeScenario({
    name: 'reenter',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              { name: 'write_file', arguments: { path: 'a.txt', content: 'a\n' } },
              { name: 'git_commit', arguments: { message: 'first run' } },
            ],
          },
          { content: 'ok' },
        ],
      },
    ],
  });
  const repo = makeRepo();
  const input = { sessionId, title: 'reenter', repo, model: { provider: 'scripted' as const, scenario }, task: 'write a' };
  t.is((await orchard.client.createSession(input)).outcome, 'created');
  const first = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  await orchard.client.cancel(sessionId);
  const leaseRow = async () =>
    (await orchard.pool.query(`SELECT holder, generation, state FROM worktree_leases WHERE worktree LIKE $1`, [`%/${sessionId}`])).rows[0];
  t.like(await leaseRow(), { state: 'released' });

  const again = await orchard.client.createSession({ ...input, task: undefined });
  t.is(again.outcome, 'created');
  const second = await orchard.client.waitUntilSettled(sessionId);
  t.is(second.status, 'idle');
  t.is(second.worktree, first.worktree);
  t.true(existsSync(join(second.worktree!, 'a.txt')));
  t.is(git(repo, 'log', '-1', '--format=%s', `orchard/${sessionId}/work`), 'first run');
  const row = await leaseRow();
  t.is(Number(row.generation), 2);
  const description = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
  t.is(row.holder, `default/${sessionWorkflowId(sessionId)}@${description.raw.workflowExecutionInfo?.firstRunId}`);
});

test('a second workflow that names a worktree a live session holds fails worktree_held; the holder keeps its worktree', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('held');
  const scenario = writeScenario({ name: 'held', turns: [{ steps: [{ content: 'ok' }] }] });
  const create = { sessionId, title: 'held', repo: makeRepo(), host: orchard.hostId, model: { provider: 'scripted' as const, scenario } };
  t.is((await orchard.client.createSession({ ...create, task: 'hello' })).outcome, 'created');
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  const leaseBefore = (await orchard.pool.query(`SELECT holder, generation FROM worktree_leases WHERE worktree LIKE $1`, [`%/${sessionId}`])).rows;

  // What any client could start: a session workflow under another id whose input names the same session (worktree).
  const impostor = `session/${uniqueId('impostor')}`;
  const handle = await orchard.temporal.workflow.start('childSession', {
    workflowId: impostor,
    taskQueue: orchard.taskQueue,
    args: [{ create: { ...create, requestId: uniqueId('r') } }],
  });
  const view = await waitFor(
    async () => {
      const v = await handle.query<{ status: string; error?: { code: string } }>('status');
      return v.error ? v : undefined;
    },
    60_000,
    "the impostor's preparation to fail",
  );
  t.is(view.error?.code, 'worktree_held');
  t.deepEqual((await orchard.pool.query(`SELECT holder, generation FROM worktree_leases WHERE worktree LIKE $1`, [`%/${sessionId}`])).rows, leaseBefore);
  t.is((await orchard.client.status(sessionId)).status, 'idle');
});
