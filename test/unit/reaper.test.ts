import { randomUUID } from 'node:crypto';
import test, { type ExecutionContext } from 'ava';
import type { ProcessInfo } from '../../activities/bash/process-tree';
import { identifyGroup, liveGroupsBlocking, reapCall, sweepHost } from '../../activities/bash/reaper';
import { recordProcessGroup } from '../../activities/store/leases';
import { testPool, uniqueId } from '../helpers/orchard';
import { deadWorker, isAlive, orphan, procStat } from '../helpers/processes';

const alive = isAlive;
const stat = procStat;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function setup(t: ExecutionContext) {
  const pool = await testPool(t);
  const host = uniqueId('reap-host');
  const lease = { worktree: `${host}:${uniqueId('/wt')}`, holder: 'h', generation: 1 };
  const rows = async () =>
    (
      await pool.query(
        `SELECT call_key, pgid, ended_at IS NOT NULL AS ended, end_reason, alive_pids FROM lease_process_groups
         WHERE host = $1 ORDER BY call_key`,
        [host],
      )
    ).rows;
  return { pool, host, lease, rows };
}

const info = (pid: number, o: Partial<ProcessInfo> = {}): ProcessInfo => ({
  pid,
  ppid: 1,
  pgid: pid,
  sid: pid,
  state: 'S',
  startTime: 1000,
  comm: 'x',
  ...o,
});

test('identity: the leader with its start time makes the group ours; a reused leader pid makes every member a stranger', (t) => {
  const group = { pgid: 500, startTime: 1000 };
  const members = [info(500), info(501, { pgid: 500, sid: 500, startTime: 1200 })];
  t.like(identifyGroup(group, members), { groupIsOurs: true });
  t.deepEqual(
    identifyGroup(group, members)
      .ours.map((p) => p.pid)
      .sort(),
    [500, 501],
  );
  const reused = [info(500, { startTime: 9000 }), info(501, { pgid: 500, sid: 500, startTime: 9100 })];
  t.like(identifyGroup(group, reused), { groupIsOurs: false, ours: [] });
  // A marker carrier is ours wherever it is, even beside a reused group.
  const carrier = info(777, { pgid: 777, sid: 777, startTime: 9500 });
  t.deepEqual(
    identifyGroup(group, [...reused, carrier], [carrier]).ours.map((p) => p.pid),
    [777],
  );
});

test('identity without the leader: members count only when none started before it and all are in its session', (t) => {
  const group = { pgid: 500, startTime: 1000 };
  t.like(identifyGroup(group, [info(501, { pgid: 500, sid: 500, startTime: 1000 })]), { groupIsOurs: true });
  t.like(identifyGroup(group, [info(501, { pgid: 500, sid: 500, startTime: 999 })]), { groupIsOurs: false, ours: [] });
  t.like(identifyGroup(group, [info(501, { pgid: 500, sid: 400, startTime: 2000 })]), { groupIsOurs: false, ours: [] });
  t.like(identifyGroup(group, [info(501, { pgid: 500, sid: 500, startTime: 2000 }), info(502, { pgid: 500, sid: 500, startTime: 10 })]), {
    groupIsOurs: false,
    ours: [],
  });
  // Zombies run nothing: they are never targets.
  t.like(identifyGroup(group, [info(500), info(501, { pgid: 500, state: 'Z', startTime: 2000 })]), { groupIsOurs: true });
  t.is(identifyGroup(group, [info(500), info(501, { pgid: 500, state: 'Z', startTime: 2000 })]).ours.length, 1);
  // A row recorded before identities existed identifies nothing: live members are reported, never claimed.
  t.like(identifyGroup({ pgid: 500, startTime: null }, [info(500)]), { ours: [], unidentified: [info(500)] });
});

test('reapCall kills an orphaned command, its escapees by marker and ancestry, verifies them gone and ends the row', async (t) => {
  const { pool, host, lease, rows } = await setup(t);
  const o = orphan(t, 'sleep 300 & echo "pid=$!"; (setsid sleep 300 & echo "pid=$!"); setsid env -i sleep 300 & echo "pid=$!"; ' + 'while :; do sleep 1; done');
  const [child, marked, envless] = await o.pids(3);
  await sleep(100);
  t.not(stat(marked)?.pgid, o.identity.pgid, 'the setsid child left the group');
  await recordProcessGroup(pool, lease, host, o.identity, 'call-1', await deadWorker());
  await recordProcessGroup(pool, lease, host, orphan(t, 'sleep 300').identity, 'call-2', await deadWorker());

  const r = await reapCall(pool, host, 'call-1', { graceMs: 200 });
  t.true(r.verified);
  t.deepEqual(r.remaining, []);
  for (const pid of [o.identity.pgid, child, marked, envless]) {
    t.false(alive(pid), `pid ${pid} survived`);
    t.true(r.killed.includes(pid), `pid ${pid} not reported killed`);
  }
  t.like(await rows(), [
    { call_key: 'call-1', ended: true, end_reason: 'reaped' },
    { call_key: 'call-2', ended: false },
  ]);
  // Another call's group is not this call's business.
  t.true(alive((await pool.query(`SELECT pgid FROM lease_process_groups WHERE host = $1 AND call_key = 'call-2'`, [host])).rows[0].pgid));
  t.like(await reapCall(pool, host, 'call-1'), { verified: true, killed: [] }, 'a second reap finds nothing open');
});

test('reapCall never signals a stranger that reused the pid: a leader with another start time, or members older than the recorded leader', async (t) => {
  const { pool, host, lease, rows } = await setup(t);
  // The recorded leader started earlier than the process now at its pid: that process is a stranger.
  const stranger = orphan(t, 'sleep 300');
  await recordProcessGroup(
    pool,
    lease,
    host,
    { ...stranger.identity, startTime: stranger.identity.startTime - 1, marker: randomUUID() },
    'reused-leader',
    await deadWorker(),
  );
  // The leader is gone and the member left in its group started before the recorded leader: strangers again.
  const leaderless = orphan(t, 'sleep 300 & echo "pid=$!"; exit 0');
  const [member] = await leaderless.pids(1);
  await leaderless.exited;
  await recordProcessGroup(
    pool,
    lease,
    host,
    { ...leaderless.identity, startTime: stat(member)!.startTime + 100, marker: randomUUID() },
    'reused-group',
    await deadWorker(),
  );

  for (const call of ['reused-leader', 'reused-group']) {
    t.like(await reapCall(pool, host, call, { graceMs: 100 }), { verified: true, killed: [], remaining: [] });
  }
  t.true(alive(stranger.identity.pgid), 'a stranger at the recorded pid was killed');
  t.true(alive(member), 'a stranger in the recorded group was killed');
  t.like(await rows(), [
    { ended: true, end_reason: 'gone' },
    { ended: true, end_reason: 'gone' },
  ]);
});

test('a leaderless group of the command (members no older than the leader, same session) is reaped', async (t) => {
  const { pool, host, lease, rows } = await setup(t);
  const o = orphan(t, 'sleep 300 & echo "pid=$!"; exit 0', randomUUID());
  const [member] = await o.pids(1);
  await o.exited;
  // No marker recorded, so only the group rule can find the member.
  await recordProcessGroup(pool, lease, host, { ...o.identity, marker: randomUUID() }, 'leaderless', await deadWorker());
  const r = await reapCall(pool, host, 'leaderless', { graceMs: 100 });
  t.like(r, { verified: true, killed: [member] });
  t.false(alive(member));
  t.like(await rows(), [{ ended: true, end_reason: 'reaped' }]);
});

test('a group recorded in another boot is ended without a signal, whatever runs at its pid now', async (t) => {
  const { pool, host, lease, rows } = await setup(t);
  const o = orphan(t, 'sleep 300');
  await recordProcessGroup(pool, lease, host, { ...o.identity, bootId: randomUUID() }, 'old-boot', await deadWorker());
  t.like(await reapCall(pool, host, 'old-boot'), { verified: true, killed: [] });
  t.true(alive(o.identity.pgid));
  t.like(await rows(), [{ ended: true, end_reason: 'rebooted' }]);
});

test('a group that cannot be killed stays open, names its pids and blocks the worktree until it is gone', async (t) => {
  const { pool, host, lease, rows } = await setup(t);
  const o = orphan(t, 'sleep 300 & echo "pid=$!"; wait');
  const [child] = await o.pids(1);
  await recordProcessGroup(pool, lease, host, o.identity, 'stuck', await deadWorker());
  const cannotKill = { send: () => undefined, graceMs: 50, timeoutMs: 300 };

  const r = await reapCall(pool, host, 'stuck', cannotKill);
  t.false(r.verified);
  t.deepEqual(
    r.remaining,
    [o.identity.pgid, child].sort((a, b) => a - b),
  );
  t.deepEqual(r.killed, []);
  const [row] = await rows();
  t.like(row, { ended: false });
  t.deepEqual([...row.alive_pids].sort(), r.remaining.map(Number).sort());

  const reason = await liveGroupsBlocking(pool, host, lease.worktree, undefined, cannotKill);
  t.truthy(reason);
  t.regex(reason!, new RegExp(`pids ${r.remaining.join(', ')}`));
  t.is(await liveGroupsBlocking(pool, host, lease.worktree, 'stuck', cannotKill), undefined, 'the excepted call is not checked');
  t.is(await liveGroupsBlocking(pool, host, `${host}:/another`, undefined, cannotKill), undefined);

  // Once a kill works, the same check reaps them and lets the worktree go.
  t.is(await liveGroupsBlocking(pool, host, lease.worktree, undefined, { graceMs: 100 }), undefined);
  t.false(alive(o.identity.pgid));
  t.false(alive(child));
  t.like(await rows(), [{ ended: true, end_reason: 'reaped' }]);
});

test('sweepHost reaps the orphans of dead workers on its host and leaves a live worker’s commands alone', async (t) => {
  const { pool, host, lease, rows } = await setup(t);
  const orphaned = orphan(t, 'while :; do sleep 1; done');
  const supervised = orphan(t, 'while :; do sleep 1; done');
  const elsewhere = orphan(t, 'while :; do sleep 1; done');
  await recordProcessGroup(pool, lease, host, orphaned.identity, 'a-orphaned', await deadWorker());
  // Supervised by this (live) process: a running command of a live worker.
  await recordProcessGroup(pool, lease, host, supervised.identity, 'b-supervised');
  await recordProcessGroup(pool, lease, `${host}-other`, elsewhere.identity, 'c-elsewhere', await deadWorker());

  const s = await sweepHost(pool, host, { graceMs: 100 });
  t.like(s, { open: 2, supervised: 1, verified: true, remaining: [] });
  t.true(s.killed.includes(orphaned.identity.pgid));
  t.false(alive(orphaned.identity.pgid));
  t.true(alive(supervised.identity.pgid));
  t.true(alive(elsewhere.identity.pgid), 'another host’s group was touched');
  t.like(await rows(), [
    { call_key: 'a-orphaned', ended: true },
    { call_key: 'b-supervised', ended: false },
  ]);
});
