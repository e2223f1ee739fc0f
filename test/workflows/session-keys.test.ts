import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import test from 'ava';
import { sessionWorkflowId } from '../../contract/messages';
import { git, makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

const shared = sharedOrchard(test);

/** A turn that appends to a log with bash and commits it: every real execution leaves a line and a commit. */
function committingTurn(label: string) {
  return {
    steps: [
      { tool_calls: [{ name: 'bash', arguments: { command: `echo ${label} >> attempts.log` } }] },
      { tool_calls: [{ name: 'git_commit', arguments: { message: `commit ${label}`, paths: ['attempts.log'] } }] },
      { content: `${label} done` },
    ],
  };
}

test('a session cancelled and created again with the same id runs its new task: new model call, new commit', async (t) => {
  const orchard = shared();
  const repo = makeRepo();
  const sessionId = uniqueId('recreate');
  const first = writeScenario({ name: 'first', turns: [committingTurn('first')] });
  await orchard.client.createSession({ sessionId, title: 'first life', repo, model: { provider: 'scripted', scenario: first }, task: 'first task' });
  const done = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(done.lastTurn?.outcome, 'finished');
  await orchard.client.cancel(sessionId, 'done with it');

  const second = writeScenario({ name: 'second', turns: [{ expect: { taskIncludes: ['second task'] }, ...committingTurn('second') }] });
  const again = await orchard.client.createSession({
    sessionId,
    title: 'second life',
    repo,
    model: { provider: 'scripted', scenario: second },
    task: 'second task',
  });
  t.is(again.outcome, 'created');
  t.not(again.session.executionId, done.executionId);
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(view.lastTurn?.finalExcerpt, 'second done');

  // The new task reached the model (a model call under the new execution) and its tools ran (a new commit).
  const calls = await orchard.pool.query(
    `SELECT execution_id, count(*)::int AS n FROM model_calls WHERE session_id = $1 GROUP BY execution_id ORDER BY min(created_at)`,
    [sessionId],
  );
  t.deepEqual(
    calls.rows.map((r) => [r.execution_id, r.n]),
    [
      [done.executionId, 3],
      [view.executionId, 3],
    ],
  );
  t.deepEqual(git(repo, 'log', '--format=%s', `orchard/${sessionId}/work`).split('\n').slice(0, 2), ['commit second', 'commit first']);
  t.deepEqual(readFileSync(join(view.worktree!, 'attempts.log'), 'utf8').trim().split('\n'), ['first', 'second']);
  // A task's end is written by a store activity after the turn settles: wait for the row, then check every row.
  const states = async () =>
    (await orchard.pool.query(`SELECT task, state FROM session_tasks WHERE session_id = $1 ORDER BY created_at`, [sessionId])).rows.map((r) => [
      r.task,
      r.state,
    ]);
  await waitFor(async () => ((await states()).every(([, state]) => state !== 'running') ? true : undefined), 30_000, 'the tasks ended');
  t.deepEqual(await states(), [
    ['first task', 'done'],
    ['second task', 'done'],
  ]);
});

test('a reset to before the last turn runs that turn again as a new attempt; the transcript keeps both', async (t) => {
  const orchard = shared();
  const repo = makeRepo();
  const sessionId = uniqueId('reset');
  const scenario = writeScenario({
    name: 'reset',
    turns: [{ steps: [{ content: 'turn one done' }] }, { expect: { historyIncludes: ['turn one done'] }, ...committingTurn('two') }],
  });
  await orchard.client.createSession({ sessionId, title: 'reset', repo, model: { provider: 'scripted', scenario }, task: 'one' });
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  await orchard.client.send(sessionId, 'two');
  const before = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  t.is(before.lastTurn?.outcome, 'finished');

  // Reset to the workflow task that began turn 2 (the one that scheduled its first model call).
  const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  const history = await handle.fetchHistory();
  const firstCallOfTurn2 = (history.events ?? []).find((e) => {
    const a = e.activityTaskScheduledEventAttributes;
    if (a?.activityType?.name !== 'modelStep') return false;
    const input = JSON.parse(Buffer.from(a.input!.payloads![0].data!).toString());
    return input.turn === 2 && input.step === 1;
  });
  t.truthy(firstCallOfTurn2);
  const description = await handle.describe();
  await orchard.temporal.workflowService.resetWorkflowExecution({
    namespace: orchard.temporal.options.namespace,
    workflowExecution: { workflowId: sessionWorkflowId(sessionId), runId: description.runId },
    reason: 'operator re-runs turn 2',
    workflowTaskFinishEventId: firstCallOfTurn2!.activityTaskScheduledEventAttributes!.workflowTaskCompletedEventId,
    requestId: randomUUID(),
  });

  const after = await waitForTurnAttempts(orchard, sessionId, 2);
  t.is(after.lastTurn?.outcome, 'finished');
  t.not(after.lastTurn?.turnId, before.lastTurn?.turnId);
  // The turn really ran again: its command appended a second line, and a second commit was made.
  const worktree = before.worktree!;
  t.deepEqual(readFileSync(join(worktree, 'attempts.log'), 'utf8').trim().split('\n'), ['two', 'two']);
  t.deepEqual(git(repo, 'log', '--format=%s', `orchard/${sessionId}/work`).split('\n').slice(0, 2), ['commit two', 'commit two']);
  // Both attempts of turn 2 stand in the transcript, under their own turn ids; turn 1 was not re-run.
  const { rows } = await orchard.pool.query(
    `SELECT turn, turn_id, count(*)::int AS entries FROM transcript_entries WHERE session_id = $1 GROUP BY turn, turn_id ORDER BY min(seq)`,
    [sessionId],
  );
  t.deepEqual(
    rows.map((r) => r.turn),
    [1, 2, 2],
  );
  t.deepEqual(
    rows.slice(1).map((r) => r.turn_id),
    [before.lastTurn?.turnId, after.lastTurn?.turnId],
  );
  const calls = await orchard.pool.query(`SELECT turn, count(*)::int AS n FROM model_calls WHERE session_id = $1 GROUP BY turn ORDER BY turn`, [sessionId]);
  t.deepEqual(
    calls.rows.map((r) => [r.turn, r.n]),
    [
      [1, 1],
      [2, 6],
    ],
  );
});

/** Waits until the session's latest run has finished a turn numbered `turn` under a turn id not seen before. */
async function waitForTurnAttempts(orchard: ReturnType<typeof shared>, sessionId: string, turn: number) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { rows } = await orchard.pool.query(`SELECT count(DISTINCT turn_id)::int AS n FROM model_calls WHERE session_id = $1 AND turn = $2`, [
      sessionId,
      turn,
    ]);
    if (rows[0].n >= 2) {
      const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: turn });
      if (view.lastTurn?.turn === turn && view.currentTask === undefined) return view;
    }
    if (Date.now() > deadline) throw new Error('the reset turn did not run again in time');
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('a run of the pre-v2 code that continued-as-new is taken over: its queued task runs under the legacy chain', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('v1-carried');
  const scenario = writeScenario({
    name: 'carried',
    turns: [{ repeat: true, expect: { taskIncludes: ['carried over'] }, steps: [{ content: 'ran the carried task' }] }],
  });
  // What a v1 run passed to continue-as-new: its create input and a carried queue holding task text.
  const create = { sessionId, title: 'v1', repo: makeRepo(), host: orchard.hostId, model: { provider: 'scripted', scenario } };
  const carried = {
    status: 'progressing',
    queue: [{ taskId: 't3', task: 'the task carried over from v1' }],
    nextTaskSeq: 4,
    turnsCompleted: 2,
    runIndex: 0,
    seenRequests: [['req-2', 't2']],
    turns: [],
  };
  await orchard.temporal.workflow.start('childSession', {
    workflowId: sessionWorkflowId(sessionId),
    taskQueue: orchard.taskQueue,
    args: [{ create, carried }],
  });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 3 });
  t.is(view.executionId, `legacy/${sessionId}`);
  t.like(view.lastTurn, { turn: 3, taskId: 't3', outcome: 'finished', finalExcerpt: 'ran the carried task' });
  t.is(view.runIndex, 1);
  // Its dedupe window came along: a retried send of a request v1 acknowledged queues nothing.
  const again = await orchard.client.send(sessionId, { task: 'retried', requestId: 'req-2' });
  t.like(again, { taskId: 't2', duplicate: true });
});

test('a cancel bound to an execution chain never reaches a later chain of the same session id', async (t) => {
  const orchard = shared();
  const repo = makeRepo();
  const sessionId = uniqueId('chain');
  const idle = writeScenario({ name: 'idle', turns: [{ steps: [{ content: 'done' }] }] });
  await orchard.client.createSession({ sessionId, title: 'first life', repo, model: { provider: 'scripted', scenario: idle }, task: 'first task' });
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  const firstChain = (await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe()).raw.workflowExecutionInfo!.firstRunId!;
  // The chain a handoff fenced, bound by its run id, is alive and is cancelled like any session.
  t.is((await orchard.client.sessionLiveness(sessionId, { chain: firstChain })).liveness, 'alive');
  await orchard.client.cancel(sessionId, 'handed off', { chain: firstChain });
  t.is((await orchard.client.status(sessionId)).status, 'closed');

  // The member gets a new session under the same id (a later task's): a late retry of the first cancel must not touch it.
  await orchard.client.createSession({ sessionId, title: 'second life', repo, model: { provider: 'scripted', scenario: idle }, task: 'second task' });
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.like(await orchard.client.sessionLiveness(sessionId, { chain: firstChain }), { liveness: 'dead', execution: 'SUPERSEDED' });
  const late = await t.throwsAsync(orchard.client.cancel(sessionId, 'a late retry of the first handoff', { chain: firstChain }));
  t.is((late as { code?: string }).code, 'session_closed');
  const now = await orchard.client.status(sessionId);
  t.is(now.status, 'idle', 'the newer session is untouched');
  t.is((await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe()).status.name, 'RUNNING');
});
