import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { UNKNOWN_OUTCOME } from '../../activities/store/transcript';
import { waitFor } from '../helpers/wait';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { gate } from '../helpers/fleet-model';
import { startScriptedTeam, type Call } from '../helpers/team';

const shared = sharedOrchard(test);

test('a worker shut down past its grace period stops the command, records the claim unknown, and the retry tells the model so', async (t) => {
  const orchard = shared();
  const hostId = uniqueId('draining');
  // This host's worker drains for half a second only: the command outlives the grace period.
  const draining = await orchard.startHost(hostId, { hostOnly: true, shutdownGraceMs: 500 });
  const seconds = 3000 + Math.floor(Math.random() * 900);
  const scenario = writeScenario({
    name: 'drain',
    turns: [
      {
        steps: [
          { tool_calls: [{ name: 'bash', arguments: { command: `echo started >> runs.log; sleep ${seconds}; echo finished >> runs.log` } }] },
          { content: 'after the deploy' },
        ],
      },
    ],
  });
  const sessionId = uniqueId('drain');
  await orchard.client.createSession({ sessionId, title: 'drain', repo: makeRepo(), host: hostId, model: { provider: 'scripted', scenario }, task: 'build' });
  const view0 = await waitFor(async () => {
    const v = await orchard.client.status(sessionId);
    return v.worktree && existsSync(join(v.worktree, 'runs.log')) ? v : undefined;
  });

  draining.shutdown();
  const claim = await waitFor(async () => {
    const { rows } = await orchard.pool.query(`SELECT state, unknown_reason FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
    return rows[0]?.state === 'unknown' ? rows[0] : undefined;
  });
  t.regex(claim.unknown_reason, /shut down/);
  // The new version's worker for the host takes the retry: it reports unknown and runs nothing again.
  await orchard.startHost(hostId, { hostOnly: true });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 60_000 });
  t.like(view.lastTurn, { outcome: 'finished', finalExcerpt: 'after the deploy' });
  t.deepEqual(readFileSync(join(view0.worktree!, 'runs.log'), 'utf8').trim().split('\n'), ['started']);
  const shown = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.deepEqual(
    shown.rows.map((r) => r.content),
    [UNKNOWN_OUTCOME],
  );
  const kept = await orchard.pool.query(`SELECT content FROM tool_outputs WHERE session_id = $1`, [sessionId]);
  t.regex(kept.rows[0].content, /^interrupted: the worker running this command was shut down/);
});

/**
 * A worker that shuts down while an activity waits on Temporal finishes its shutdown (a deploy never hangs): the
 * attempt's cancellation reaches the call it waits on, and the next worker's retry does the work once.
 *
 * Found in CI (a run hung for over an hour in a test's teardown): a team's dispatch waited on its Member's create
 * update, which only a workflow worker can answer; the worker, shutting down, took no workflow task, and the
 * activity ignored its cancellation, so the shutdown never ended.
 */
const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const APPROVE: Call = ['plan_approve', {}];
/** Longer than the test workers' grace period (10 s) and the cancel that follows it, far shorter than a hang. */
const SHUTDOWN_BOUND_MS = Number(process.env.ORCHARD_TEST_SHUTDOWN_BOUND_MS ?? 60_000);

test('a worker stopping while a dispatch waits on the Member session finishes stopping; the next worker dispatches once', async (t) => {
  const arrived = gate();
  const held = gate();
  let holds = 0;
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'finish' },
    teamHooks: {
      beforeCreateSession: async () => {
        if (holds++ > 0) return;
        arrived.open();
        await held.promise;
      },
    },
  });
  await arrived.promise;
  // Shutdown begins (the workers stop taking tasks), then the held dispatch asks for the Member's session.
  const restarted = h.orchard.restartWorkers();
  held.open();
  const bound = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), SHUTDOWN_BOUND_MS).unref());
  const outcome = await Promise.race([restarted.then(() => 'restarted' as const), bound]);
  t.is(outcome, 'restarted', `the workers did not finish stopping within ${SHUTDOWN_BOUND_MS} ms`);

  const done = await h.until('the task completed', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'completed'));
  t.is(done.executions.filter((e) => e.taskId === 'a').length, 1, 'one execution of the task');
  t.true(holds >= 2, 'the dispatch was retried by the next worker');
  // The Member's session was created once and its brief queued once, whatever the retry did.
  t.is(await h.count(`SELECT count(*) AS n FROM session_tasks WHERE session_id LIKE $1 AND task LIKE 'Task a:%'`, [`${h.teamId}%`]), 1);
});
