import test from 'ava';
import type { Pool } from 'pg';
import {
  activateTeamRun,
  approvePlan,
  assignTask,
  createTask,
  createTeamRun,
  dispatchEnded,
  DispatchInFlight,
  failTask,
  fenceHandoff,
  moveReceipt,
  postInboxMessage,
  readBoard,
  recordTaskOutput,
  recordUserEvent,
  startTask,
  TeamStoreRefusal,
  updateTask,
  __testing,
} from '../../activities/store/team';
import { MEMBER_MESSAGE_PURPOSES, type Actor } from '../../workflows/team/authority';
import { memberSessionId } from '../../contract/member-session';
import { testPool, uniqueId } from '../helpers/orchard';

/**
 * The team board in real Postgres: the store boundary (invariant 12: a write attributed to a Coordinator turn that
 * is not graph administration is refused), the work revision (one bump per committed fact, none for an
 * idempotent retry or a refusal) and the Member message rule (invariant 16).
 */
const coordinator: Actor = { kind: 'coordinator', turnId: 'turn-1' };
const implementer: Actor = { kind: 'member', memberId: 'implementer', executionId: 'exec-1' };
const reviewer: Actor = { kind: 'member', memberId: 'reviewer', executionId: 'exec-2' };

async function team(pool: Pool): Promise<string> {
  const teamId = uniqueId('team');
  await createTeamRun(pool, {
    teamId,
    repo: '/srv/repo',
    goal: 'build it',
    members: [
      { memberId: 'implementer', role: 'Implementer', sessionId: memberSessionId(teamId, 'implementer') },
      { memberId: 'reviewer', role: 'Reviewer', sessionId: memberSessionId(teamId, 'reviewer') },
    ],
  });
  return teamId;
}

const revision = async (pool: Pool, teamId: string) =>
  Number((await pool.query('SELECT work_revision FROM team_runs WHERE team_id = $1', [teamId])).rows[0].work_revision);

async function refusedWith(t: import('ava').ExecutionContext, pool: Pool, teamId: string, code: string, write: () => Promise<unknown>) {
  const before = await revision(pool, teamId);
  const facts = Number((await pool.query('SELECT count(*) AS n FROM team_facts WHERE team_id = $1', [teamId])).rows[0].n);
  const err = await t.throwsAsync(write(), { instanceOf: TeamStoreRefusal });
  t.is(err?.code, code, err?.message);
  t.is(await revision(pool, teamId), before, 'no revision bump');
  t.is(Number((await pool.query('SELECT count(*) AS n FROM team_facts WHERE team_id = $1', [teamId])).rows[0].n), facts, 'no fact');
}

test('the store boundary: each write only from the actors allowed to make it; a refusal changes nothing', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  const user: Actor = { kind: 'user', eventId: 'ev-1' };
  // Graph administration is the Coordinator's; evidence is not.
  await createTask(pool, teamId, coordinator, { taskId: 't1', title: 'implement', owner: 'implementer' });
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () => createTask(pool, teamId, implementer, { taskId: 't2', title: 'sneak' }));
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () => createTask(pool, teamId, user, { taskId: 't2', title: 'sneak' }));
  await startTask(pool, teamId, 't1', 'exec-1');
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () =>
    recordTaskOutput(pool, teamId, coordinator, { taskId: 't1', outputId: 'o1', summary: 'I did it myself' }),
  );
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () => failTask(pool, teamId, coordinator, 't1', 'give up'));
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () =>
    postInboxMessage(pool, teamId, coordinator, { messageId: 'x', relatedTaskId: 't1', purpose: 'risk', text: 'hi' }),
  );
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () => updateTask(pool, teamId, implementer, 't1', { title: 'rename' }));
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () => assignTask(pool, teamId, reviewer, 't1', 'reviewer'));
  // Another member cannot deliver a task it does not own.
  await refusedWith(t, pool, teamId, 'task_not_owned', () => recordTaskOutput(pool, teamId, reviewer, { taskId: 't1', outputId: 'o1', summary: 'mine' }));
  // The owner's execution can, once; a retry is idempotent.
  const done = await recordTaskOutput(pool, teamId, implementer, { taskId: 't1', outputId: 'o1', summary: 'implemented' });
  const again = await recordTaskOutput(pool, teamId, implementer, { taskId: 't1', outputId: 'o1', summary: 'implemented' });
  t.is(again.revision, done.revision, 'a retried output commits no second fact');
  const board = await readBoard(pool, teamId);
  t.like(board.tasks[0], { taskId: 't1', status: 'completed', outputId: 'o1' });
  t.deepEqual(
    board.outputs.map((o) => [o.outputId, o.executionId, o.generation]),
    [['o1', 'exec-1', 1]],
  );
  t.is(board.workRevision, done.revision);
  const facts = (await pool.query('SELECT revision, kind, actor FROM team_facts WHERE team_id = $1 ORDER BY revision', [teamId])).rows;
  t.deepEqual(
    facts.map((f) => [Number(f.revision), f.kind, f.actor]),
    [
      [1, 'task_created', 'coordinator:turn-1'],
      [2, 'task_started', 'system'],
      [3, 'task_output', 'member:implementer:exec-1'],
    ],
  );
});

test('plan approval is a fact of the Coordinator: once per activation, then again after a new activation', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  await activateTeamRun(pool, teamId, 'first');
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () => approvePlan(pool, teamId, implementer));
  const first = await approvePlan(pool, teamId, coordinator);
  t.deepEqual(first, { result: { approved: true, already: false }, revision: await revision(pool, teamId) });
  t.deepEqual(await approvePlan(pool, teamId, coordinator), { result: { approved: true, already: true }, revision: first.revision });
  await activateTeamRun(pool, teamId, 'second');
  const again = await approvePlan(pool, teamId, coordinator);
  t.is(again.result.already, false);
  t.is(again.revision, first.revision + 2);
  const facts = (await pool.query(`SELECT kind, actor FROM team_facts WHERE team_id = $1 AND kind = 'plan_approved' ORDER BY revision`, [teamId])).rows;
  t.deepEqual(facts, [
    { kind: 'plan_approved', actor: 'coordinator:turn-1' },
    { kind: 'plan_approved', actor: 'coordinator:turn-1' },
  ]);
});

test('every committed fact bumps the work revision once; concurrent writers serialise on the run row', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  await Promise.all(Array.from({ length: 12 }, (_, i) => createTask(pool, teamId, coordinator, { taskId: `t${i}`, title: `task ${i}` })));
  t.is(await revision(pool, teamId), 12);
  const revisions = (await pool.query('SELECT revision FROM team_facts WHERE team_id = $1 ORDER BY revision', [teamId])).rows.map((r) => Number(r.revision));
  t.deepEqual(
    revisions,
    Array.from({ length: 12 }, (_, i) => i + 1),
  );
  // Re-creating an existing task is a retry: no fact.
  await createTask(pool, teamId, coordinator, { taskId: 't0', title: 'task 0' });
  t.is(await revision(pool, teamId), 12);
  await recordUserEvent(pool, teamId, { eventId: 'ev-1', kind: 'scope_removed', taskId: 't3' });
  await recordUserEvent(pool, teamId, { eventId: 'ev-1', kind: 'scope_removed', taskId: 't3' });
  t.is(await revision(pool, teamId), 13);
});

test('a Member message needs its exact current task and a listed purpose; a refusal writes no inbox row and wakes nothing', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  await createTask(pool, teamId, coordinator, { taskId: 'mine', title: 'implement', owner: 'implementer' });
  await createTask(pool, teamId, coordinator, { taskId: 'theirs', title: 'review', owner: 'reviewer' });
  await createTask(pool, teamId, coordinator, { taskId: 'later', title: 'later', owner: 'implementer' });
  await startTask(pool, teamId, 'mine', 'exec-1');
  await startTask(pool, teamId, 'theirs', 'exec-2');
  const message = (extra: Record<string, unknown>) => ({
    messageId: uniqueId('msg'),
    text: 'need a decision',
    relatedTaskId: 'mine',
    purpose: 'blocker',
    ...extra,
  });
  const refusals: [string, Record<string, unknown>, string][] = [
    ['no purpose', { purpose: undefined }, 'message_purpose_invalid'],
    ['an unknown purpose', { purpose: 'chitchat' }, 'message_purpose_invalid'],
    ['no related task', { relatedTaskId: undefined }, 'related_task_required'],
    ['an unknown task', { relatedTaskId: 'nope' }, 'related_task_unknown'],
    ["another member's task", { relatedTaskId: 'theirs' }, 'related_task_not_current'],
    ['its own task that is not in progress', { relatedTaskId: 'later' }, 'related_task_not_current'],
  ];
  for (const [, extra, code] of refusals) await refusedWith(t, pool, teamId, code, () => postInboxMessage(pool, teamId, implementer, message(extra)));
  t.is(Number((await pool.query('SELECT count(*) AS n FROM team_inbox WHERE team_id = $1', [teamId])).rows[0].n), 0);
  for (const purpose of MEMBER_MESSAGE_PURPOSES) {
    const before = await revision(pool, teamId);
    await postInboxMessage(pool, teamId, implementer, message({ purpose }));
    t.is(await revision(pool, teamId), before + 1, purpose);
  }
  t.is((await readBoard(pool, teamId)).inboxUnread, MEMBER_MESSAGE_PURPOSES.length);
});

test('activations: the first is generation 1, the same activation again changes nothing, a new one bumps the generation', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  const first = await activateTeamRun(pool, teamId, 'run-a');
  t.is(first.result.generation, 1);
  const settled = await revision(pool, teamId);
  t.is((await activateTeamRun(pool, teamId, 'run-a')).result.generation, 1);
  t.is(await revision(pool, teamId), settled, 'a repeat commits no fact');
  await createTask(pool, teamId, coordinator, { taskId: 't1', title: 'implement', owner: 'implementer' });
  await startTask(pool, teamId, 't1', 'exec-1');
  await recordTaskOutput(pool, teamId, implementer, { taskId: 't1', outputId: 'o1', summary: 'done' });
  t.is((await activateTeamRun(pool, teamId, 'run-b')).result.generation, 2);
  const board = await readBoard(pool, teamId);
  t.is(board.generation, 2);
  t.deepEqual(
    board.outputs.map((o) => [o.outputId, o.generation]),
    [['o1', 1]],
  );
  // Only the system activates a team.
  await refusedWith(t, pool, teamId, 'tool_not_allowed', () =>
    __testing.commit(pool, teamId, coordinator, 'activate', async () => ({ result: 0, fact: { kind: 'activated' } })),
  );
});

test('a paused task starts again under a new execution: the fenced execution can no longer write its evidence or its failure', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  await activateTeamRun(pool, teamId, 'run-a');
  await createTask(pool, teamId, coordinator, { taskId: 'a', title: 'A', owner: 'implementer' });
  await startTask(pool, teamId, 'a', 'exec-1', 'implementer');
  // The pause fences exec-1: the task is pending again for the same owner, bound to no execution.
  const fenced = await fenceHandoff(pool, teamId, {
    eventId: 'pause-1',
    oldTaskId: 'a',
    kind: 'pause',
    reason: 'hold',
    sessionId: memberSessionId(teamId, 'implementer'),
    executionId: 'exec-1',
    namespace: 'default',
  });
  t.like(fenced.result, { oldTaskId: 'a', owner: 'implementer', receiptId: `pause-${teamId}-a-exec-1` });
  t.like((await readBoard(pool, teamId)).tasks[0], { status: 'pending', owner: 'implementer', executionId: undefined });
  // Resumed: a new execution of the same owner.
  const next: Actor = { kind: 'member', memberId: 'implementer', executionId: 'exec-3' };
  await startTask(pool, teamId, 'a', 'exec-3', 'implementer');
  await refusedWith(t, pool, teamId, 'task_not_in_progress', () =>
    recordTaskOutput(pool, teamId, implementer, { taskId: 'a', outputId: 'out-exec-1', summary: 'late' }),
  );
  await refusedWith(t, pool, teamId, 'task_not_in_progress', () => failTask(pool, teamId, implementer, 'a', 'late failure'));
  await recordTaskOutput(pool, teamId, next, { taskId: 'a', outputId: 'out-exec-3', summary: 'done' });
  t.like((await readBoard(pool, teamId)).tasks[0], { status: 'completed', outputId: 'out-exec-3' });

  // One fence per execution: the same task paused under two executions has two receipts.
  await createTask(pool, teamId, coordinator, { taskId: 'b', title: 'B', owner: 'reviewer' });
  const pauseB = (executionId: string, eventId: string) =>
    fenceHandoff(pool, teamId, {
      eventId,
      oldTaskId: 'b',
      kind: 'pause',
      reason: 'hold',
      sessionId: memberSessionId(teamId, 'reviewer'),
      executionId,
      namespace: 'default',
    });
  await startTask(pool, teamId, 'b', 'exec-4', 'reviewer');
  await pauseB('exec-4', 'pause-2');
  await startTask(pool, teamId, 'b', 'exec-5', 'reviewer');
  await pauseB('exec-5', 'pause-3');
  const receipts = (await pool.query(`SELECT execution_id FROM team_handoff_receipts WHERE team_id = $1 AND old_task_id = 'b' ORDER BY execution_id`, [teamId]))
    .rows;
  t.deepEqual(
    receipts.map((r) => r.execution_id),
    ['exec-4', 'exec-5'],
  );
});

test('a fence meets a dispatch: a task still pending for its execution is fenced and never starts; one being handed over is waited for', async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  await activateTeamRun(pool, teamId, 'run-a');
  const fence = (taskId: string, executionId: string, kind: 'pause' | 'archive', eventId: string) =>
    fenceHandoff(pool, teamId, {
      eventId,
      oldTaskId: taskId,
      kind,
      reason: 'hold',
      sessionId: memberSessionId(teamId, 'implementer'),
      executionId,
      namespace: 'default',
    });
  // Paused before exec-1 marked it in progress: fenced; exec-1's start is refused, a resume's exec-2 starts it.
  await createTask(pool, teamId, coordinator, { taskId: 'a', title: 'A', owner: 'implementer' });
  t.like((await fence('a', 'exec-1', 'pause', 'pause-1')).result, { oldTaskId: 'a', executionId: 'exec-1', owner: 'implementer' });
  await refusedWith(t, pool, teamId, 'task_not_startable', () => startTask(pool, teamId, 'a', 'exec-1', 'implementer', { handingOver: true }));
  t.like((await readBoard(pool, teamId)).tasks[0], { status: 'pending', executionId: undefined });
  await startTask(pool, teamId, 'a', 'exec-2', 'implementer');
  t.like((await readBoard(pool, teamId)).tasks[0], { status: 'in_progress', executionId: 'exec-2' });
  // A retry of exec-1's start, late, does not take the task over from exec-2.
  await refusedWith(t, pool, teamId, 'task_not_startable', () => startTask(pool, teamId, 'a', 'exec-1', 'implementer', { handingOver: true }));

  // Being handed over (marked in flight): the fence is a fault of timing (nothing written) until the dispatch ends.
  await createTask(pool, teamId, coordinator, { taskId: 'b', title: 'B', owner: 'implementer' });
  await startTask(pool, teamId, 'b', 'exec-3', 'implementer', { handingOver: true });
  const before = await revision(pool, teamId);
  await t.throwsAsync(fence('b', 'exec-3', 'archive', 'archive-1'), { instanceOf: DispatchInFlight });
  t.is(await revision(pool, teamId), before);
  t.is(Number((await pool.query(`SELECT count(*) AS n FROM team_handoff_receipts WHERE team_id = $1 AND old_task_id = 'b'`, [teamId])).rows[0].n), 0);
  // Another execution's end clears nothing; its own does.
  await dispatchEnded(pool, teamId, 'b', 'exec-9');
  await t.throwsAsync(fence('b', 'exec-3', 'archive', 'archive-1'), { instanceOf: DispatchInFlight });
  await dispatchEnded(pool, teamId, 'b', 'exec-3');
  t.like((await fence('b', 'exec-3', 'archive', 'archive-1')).result, { oldTaskId: 'b', executionId: 'exec-3' });
  t.like(
    (await readBoard(pool, teamId)).tasks.find((x) => x.taskId === 'b'),
    { status: 'cancelled' },
  );
  // A mark left by a dispatch that was lost long ago does not hold a fence for ever.
  await createTask(pool, teamId, coordinator, { taskId: 'c', title: 'C', owner: 'implementer' });
  await startTask(pool, teamId, 'c', 'exec-4', 'implementer', { handingOver: true });
  await pool.query(`UPDATE team_tasks SET dispatching_since = now() - interval '1 hour' WHERE team_id = $1 AND task_id = 'c'`, [teamId]);
  t.like((await fence('c', 'exec-4', 'archive', 'archive-1')).result, { oldTaskId: 'c' });
});

test("a yield's conditional release changes nothing once its handoff has settled (timed out); while it is driven, it releases", async (t) => {
  const pool = await testPool(t);
  const teamId = await team(pool);
  await activateTeamRun(pool, teamId, 'run-a');
  const fence = async (taskId: string, executionId: string) => {
    await createTask(pool, teamId, coordinator, { taskId, title: taskId, owner: 'implementer' });
    await startTask(pool, teamId, taskId, executionId, 'implementer');
    const { result } = await fenceHandoff(pool, teamId, {
      eventId: `reassign-${taskId}`,
      oldTaskId: taskId,
      kind: 'reassign',
      reason: 'move it',
      sessionId: memberSessionId(teamId, 'implementer'),
      executionId,
      namespace: 'default',
      replacement: { taskId: `${taskId}-r`, owner: 'reviewer' },
    });
    return result.receiptId;
  };
  const whileDriven = ['requested', 'yielding'] as const;
  // Timed out first: the late release is no move at all (no fact, no revision), the receipt stays timeout.
  const late = await fence('a', 'exec-1');
  await moveReceipt(pool, teamId, late, 'timeout');
  const before = await revision(pool, teamId);
  const answered = await moveReceipt(pool, teamId, late, 'released', { onlyFrom: whileDriven });
  t.is(answered.result.state, 'timeout');
  t.is(answered.change, undefined);
  t.is(await revision(pool, teamId), before);
  // Still being driven: the same conditional release moves it.
  const driven = await fence('b', 'exec-2');
  await moveReceipt(pool, teamId, driven, 'yielding', { onlyFrom: whileDriven });
  t.is((await moveReceipt(pool, teamId, driven, 'released', { onlyFrom: whileDriven })).result.state, 'released');
  // The user's release of the timed-out one (unconditional, with its resolution) still moves it.
  t.is((await moveReceipt(pool, teamId, late, 'released', { resolution: { action: 'release' } })).result.state, 'released');
});
