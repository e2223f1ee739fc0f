import { join } from 'node:path';
import test from 'ava';
import { readBoard } from '../../activities/store/team';
import { memberSessionId } from '../../contract/member-session';
import { calls } from '../helpers/fleet-model';
import type { Reply } from '../helpers/model-stub';
import { keepHistory } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';
import { stamps, stickRuntime, twoMemberTeam, untilTeam, writerLog, writerTeamModel } from '../helpers/team';

/**
 * Cancel/reassign handoff (invariant 14) against real sessions, bash processes and Postgres. The implementer's
 * execution runs a long writer (a timestamp per line into its worktree); the task is reassigned to the reviewer
 * while it writes. The fence commits first, the old execution is stopped, and the replacement starts only once
 * the old runtime is quiescent: the files' timestamps prove the writers never overlapped.
 */
const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const afterTool = (body: any) => body.messages.at(-1).role === 'tool';
const model = writerTeamModel;

async function team(t: import('ava').ExecutionContext, handoff?: { sloMs: number; timeoutMs: number }, play: (body: any) => Reply = model) {
  const { orchard, teamId, start } = await twoMemberTeam(t, { model: play, handoff });
  await start();
  // The implementer is writing.
  const implementerSession = memberSessionId(teamId, 'implementer');
  const oldLog = await writerLog(orchard, teamId);
  return { orchard, teamId, oldLog, implementerSession };
}

const until = untilTeam;

test('a reassign while the old execution writes: fence, yield, release, then the replacement; the writers never overlap', async (t) => {
  // Generous bounds: this test is about order, not speed (a loaded machine must not turn it into a timeout).
  const { orchard, teamId, oldLog, implementerSession } = await team(t, { sloMs: 30_000, timeoutMs: 60_000 });
  const receipt = await orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'the reviewer knows this code' });
  t.like(receipt, { oldTaskId: 'implement', newTaskId: 'implement-r1', oldOwner: 'implementer', newOwner: 'reviewer', state: 'requested' });
  // The fence committed before the answer: the old task is frozen and the replacement exists, pending.
  const fenced = await readBoard(orchard.pool, teamId);
  t.like(
    fenced.tasks.find((task) => task.taskId === 'implement'),
    { status: 'cancelled', cancel: { by: 'user', kind: 'reassign' } },
  );
  t.like(
    fenced.tasks.find((task) => task.taskId === 'implement-r1'),
    { replacesTaskId: 'implement', owner: 'reviewer' },
  );

  const done = await until(orchard, teamId, 'the replacement completed', (v) =>
    v.executions.some((e) => e.taskId === 'implement-r1' && e.state === 'completed'),
  );
  const r = done.receipts[0];
  t.deepEqual(r.trail, ['requested', 'yielding', 'released']);
  t.false(r.sloMissed);
  t.deepEqual(done.waiting, []);
  t.is((await orchard.temporal.workflow.getHandle(`session/${implementerSession}`).describe()).status.name !== 'RUNNING', true);
  // The writers never overlapped: the old writer's last line is older than the new writer's first.
  const newSession = await orchard.client.status(memberSessionId(teamId, 'reviewer'));
  const oldStamps = stamps(oldLog);
  const newStamps = stamps(join(newSession.worktree!, 'new.log'));
  t.true(oldStamps.length < 400, 'the old writer was stopped');
  t.true(oldStamps.at(-1)! < newStamps[0], `old ended ${oldStamps.at(-1)}, new began ${newStamps[0]}`);
  // And the old writer stays stopped.
  const count = oldStamps.length;
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.is(stamps(oldLog).length, count);
  const board = await readBoard(orchard.pool, teamId);
  t.like(
    board.tasks.find((task) => task.taskId === 'implement-r1'),
    { status: 'completed' },
  );
  t.deepEqual(board.handoffs, [{ oldTaskId: 'implement', newTaskId: 'implement-r1', state: 'released' }]);
  // The yield moved the receipt itself (yielding as it asked, released once it proved the old runtime quiescent): the
  // run scheduled no move of its own, and the store's facts keep their order.
  const history = (await orchard.temporal.workflow.getHandle(`team/${teamId}`).fetchHistory()).events ?? [];
  t.false(history.some((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'moveReceipt'));
  const facts = await orchard.pool.query<{ kind: string }>(`SELECT kind FROM team_facts WHERE team_id = $1 AND kind LIKE 'handoff%' ORDER BY revision`, [
    teamId,
  ]);
  t.deepEqual(
    facts.rows.map((f) => f.kind),
    ['handoff_requested', 'handoff_yielding', 'handoff_released'],
  );
  await keepHistory(orchard, `team/${teamId}`, 'team-reassign-released');
});

test('a handoff past its timeout is durable timeout, its replacement blocked until the user releases it with proof', async (t) => {
  const { orchard, teamId, implementerSession } = await team(t, { sloMs: 1, timeoutMs: 2 });
  // The old runtime cannot be proven quiescent before the timeout (a fast yield would otherwise win the race).
  const stuck = await stickRuntime(orchard, implementerSession);
  await orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'move it' });
  const timedOut = await until(orchard, teamId, 'the timeout', (v) => v.receipts[0]?.state === 'timeout');
  t.deepEqual(timedOut.receipts[0].trail, ['requested', 'yielding', 'timeout']);
  t.true(timedOut.receipts[0].sloMissed);
  t.deepEqual(timedOut.waiting, [{ taskId: 'implement-r1', waiting: 'waiting_for_previous_execution', receiptId: timedOut.receipts[0].receiptId }]);
  t.false(
    timedOut.executions.some((e) => e.taskId === 'implement-r1'),
    'the replacement did not start',
  );
  const row = (await orchard.pool.query('SELECT state, slo_missed FROM team_handoff_receipts WHERE team_id = $1', [teamId])).rows[0];
  t.deepEqual(row, { state: 'timeout', slo_missed: true });
  // The miss is visible to operators: the team run's search attribute.
  const described = await orchard.temporal.workflow.getHandle(`team/${teamId}`).describe();
  t.is(described.searchAttributes.OrchardHandoffSloMissed?.[0], true);
  // Release needs proof the old runtime is quiescent: refused while a group of it is not verified gone, and
  // nothing moves; once the group is gone and its session has closed, the proof holds.
  const refused = await t.throwsAsync(orchard.client.resolveHandoff(teamId, { receiptId: timedOut.receipts[0].receiptId, action: 'release' }));
  t.is((refused as any).code, 'old_runtime_not_quiescent');
  t.is((await orchard.client.teamStatus(teamId)).receipts[0].state, 'timeout');
  await stuck.unstick();
  const released = await waitFor(
    () =>
      orchard.client
        .resolveHandoff(teamId, { receiptId: timedOut.receipts[0].receiptId, action: 'release' })
        .catch((err) => (err.code === 'old_runtime_not_quiescent' ? undefined : Promise.reject(err))),
    60_000,
    'a release with proof',
  );
  t.is(released.state, 'released');
  t.is(released.resolution, 'release');
  await until(orchard, teamId, 'the replacement completed', (v) => v.executions.some((e) => e.taskId === 'implement-r1' && e.state === 'completed'));
  // A released receipt has nothing left to resolve.
  const err = await t.throwsAsync(orchard.client.resolveHandoff(teamId, { receiptId: released.receiptId, action: 'keep_stopped' }));
  t.is((err as any).code, 'handoff_not_blocked');
  await keepHistory(orchard, `team/${teamId}`, 'team-handoff-timeout-released');
});

test('keep_stopped cancels only the replacement; the rest of the team runs on', async (t) => {
  const { orchard, teamId, implementerSession } = await team(t, { sloMs: 1, timeoutMs: 2 });
  await stickRuntime(orchard, implementerSession);
  await orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'move it' });
  const timedOut = await until(orchard, teamId, 'the timeout', (v) => v.receipts[0]?.state === 'timeout');
  const kept = await orchard.client.resolveHandoff(teamId, {
    receiptId: timedOut.receipts[0].receiptId,
    action: 'keep_stopped',
    reason: 'not needed after all',
  });
  t.is(kept.resolution, 'keep_stopped');
  const board = await readBoard(orchard.pool, teamId);
  t.like(
    board.tasks.find((task) => task.taskId === 'implement-r1'),
    { status: 'cancelled', cancel: { by: 'user', kind: 'keep_stopped' } },
  );
  const view = await orchard.client.teamStatus(teamId);
  t.deepEqual(view.waiting, []);
  t.is((await orchard.temporal.workflow.getHandle(`team/${teamId}`).describe()).status.name, 'RUNNING');
  // Bad reassigns are refused before anything is written.
  for (const [input, code] of [
    [{ taskId: 'nope', newOwner: 'reviewer', reason: 'x' }, 'task_not_found'],
    [{ taskId: 'implement-r1', newOwner: 'implementer', reason: 'x' }, 'task_not_in_progress'],
    [{ taskId: 'implement', newOwner: 'nobody', reason: 'x' }, 'member_not_found'],
    [{ taskId: 'implement', newOwner: 'reviewer', reason: '' }, 'invalid_input'],
  ] as const) {
    const err = await t.throwsAsync(orchard.client.reassignTask(teamId, input));
    t.is((err as any).code, code);
  }
});

test('the real 5 s SLO and 10 s timeout: an old runtime that cannot be proven quiescent misses the SLO, then the receipt is durable timeout', async (t) => {
  const { orchard, teamId, implementerSession } = await team(t);
  // A process group of the old execution that could not be verified gone (as the reaper leaves one it cannot
  // kill): the old runtime is not quiescent whatever happens to the session.
  await stickRuntime(orchard, implementerSession);
  const started = Date.now();
  await orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'move it' });
  const missed = await until(orchard, teamId, 'the SLO miss', (v) => v.receipts[0]?.sloMissed === true);
  t.true(Date.now() - started >= 5_000, `the SLO miss came after ${Date.now() - started} ms`);
  t.is(missed.receipts[0].state, 'yielding');
  await until(orchard, teamId, 'the timeout', (v) => v.receipts[0]?.state === 'timeout');
  t.true(Date.now() - started >= 10_000, `the timeout came after ${Date.now() - started} ms`);
  // Release is refused while the proof fails.
  const err = await t.throwsAsync(orchard.client.resolveHandoff(teamId, { receiptId: missed.receipts[0].receiptId, action: 'release' }));
  t.is((err as any).code, 'old_runtime_not_quiescent');
  t.false((await orchard.client.teamStatus(teamId)).executions.some((e) => e.taskId === 'implement-r1'));
});

test('a worker restart mid-handoff resumes the same receipt and repeats no side effect; a second reassign of the task is refused', async (t) => {
  const { orchard, teamId, implementerSession } = await team(t, { sloMs: 60_000, timeoutMs: 120_000 });
  // Hold the handoff in `yielding`: one of the old execution's groups is not verified gone yet.
  const stuck = await stickRuntime(orchard, implementerSession);
  const receipt = await orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'move it' });
  await until(orchard, teamId, 'yielding', (v) => v.receipts[0]?.state === 'yielding');
  const again = await t.throwsAsync(orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'twice' }));
  t.is((again as any).code, 'task_not_in_progress');
  await orchard.restartWorkers();
  // The group is verified gone now; the resumed yield sees it.
  await stuck.unstick();
  const done = await until(orchard, teamId, 'released and replaced', (v) => v.executions.some((e) => e.taskId === 'implement-r1' && e.state === 'completed'));
  t.is(done.receipts.length, 1);
  t.is(done.receipts[0].receiptId, receipt.receiptId);
  t.deepEqual(done.receipts[0].trail, ['requested', 'yielding', 'released']);
  const count = async (sql: string) => Number((await orchard.pool.query(sql, [teamId])).rows[0].n);
  t.is(await count(`SELECT count(*) AS n FROM team_handoff_receipts WHERE team_id = $1`), 1);
  t.is(await count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'handoff_requested'`), 1);
  t.is(await count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'handoff_released'`), 1);
  t.is(await count(`SELECT count(*) AS n FROM team_user_events WHERE team_id = $1`), 1);
  t.is(await count(`SELECT count(*) AS n FROM team_tasks WHERE team_id = $1 AND replaces_task_id = 'implement'`), 1);
  t.is(await count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'task_started' AND task_id = 'implement-r1'`), 1);
});

test('a member whose execution was fenced gets no new task until its old execution is released (one writer per worktree)', async (t) => {
  // The implementer owns two tasks; the second is quick.
  const play = (body: any): Reply => {
    if (isCoordinator(body) && body.messages.at(-1).role === 'user' && String(body.messages.at(-1).content).startsWith('Build')) {
      return calls(
        ['task_create', { taskId: 'implement', title: 'Implement', description: 'write the evaluator', owner: 'implementer' }],
        ['task_create', { taskId: 'second', title: 'Second', description: 'a quick one', owner: 'implementer' }],
        ['plan_approve', {}],
      );
    }
    if (!isCoordinator(body) && !afterTool(body) && /Task second/.test(String(body.messages.at(-1).content)))
      return calls(['bash', { command: 'date +%s%N >> second.log' }]);
    return model(body);
  };
  const { orchard, teamId, implementerSession, oldLog } = await team(t, { sloMs: 60_000, timeoutMs: 120_000 }, play);
  // Hold the release: one of the old execution's process groups is not verified gone.
  const stuck = await stickRuntime(orchard, implementerSession);
  await orchard.client.reassignTask(teamId, { taskId: 'implement', newOwner: 'reviewer', reason: 'move it' });
  await until(orchard, teamId, 'the old session closed', (v) => v.receipts[0]?.state === 'yielding');
  await waitFor(
    async () => ((await orchard.temporal.workflow.getHandle(`session/${implementerSession}`).describe()).status.name !== 'RUNNING' ? true : undefined),
    60_000,
    'the old session closed',
  );
  // The implementer is free of executions, but its worktree is not proven quiet: nothing new starts there.
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  const held = await orchard.client.teamStatus(teamId);
  t.deepEqual(
    held.receipts.map((r) => r.state),
    ['yielding'],
  );
  t.false(
    held.executions.some((e) => e.taskId === 'second'),
    'the second task did not start',
  );
  t.like(
    (await readBoard(orchard.pool, teamId)).tasks.find((task) => task.taskId === 'second'),
    { status: 'pending' },
  );

  await stuck.unstick();
  const done = await until(orchard, teamId, 'the second task completed', (v) => v.executions.some((e) => e.taskId === 'second' && e.state === 'completed'));
  t.is(done.receipts[0].state, 'released');
  // The implementer's new run worked in the same worktree, after the old writer had stopped.
  const secondStamp = stamps(join((await orchard.client.status(implementerSession)).worktree!, 'second.log'))[0];
  t.true(stamps(oldLog).at(-1)! < secondStamp);
});
