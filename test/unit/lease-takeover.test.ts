import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createHostActivities, leaseKey } from '../../activities';
import type { ReapOptions } from '../../activities/bash/reaper';
import { recordProcessGroup } from '../../activities/store/leases';
import { makeRepo, testPool, uniqueId } from '../helpers/orchard';
import { deadWorker, isAlive, orphan } from '../helpers/processes';

/**
 * prepareWorktree's takeover check (acquireLease's aliveProcesses) with the reaper's identity rules: a closed
 * holder's live processes are reaped before a takeover, a stranger at a recorded pid neither blocks it nor is
 * signalled, and processes that cannot be stopped keep the lease with the old holder.
 */
async function setup(t: ExecutionContext, reap?: ReapOptions) {
  const pool = await testPool(t);
  const hostId = uniqueId('takeover-host');
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-takeover-'));
  // The old holder's chain is closed per Temporal; the new one asks.
  const acts = createHostActivities({ pool, hostId, worktreeRoot, holderLiveness: async () => 'closed', reap });
  const sessionId = uniqueId('s');
  const repo = makeRepo();
  // prepareWorktree heartbeats: it runs in the SDK's activity context harness.
  const prepare = (holder: string): ReturnType<typeof acts.prepareWorktree> =>
    new MockActivityEnvironment().run(acts.prepareWorktree, { sessionId, repo, holder });
  const first = await prepare('old');
  const key = leaseKey(hostId, first.worktree);
  const takeOver = () => prepare('new');
  const lease = async () => (await pool.query(`SELECT holder, generation FROM worktree_leases WHERE worktree = $1`, [key])).rows[0];
  const groups = async () => (await pool.query(`SELECT ended_at IS NOT NULL AS ended, end_reason FROM lease_process_groups WHERE worktree = $1`, [key])).rows;
  return { pool, hostId, first, takeOver, lease, groups };
}

test('a closed holder’s orphaned command is reaped, then the lease is taken over', async (t) => {
  const { pool, hostId, first, takeOver, lease, groups } = await setup(t, { graceMs: 100 });
  const o = orphan(t, 'while :; do sleep 1; done');
  await recordProcessGroup(pool, first.lease, hostId, o.identity, 'old-call', await deadWorker());
  const second = await takeOver();
  t.is(second.leaseOutcome, 'taken_over');
  t.like(await lease(), { holder: 'new', generation: '2' });
  t.false(isAlive(o.identity.pgid));
  t.like(await groups(), [{ ended: true, end_reason: 'reaped' }]);
});

test('a stranger that reused a recorded pid neither blocks the takeover nor is signalled', async (t) => {
  const { pool, hostId, first, takeOver, lease } = await setup(t);
  const stranger = orphan(t, 'sleep 300');
  // Recorded with an earlier start time and another marker: the process now at that pid is not the command.
  const recorded = { ...stranger.identity, startTime: stranger.identity.startTime - 5, marker: 'not-its-marker' };
  await recordProcessGroup(pool, first.lease, hostId, recorded, 'old-call', await deadWorker());
  t.is((await takeOver()).leaseOutcome, 'taken_over');
  t.like(await lease(), { holder: 'new' });
  t.true(isAlive(stranger.identity.pgid));
});

test('a closed holder’s processes that cannot be stopped keep the lease where it is (worktree_liveness_unknown)', async (t) => {
  const { pool, hostId, first, takeOver, lease, groups } = await setup(t, { send: () => undefined, graceMs: 50, timeoutMs: 300 });
  const o = orphan(t, 'while :; do sleep 1; done');
  await recordProcessGroup(pool, first.lease, hostId, o.identity, 'old-call', await deadWorker());
  const err = await t.throwsAsync(takeOver());
  t.true(err instanceof ApplicationFailure);
  t.is((err as ApplicationFailure).type, 'worktree_liveness_unknown');
  t.regex(err!.message, new RegExp(`still alive \\(pids [0-9, ]*${o.identity.pgid}`));
  t.like(await lease(), { holder: 'old', generation: '1' });
  t.true(isAlive(o.identity.pgid));
  t.like(await groups(), [{ ended: false }]);
});
