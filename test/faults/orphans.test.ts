import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { RUN_MARKER_ENV } from '../../activities/bash/runner';
import { makeRepo, sharedOrchard, uniqueId, writeScenario, type TestOrchard } from '../helpers/orchard';
import { isAlive, killAll, pidsWithCommandLine, procStat } from '../helpers/processes';
import { startHostWorker, until } from './harness';

/**
 * Issue 7: a session runs a long loop that writes into its worktree; its host worker is killed with kill -9.
 * The loop must not outlive that: whoever runs the host next (a new worker's start-up sweep, or the surviving
 * worker that gets the retry) kills it, verified from /proc, before the session writes in that worktree again.
 */
const shared = sharedOrchard(test);

const loopCommand = (tag: string) => `for i in $(seq 1 120); do echo $i >> loop.log; sleep 1; done # ${tag}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const size = (file: string) => (existsSync(file) ? statSync(file).size : 0);

interface Group {
  pgid: number;
  marker: string;
  ended: boolean;
  end_reason: string | null;
  alive_pids: number[] | null;
}

/** Live processes that belong to a recorded group: in its process group, or carrying its marker. Read from /proc. */
function livingOf(group: Group): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    const stat = procStat(pid);
    if (!stat?.live) continue;
    let marked = false;
    try {
      marked = readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`${RUN_MARKER_ENV}=${group.marker}`);
    } catch {
      // gone
    }
    if (stat.pgid === group.pgid || marked) found.push(pid);
  }
  return found;
}

async function groupsOf(orchard: TestOrchard, sessionId: string): Promise<Group[]> {
  const { rows } = await orchard.pool.query(
    `SELECT pgid, marker, ended_at IS NOT NULL AS ended, end_reason, alive_pids FROM lease_process_groups WHERE worktree LIKE $1`,
    [`%/${sessionId}`],
  );
  return rows;
}

async function toolResults(orchard: TestOrchard, sessionId: string): Promise<string[]> {
  const { rows } = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool' ORDER BY turn, step, ordinal`, [
    sessionId,
  ]);
  return rows.map((r) => r.content);
}

/** A session on a host worker of its own whose first tool call is the loop; resolves once the loop writes. */
async function sessionRunningLoop(t: ExecutionContext, steps: unknown[]) {
  const orchard = shared();
  const hostId = uniqueId('orphans');
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-orphans-'));
  const tag = uniqueId('loop-tag');
  const scenario = writeScenario({
    name: 'orphans',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: loopCommand(tag) } }] }, ...steps] }],
  });
  const first = await startHostWorker(t, hostId, worktreeRoot);
  const sessionId = uniqueId('orphans');
  await orchard.client.createSession({ sessionId, title: 'orphans', repo: makeRepo(), host: hostId, model: { provider: 'scripted', scenario }, task: 'loop' });
  const worktree = join(worktreeRoot, sessionId);
  const log = join(worktree, 'loop.log');
  await until(() => size(log) >= 4, 30_000); // "1\n2\n": it has been running for a second
  const [group] = await groupsOf(orchard, sessionId);
  t.truthy(group, 'the loop’s group was recorded');
  // Whatever the outcome, nothing of the loop outlives the test.
  t.teardown(() => killAll([...livingOf(group), ...pidsWithCommandLine(tag)]));
  return { orchard, hostId, worktreeRoot, worktree, log, tag, group, first, sessionId };
}

/** The orphan exists: its worker is dead and the loop still writes (so the checks below can fail). */
async function killWorkerLeavingOrphan(t: ExecutionContext, s: Awaited<ReturnType<typeof sessionRunningLoop>>) {
  s.first.kill('SIGKILL');
  await new Promise((resolve) => s.first.once('exit', resolve));
  const before = size(s.log);
  await sleep(1500);
  t.true(size(s.log) > before, 'the loop stopped with its worker: nothing to reap');
  t.true(livingOf(s.group).length > 0);
}

async function stopsGrowing(log: string): Promise<boolean> {
  const a = size(log);
  await sleep(2500);
  return size(log) === a;
}

test('kill -9 of the host worker: the next worker reaps the orphaned loop before it takes work; the retry reports unknown', async (t) => {
  const s = await sessionRunningLoop(t, [{ content: 'after the crash' }]);
  await killWorkerLeavingOrphan(t, s);

  const second = await startHostWorker(t, s.hostId, s.worktreeRoot);
  t.log(second.output().trim());
  // Right after start, before any retry can have arrived (the heartbeat timeout is 15 s): the sweep did it.
  t.deepEqual(livingOf(s.group), [], 'processes of the loop are alive after the new worker started');
  t.deepEqual(pidsWithCommandLine(s.tag), []);
  t.true(await stopsGrowing(s.log), 'loop.log still grows');
  t.like(await groupsOf(s.orchard, s.sessionId), [{ ended: true, end_reason: 'reaped' }]);

  const view = await s.orchard.client.waitUntilSettled(s.sessionId, { afterTurn: 1, timeoutMs: 90_000 });
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(view.lastTurn?.finalExcerpt, 'after the crash');
  const dispatch = await s.orchard.pool.query(`SELECT state FROM tool_dispatches WHERE session_id = $1`, [s.sessionId]);
  t.deepEqual(dispatch.rows, [{ state: 'unknown' }]);
  const [result] = await toolResults(s.orchard, s.sessionId);
  t.regex(result, /outcome unknown/);
  t.notRegex(result, /could not be verified stopped/);
});

test('kill -9 of one of two workers of a host: the survivor leaves it alone while it lives, then its retry reaps the orphan', async (t) => {
  const s = await sessionRunningLoop(t, [{ content: 'after the crash' }]);
  // A second worker for the same host starts while the first still supervises the loop: its sweep must not touch it.
  await startHostWorker(t, s.hostId, s.worktreeRoot);
  t.true(livingOf(s.group).length > 0, 'a start-up sweep killed a live worker’s command');
  t.like(await groupsOf(s.orchard, s.sessionId), [{ ended: false }]);

  await killWorkerLeavingOrphan(t, s);
  // No new worker starts: only the unknown-outcome retry on the survivor can stop the loop.
  const view = await s.orchard.client.waitUntilSettled(s.sessionId, { afterTurn: 1, timeoutMs: 90_000 });
  t.is(view.lastTurn?.outcome, 'finished');
  t.deepEqual(livingOf(s.group), []);
  t.true(await stopsGrowing(s.log), 'loop.log still grows');
  t.like(await groupsOf(s.orchard, s.sessionId), [{ ended: true, end_reason: 'reaped' }]);
  const [result] = await toolResults(s.orchard, s.sessionId);
  t.regex(result, /outcome unknown/);
  t.notRegex(result, /could not be verified stopped/);
});

test('an orphan that cannot be killed keeps the worktree blocked: the next mutating call is refused and writes nothing', async (t) => {
  const s = await sessionRunningLoop(t, [
    { tool_calls: [{ name: 'write_file', arguments: { path: 'after.txt', content: 'must not be written\n' } }] },
    { content: 'blocked' },
  ]);
  await killWorkerLeavingOrphan(t, s);
  // This worker's reaper cannot kill (its signals reach nothing): the sweep leaves the group open.
  const second = await startHostWorker(t, s.hostId, s.worktreeRoot, { ORCHARD_TEST_REAP_CANNOT_KILL: '1' });
  t.regex(second.output(), /NOT verified gone: pids/);

  const view = await s.orchard.client.waitUntilSettled(s.sessionId, { afterTurn: 1, timeoutMs: 90_000 });
  t.is(view.lastTurn?.outcome, 'finished');
  const [unknown, refused] = await toolResults(s.orchard, s.sessionId);
  t.regex(unknown, /outcome unknown/);
  t.regex(unknown, /could not be verified stopped \(pids [\d, ]+ are still alive\), so the worktree is blocked/);
  t.regex(refused, /^error \(worktree_processes_alive\): .*pids \d+/);
  t.false(existsSync(join(s.worktree, 'after.txt')), 'the refused write_file wrote its file');
  const [group] = await groupsOf(s.orchard, s.sessionId);
  t.false(group.ended);
  t.true((group.alive_pids ?? []).includes(s.group.pgid));
  t.true(isAlive(s.group.pgid), 'the loop was killed after all: nothing was left to block');
});
