import { readFileSync } from 'node:fs';
import test, { type ExecutionContext } from 'ava';
import { OrchardError } from '../../client/client';
import { readBoard, startTask } from '../../activities/store/team';
import { teamWorkflowId } from '../../contract/messages';
import { memberSessionId } from '../../contract/member-session';
import { activityTypes, holdRunRow, startScriptedTeam, type Call, type TeamHarness } from '../helpers/team';
import { keepHistory } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';
import { gate } from '../helpers/fleet-model';

/**
 * Handoff races (invariant 14) against a real `teamRun`, sessions, bash and Postgres. Two writers are made to
 * arrive together by holding the team's run row (the lock every board write takes first) while both queue up
 * behind it; releasing it lets them through in arrival order, so each order is forced, not hoped for. Asserted:
 * what the user's update answered, the rows in Postgres and the workflow's status.
 */
const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const APPROVE: Call = ['plan_approve', {}];

type Settled<T> = { ok: true; value: T } | { ok: false; code: string; message: string };
const settle = <T>(p: Promise<T>): Promise<Settled<T>> =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (err: any) => ({ ok: false as const, code: String(err?.code ?? err?.type ?? 'untyped'), message: String(err?.message) }),
  );

const rows = async (h: TeamHarness, sql: string) => (await h.orchard.pool.query(sql, [h.teamId])).rows;
const facts = (h: TeamHarness, kind: string) => h.count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = $2`, [h.teamId, kind]);
const describe = (h: TeamHarness) => h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).describe();

/**
 * The member's completion and the user's cancel/reassign of the same running task reach the store together.
 * Exactly one wins: the evidence, and the user's update refused with a typed code; or the fence, and the late
 * end settled as handed off (no evidence). Never both.
 */
const completionVersusUser = test.macro({
  async exec(t: ExecutionContext, kind: 'cancel' | 'reassign', first: 'completion' | 'fence') {
    const h = await startScriptedTeam(t, {
      plan: [create('a', 'implementer'), APPROVE],
      work: { a: 'gate' },
      handoff: { sloMs: 30_000, timeoutMs: 60_000 },
    });
    // The member has done the work; its final answer is held.
    const held = h.gate('a');
    await held.arrived;
    const before = await readBoard(h.orchard.pool, h.teamId);
    const user = () =>
      settle<unknown>(
        kind === 'cancel'
          ? h.orchard.client.cancelTask(h.teamId, { taskId: 'a', reason: 'stop it' })
          : h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' }),
      );
    const lock = await holdRunRow(t, h.teamId);
    let answer: Promise<Settled<unknown>>;
    if (first === 'completion') {
      held.open();
      await lock.queued(1); // the evidence write
      answer = user();
      await lock.queued(2); // the fence, behind it
    } else {
      answer = user();
      await lock.queued(1); // the fence
      held.open();
      await lock.queued(2); // the evidence write, behind it
    }
    // Both were in flight at once: the workflow still saw the execution running when the user's update came in.
    t.like(
      (await h.status()).executions.find((e) => e.taskId === 'a'),
      { state: 'running' },
    );
    await lock.release();
    const result = await answer;

    const outputs = await rows(h, `SELECT task_id, execution_id FROM team_task_outputs WHERE team_id = $1`);
    const receipts = await rows(h, `SELECT old_task_id, new_task_id, state FROM team_handoff_receipts WHERE team_id = $1`);
    if (first === 'completion') {
      t.false(result.ok, 'the fence lost');
      t.is((result as { code: string }).code, 'task_not_in_progress', (result as { message: string }).message);
      const view = await h.until('a completed', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'completed'));
      t.deepEqual(
        outputs.map((o) => o.task_id),
        ['a'],
      );
      t.is(outputs[0].execution_id, view.executions.find((e) => e.taskId === 'a')!.executionId);
      t.deepEqual(receipts, [], 'no receipt');
      t.is(await h.count(`SELECT count(*) AS n FROM team_user_events WHERE team_id = $1`), 0, 'no user event');
      t.is(await h.count(`SELECT count(*) AS n FROM team_tasks WHERE team_id = $1`), 1, 'no replacement');
      t.like((await readBoard(h.orchard.pool, h.teamId)).tasks[0], { taskId: 'a', status: 'completed' });
      t.is((await readBoard(h.orchard.pool, h.teamId)).workRevision, before.workRevision + 1, 'one fact: the evidence');
      t.deepEqual(view.receipts, []);
      t.deepEqual(view.waiting, []);
      return;
    }
    t.true(result.ok, `the fence won: ${JSON.stringify(result)}`);
    const receipt: any = kind === 'cancel' ? (result as any).value.receipt : (result as any).value;
    t.like(receipt, { kind, oldTaskId: 'a', state: 'requested' });
    const view = await h.until(
      'released',
      (v) => v.receipts[0]?.state === 'released' && (kind === 'cancel' || v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed')),
    );
    // The late end was no evidence.
    t.not(view.executions.find((e) => e.taskId === 'a')!.state, 'completed');
    t.is(await h.count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'task_output' AND task_id = 'a'`), 0, 'no evidence fact for a');
    t.false(
      (await rows(h, `SELECT task_id FROM team_task_outputs WHERE team_id = $1`)).some((o) => o.task_id === 'a'),
      'no output row for a',
    );
    const board = await readBoard(h.orchard.pool, h.teamId);
    t.like(
      board.tasks.find((x) => x.taskId === 'a'),
      { status: 'cancelled', cancel: { by: 'user', kind } },
    );
    t.deepEqual(board.handoffs, [{ oldTaskId: 'a', ...(kind === 'reassign' ? { newTaskId: 'a-r1' } : {}), state: 'released' }]);
    t.is(await facts(h, 'handoff_requested'), 1);
    if (kind === 'reassign') {
      const replacement = view.executions.find((e) => e.taskId === 'a-r1')!;
      t.is(replacement.memberId, 'reviewer');
      t.deepEqual(
        (await rows(h, `SELECT task_id, execution_id FROM team_task_outputs WHERE team_id = $1`)).map((o) => [o.task_id, o.execution_id]),
        [['a-r1', replacement.executionId]],
      );
    }
    // A handoff released well within its SLO: no miss, and no search attribute saying so.
    t.false(view.receipts[0].sloMissed);
    t.is((await describe(h)).searchAttributes.OrchardHandoffSloMissed, undefined);
  },
  title: (_ = '', kind, first) => `${kind} vs complete, ${first === 'completion' ? "the member's completion" : "the user's fence"} first: exactly one wins`,
});

test.serial(completionVersusUser, 'cancel', 'completion');
test.serial(completionVersusUser, 'cancel', 'fence');
test.serial(completionVersusUser, 'reassign', 'completion');
test.serial(completionVersusUser, 'reassign', 'fence');

test.serial('reassign vs reassign: two concurrent reassigns of one task — one receipt, the other refused typed', async (t) => {
  const h = await startScriptedTeam(t, {
    members: ['implementer', 'reviewer', 'tester'],
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 30_000, timeoutMs: 60_000 },
  });
  await h.writing('a', 'implementer');
  const lock = await holdRunRow(t, h.teamId);
  const toReviewer = settle(h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'the reviewer knows it' }));
  await lock.queued(1);
  const toTester = settle(h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'tester', reason: 'the tester knows it' }));
  await lock.queued(2);
  await lock.release();
  const [won, lost] = await Promise.all([toReviewer, toTester]);
  t.true(won.ok, JSON.stringify(won));
  t.like((won as any).value, { oldTaskId: 'a', newTaskId: 'a-r1', newOwner: 'reviewer' });
  t.false(lost.ok, `the second reassign was answered as if it had happened: ${JSON.stringify(lost)}`);
  t.is((lost as { code: string }).code, 'task_not_in_progress');

  const view = await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
  t.is(view.receipts.length, 1);
  t.like(view.receipts[0], { newTaskId: 'a-r1', newOwner: 'reviewer', state: 'released' });
  t.false(
    view.executions.some((e) => e.memberId === 'tester'),
    'the loser never ran',
  );
  t.deepEqual(await rows(h, `SELECT old_task_id, new_task_id, reason->>'newOwner' AS owner FROM team_handoff_receipts WHERE team_id = $1`), [
    { old_task_id: 'a', new_task_id: 'a-r1', owner: 'reviewer' },
  ]);
  t.deepEqual(await rows(h, `SELECT task_id, owner FROM team_tasks WHERE team_id = $1 AND replaces_task_id IS NOT NULL`), [
    { task_id: 'a-r1', owner: 'reviewer' },
  ]);
  t.is(await h.count(`SELECT count(*) AS n FROM team_user_events WHERE team_id = $1`), 1);
  t.is(await facts(h, 'handoff_requested'), 1);
});

test.serial(
  'stale release callback: the old execution becomes quiescent only after its receipt timed out — the yield ended with its handoff, nothing is released; the user’s release does',
  async (t) => {
    const h = await startScriptedTeam(t, {
      plan: [create('a', 'implementer'), APPROVE],
      work: { a: 'write' },
      handoff: { sloMs: 300, timeoutMs: 1_500 },
    });
    await h.writing('a', 'implementer');
    const stuck = await h.stick('implementer');
    const receipt = await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
    await h.until('the timeout', (v) => v.receipts[0]?.state === 'timeout');

    // The yield ended with its handoff (it never outlives it): its activity was cancelled when the receipt settled.
    await waitFor(
      async () => {
        const history = await h.history();
        const types = activityTypes(history);
        const closed = (e: any) => e.activityTaskCanceledEventAttributes ?? e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes;
        const at = history.findIndex((e) => closed(e) && types.get(String(closed(e).scheduledEventId)) === 'yieldExecution');
        return at >= 0 && history.slice(at).some((e) => e.workflowTaskCompletedEventAttributes) ? true : undefined;
      },
      90_000,
      'the yield ended',
    );
    const history = await h.history();
    t.true(
      history.some((e) => e.activityTaskCancelRequestedEventAttributes),
      'the yield was cancelled when its handoff settled',
    );
    // Now the old runtime becomes quiescent: too late, and nobody is listening for it.
    await stuck.unstick();

    const view = await h.status();
    t.like(view.receipts[0], { state: 'timeout', resolution: undefined });
    t.deepEqual(view.receipts[0].trail, ['requested', 'yielding', 'timeout']);
    t.deepEqual(view.waiting, [{ taskId: 'a-r1', waiting: 'waiting_for_previous_execution', receiptId: receipt.receiptId }]);
    t.false(
      view.executions.some((e) => e.taskId === 'a-r1'),
      'the replacement did not start',
    );
    t.deepEqual(await rows(h, `SELECT state, resolution FROM team_handoff_receipts WHERE team_id = $1`), [{ state: 'timeout', resolution: null }]);
    t.is(await facts(h, 'handoff_released'), 0);
    t.like(
      (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a-r1'),
      { status: 'pending' },
    );

    // Only the user's resolution moves it.
    const released = await h.orchard.client.resolveHandoff(h.teamId, { receiptId: receipt.receiptId, action: 'release', reason: 'checked' });
    t.like(released, { state: 'released', resolution: 'release' });
    await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
    t.is(await facts(h, 'handoff_released'), 1);
  },
);

/**
 * a (implementer) writes and its runtime cannot be proven stopped; b (reviewer) finishes. `handOff` cancels or
 * reassigns a; returns once its receipt is durable `timeout` and b is done.
 */
async function timedOut(t: ExecutionContext, handOff: (h: TeamHarness) => Promise<{ receiptId: string }>) {
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), create('b', 'reviewer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 300, timeoutMs: 1_500 },
  });
  await h.writing('a', 'implementer');
  const stuck = await h.stick('implementer');
  const receipt = await handOff(h);
  await h.until('the timeout, b done', (v) => v.receipts[0]?.state === 'timeout' && v.executions.some((e) => e.taskId === 'b' && e.state === 'completed'));
  return { h, stuck, receipt };
}

test.serial(
  'timeout then resolve: release is refused while the old runtime is not quiescent and changes nothing; once it is, the release is accepted',
  async (t) => {
    const { h, stuck, receipt } = await timedOut(t, (h) => h.orchard.client.cancelTask(h.teamId, { taskId: 'a', reason: 'scope cut' }).then((r) => r.receipt!));
    const receiptId = receipt.receiptId;

    // The cancelled session closes in its own time (on a loaded machine after the timeout): then only the process
    // group it could not stop is left to block the release, which is what this pins.
    const session = memberSessionId(h.teamId, 'implementer');
    await waitFor(async () => ((await h.orchard.client.sessionLiveness(session)).liveness === 'dead' ? true : undefined), 60_000, 'the old session closed');
    const revision = (await readBoard(h.orchard.pool, h.teamId)).workRevision;
    const refused = await t.throwsAsync(h.orchard.client.resolveHandoff(h.teamId, { receiptId, action: 'release' }));
    t.is((refused as any).code, 'old_runtime_not_quiescent');
    t.regex(refused!.message, /process group/);
    t.deepEqual(await rows(h, `SELECT state, resolution FROM team_handoff_receipts WHERE team_id = $1`), [{ state: 'timeout', resolution: null }]);
    t.is((await readBoard(h.orchard.pool, h.teamId)).workRevision, revision, 'nothing committed');
    t.like((await h.status()).receipts[0], { state: 'timeout', resolution: undefined });
    // Not delivered while the cancelled work is not proven stopped.
    const [pending] = await h.script([['org_run_complete', { summary: 'done?' }]]);
    t.regex(pending, /^error \(completion_refused\): .*handoff_pending \(a\)/);

    await stuck.unstick();
    // Release-if-current: with the old execution's lease put back at the generation it held when fenced (as if the
    // fence had not moved it), the release is refused for the lease alone, however quiet the runtime is.
    const [{ lease }] = await rows(h, `SELECT lease FROM team_handoff_receipts WHERE team_id = $1`);
    await h.orchard.pool.query(`UPDATE worktree_leases SET generation = $2 WHERE worktree = $1`, [lease.worktree, lease.generation]);
    const leaseRefusal = await waitFor(
      () =>
        h.orchard.client.resolveHandoff(h.teamId, { receiptId, action: 'release' }).then(
          () => Promise.reject(new Error('released while the old lease was current')),
          (err) => (err.code === 'old_runtime_not_quiescent' && /lease/.test(err.message) ? err : undefined),
        ),
      60_000,
      'a refusal for the lease alone',
    );
    t.regex(leaseRefusal.message, new RegExp(`still held at generation ${lease.generation}`));
    await h.orchard.pool.query(`UPDATE worktree_leases SET generation = $2 WHERE worktree = $1`, [lease.worktree, lease.generation + 1]);
    const released = await waitFor(
      () =>
        h.orchard.client
          .resolveHandoff(h.teamId, { receiptId, action: 'release', reason: 'verified' })
          .catch((err) => (err.code === 'old_runtime_not_quiescent' ? undefined : Promise.reject(err))),
      60_000,
      'a release with proof',
    );
    t.like(released, { state: 'released', resolution: 'release' });
    t.like((await rows(h, `SELECT state, resolution FROM team_handoff_receipts WHERE team_id = $1`))[0], {
      state: 'released',
      resolution: { action: 'release', reason: 'verified' },
    });
    const again = await t.throwsAsync(h.orchard.client.resolveHandoff(h.teamId, { receiptId, action: 'keep_stopped' }));
    t.is((again as any).code, 'handoff_not_blocked');
    // With the cancel's execution proven stopped, the run closes: a removed by the user, b completed.
    const [delivered] = await h.script([['org_run_complete', { summary: 'b is done, a was cut' }]]);
    t.regex(delivered, /^delivered: certificate /);
    t.is((await h.certificates()).length, 1);
  },
);

test.serial(
  'a replacement waits for its release: assigning or re-creating it while its handoff is timed out starts nothing; released, it starts with its owner on the board',
  async (t) => {
    const h = await startScriptedTeam(t, {
      members: ['implementer', 'reviewer', 'tester'],
      plan: [create('a', 'implementer'), APPROVE],
      work: { a: 'write' },
      handoff: { sloMs: 300, timeoutMs: 1_500 },
    });
    await h.writing('a', 'implementer');
    const stuck = await h.stick('implementer');
    const { receiptId } = await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
    await h.until('the timeout', (v) => v.receipts[0]?.state === 'timeout');

    // The Coordinator moves the blocked replacement to the tester, then creates it again: both are answered, neither
    // starts it (dispatch runs at the end of each turn).
    const [assignedTo] = await h.script([['task_assign', { taskId: 'a-r1', owner: 'tester' }]]);
    t.regex(assignedTo, /task a-r1 assigned to tester/);
    await h.script([['task_create', { taskId: 'a-r1', title: 'Do a', description: 'again', owner: 'tester' }]]);
    const started = () => facts(h, 'task_started');
    t.is(await started(), 1, 'only a started');
    t.like(
      (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a-r1'),
      { status: 'pending', owner: 'tester' },
    );
    t.false((await h.status()).executions.some((e) => e.taskId === 'a-r1'));
    // The store refuses to start it too, whoever asks, and changes nothing.
    const revision = (await readBoard(h.orchard.pool, h.teamId)).workRevision;
    const blocked = await t.throwsAsync(startTask(h.orchard.pool, h.teamId, 'a-r1', 'exec-early', 'tester'));
    t.is((blocked as any).code, 'replacement_blocked');
    const stale = await t.throwsAsync(startTask(h.orchard.pool, h.teamId, 'a-r1', 'exec-early', 'reviewer'));
    t.is((stale as any).code, 'task_not_startable');
    t.is((await readBoard(h.orchard.pool, h.teamId)).workRevision, revision);

    await stuck.unstick();
    await waitFor(
      () =>
        h.orchard.client
          .resolveHandoff(h.teamId, { receiptId, action: 'release' })
          .catch((err) => (err.code === 'old_runtime_not_quiescent' ? undefined : Promise.reject(err))),
      60_000,
      'a release with proof',
    );
    const done = await h.until('a-r1 done by the tester', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
    t.deepEqual(
      done.executions.filter((e) => e.taskId === 'a-r1').map((e) => e.memberId),
      ['tester'],
    );
    t.like(
      (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a-r1'),
      { status: 'completed', owner: 'tester' },
    );
    t.is(await started(), 2);
    await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-replacement-waits');
  },
);

test.serial(
  'keep_stopped settles a timed-out reassign: the rest of the team delivers; a later release with proof frees the old owner, the replacement stays cancelled',
  async (t) => {
    const { h, stuck, receipt } = await timedOut(t, (h) => h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' }));
    const [blocked] = await h.script([['org_run_complete', { summary: 'done?' }]]);
    t.regex(blocked, /^error \(completion_refused\): .*handoff_pending/);

    const kept = await h.orchard.client.resolveHandoff(h.teamId, { receiptId: receipt.receiptId, action: 'keep_stopped', reason: 'b is enough' });
    t.like(kept, { state: 'timeout', resolution: 'keep_stopped' });
    t.like((await rows(h, `SELECT state, resolution FROM team_handoff_receipts WHERE team_id = $1`))[0], {
      state: 'timeout',
      resolution: { action: 'keep_stopped' },
    });
    // The user settled it: the board is closed, and the workflow knows it without a Coordinator read.
    const ready = await h.until('the candidate ready', (v) => v.candidate === 'ready');
    t.deepEqual(ready.waiting, []);

    // The old owner's runtime was never proven stopped: a new task of its own does not start (dispatch runs at the
    // end of the turn that created it)…
    await h.script([create('c', 'implementer')]);
    t.false(
      (await h.status()).executions.some((e) => e.taskId === 'c'),
      'c waits while the implementer may still run',
    );
    // …until the user releases the receipt with proof; the replacement the user kept stopped never starts.
    const refused = await t.throwsAsync(h.orchard.client.resolveHandoff(h.teamId, { receiptId: receipt.receiptId, action: 'release' }));
    t.is((refused as any).code, 'old_runtime_not_quiescent');
    const again = await t.throwsAsync(h.orchard.client.resolveHandoff(h.teamId, { receiptId: receipt.receiptId, action: 'keep_stopped' }));
    t.is((again as any).code, 'handoff_not_blocked');
    await stuck.unstick();
    const released = await waitFor(
      () =>
        h.orchard.client
          .resolveHandoff(h.teamId, { receiptId: receipt.receiptId, action: 'release', reason: 'verified' })
          .catch((err) => (err.code === 'old_runtime_not_quiescent' ? undefined : Promise.reject(err))),
      60_000,
      'a release with proof',
    );
    t.like(released, { state: 'released', resolution: 'release' });
    const done = await h.until('c completed', (v) => v.executions.some((e) => e.taskId === 'c' && e.state === 'completed'));
    t.false(
      done.executions.some((e) => e.taskId === 'a-r1'),
      'the kept-stopped replacement never started',
    );
    t.like(
      (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a-r1'),
      { status: 'cancelled', cancel: { kind: 'keep_stopped' } },
    );

    // The rest of the team delivers: a replaced by its kept-stopped replacement, which the user removed from scope.
    await h.until('the candidate ready again', (v) => v.candidate === 'ready');
    const [delivered] = await h.script([['org_run_complete', { summary: 'b and c delivered; a kept stopped' }]]);
    t.regex(delivered, /^delivered: certificate /);
    const board = await readBoard(h.orchard.pool, h.teamId);
    const keptEvent = board.tasks.find((x) => x.taskId === 'a-r1')!.cancel!.userEventId;
    t.deepEqual((await h.certificates())[0].certificate.resolutions, [
      { taskId: 'a', kind: 'replaced_by', by: 'a-r1' },
      { taskId: 'a-r1', kind: 'user_scope_removed', userEventId: keptEvent },
      { taskId: 'b', kind: 'completed' },
      { taskId: 'c', kind: 'completed' },
    ]);
    await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-keep-stopped-delivered');
  },
);

test.serial('a burst of facts while the Coordinator is in a turn coalesces into one wake that carries them all', async (t) => {
  const h = await startScriptedTeam(t, {
    members: ['implementer', 'reviewer', 'tester'],
    plan: [create('a', 'implementer'), create('b', 'reviewer'), create('c', 'tester'), APPROVE],
    work: { a: 'gate', b: 'gate', c: 'gate' },
  });
  for (const id of ['a', 'b', 'c']) await h.gate(id).arrived;
  const turnsBefore = (await h.status()).turns.length;
  // The Coordinator is mid-turn (its model call held) while all three members finish.
  await h.script([['task_get', { taskId: 'a' }]], {
    before: async () => {
      for (const id of ['a', 'b', 'c']) h.gate(id).open();
      // Their evidence is committed while the turn runs (their executions settle without the team's main loop).
      await waitFor(
        async () => ((await readBoard(h.orchard.pool, h.teamId)).tasks.filter((x) => x.status === 'completed').length === 3 ? true : undefined),
        90_000,
        'three tasks completed on the board',
      );
    },
  });
  const idle = await h.until('idle after the wake', (v) => v.status === 'waiting_for_org_event' && v.turns.length >= turnsBefore + 2);
  // Exactly one turn after the scripted one: the three completions (and the ready board) woke it once.
  t.is(idle.turns.length, turnsBefore + 2, JSON.stringify(idle.turns));
  const wakes = h.stub.requests
    .map((r) => r.body)
    .filter((b) => (b.tools ?? []).some((tool: any) => tool.function.name === 'task_list') && b.messages.at(-1).role === 'user')
    .map((b) => String(b.messages.at(-1).content))
    .filter((text) => text.startsWith('Work facts changed') && text.includes(' completed by '));
  t.is(wakes.length, 1, JSON.stringify(wakes));
  for (const id of ['a', 'b', 'c']) t.regex(wakes[0], new RegExp(`- task ${id} completed by`));
  await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-burst-coalesced');
});

test.serial(
  'two members settle at once and their answers arrive out of order: the older one is dropped, and ready is announced once, after both ends',
  async (t) => {
    const answers: { taskId: string; candidate: string; candidateRevision: number }[] = [];
    const bAnswered = gate();
    let h: TeamHarness | undefined;
    h = await startScriptedTeam(t, {
      plan: [create('a', 'implementer'), create('b', 'reviewer'), APPROVE],
      work: { a: 'gate', b: 'gate' },
      teamHooks: {
        // a's answer (read while b was still in progress) is held until the workflow has applied b's (read later).
        afterSettle: async (input, settled) => {
          if (!h || input.teamId !== h.teamId) return;
          answers.push({ taskId: input.taskId, candidate: settled.candidate, candidateRevision: settled.candidateRevision });
          if (input.taskId === 'b') bAnswered.open();
          if (input.taskId !== 'a') return;
          await bAnswered.promise;
          await h.until("b's end applied", (v) => v.executions.some((e) => e.taskId === 'b' && e.state === 'completed'));
        },
      },
    });
    for (const id of ['a', 'b']) await h.gate(id).arrived;
    h.gate('a').open();
    await waitFor(async () => (answers.some((a) => a.taskId === 'a') ? true : undefined), 90_000, "a's settle answered");
    h.gate('b').open();
    const settled = await h.until('both ends applied', (v) => v.executions.filter((e) => e.state === 'completed').length === 2);
    const [a, b] = ['a', 'b'].map((id) => answers.find((x) => x.taskId === id)!);
    // The forced order: a read its board first (b still in progress), b later (closed); b's answer was applied first.
    t.like(a, { candidate: 'blocked' });
    t.like(b, { candidate: 'ready' });
    t.true(a.candidateRevision < b.candidateRevision);
    // The late, older answer did not overwrite the newer one.
    t.is(settled.candidate, 'ready');
    // "Ready" reached the Coordinator exactly once, in a wake that came after a's end (no execution running then).
    const wakes = () =>
      h!.stub.requests
        .map((r) => r.body)
        .filter((body) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list') && body.messages.at(-1).role === 'user')
        .map((body) => String(body.messages.at(-1).content));
    const readyWakes = () => wakes().filter((text) => text.includes('completion_candidate.state is ready'));
    await waitFor(async () => (readyWakes().length > 0 ? true : undefined), 90_000, 'the ready wake');
    const idle = await h.until('idle after the wakes', (v) => v.status === 'waiting_for_org_event');
    t.is(idle.candidate, 'ready');
    const ready = readyWakes();
    t.is(ready.length, 1, JSON.stringify(wakes()));
    t.regex(ready[0], /- task a completed by implementer/);
    await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-settled-out-of-order');
  },
);

test.serial('SLO with short durations: the miss is recorded exactly once (also across a worker restart) and the search attribute is set', async (t) => {
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 200, timeoutMs: 60_000 },
  });
  await h.writing('a', 'implementer');
  const stuck = await h.stick('implementer');
  const started = Date.now();
  await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
  const missed = await h.until('the SLO miss', (v) => v.receipts[0]?.sloMissed === true);
  t.true(Date.now() - started >= 200);
  t.is(missed.receipts[0].state, 'yielding', 'a miss is not a timeout');
  t.is((await describe(h)).searchAttributes.OrchardHandoffSloMissed?.[0], true);

  await h.orchard.restartWorkers();
  await stuck.unstick();
  const done = await h.until('released and replaced', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
  t.like(done.receipts[0], { state: 'released', sloMissed: true });
  t.deepEqual(done.receipts[0].trail, ['requested', 'yielding', 'released']);
  t.deepEqual(await rows(h, `SELECT state, slo_missed FROM team_handoff_receipts WHERE team_id = $1`), [{ state: 'released', slo_missed: true }]);
  t.is(await h.count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND detail->>'sloMissed' = 'true'`), 1, 'one recorded miss');
  t.is((await describe(h)).searchAttributes.OrchardHandoffSloMissed?.[0], true);
  // One SLO timer fired; the timeout's was cancelled when the handoff released.
  const history = await h.history();
  t.is(history.filter((e) => e.timerStartedEventAttributes).length, 2);
  t.is(history.filter((e) => e.timerFiredEventAttributes).length, 1);
  t.is(history.filter((e) => e.timerCanceledEventAttributes).length, 1);
});

/** Where the driver leaves a handoff (a user may move it on from the last three). */
const SETTLED: (string | undefined)[] = ['released', 'timeout', 'unknown', 'failed'];

test.serial(
  'a yield the old session refuses is durable failed at once (no timer decides it); the old execution is not stopped, so release waits for the proof',
  async (t) => {
    let refuse = true;
    const h = await startScriptedTeam(t, {
      plan: [create('a', 'implementer'), APPROVE],
      work: { a: 'write' },
      handoff: { sloMs: 30_000, timeoutMs: 60_000 },
      teamHooks: {
        // Stands for the old session answering its cancel with a typed refusal.
        beforeYield: async () => {
          if (refuse) throw new OrchardError('session_closing', 'the session refused the cancel');
        },
      },
    });
    const log = await h.writing('a', 'implementer');
    const started = Date.now();
    const { receiptId } = await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
    const failed = await h.until('the handoff settled', (v) => SETTLED.includes(v.receipts[0]?.state));
    t.true(Date.now() - started < 30_000, 'settled before the SLO, by the failure itself');
    t.like(failed.receipts[0], { state: 'failed', sloMissed: false, resolution: undefined });
    t.deepEqual(failed.receipts[0].trail, ['requested', 'yielding', 'failed']);
    t.deepEqual(failed.waiting, [{ taskId: 'a-r1', waiting: 'waiting_for_previous_execution', receiptId }]);
    t.false(
      failed.executions.some((e) => e.taskId === 'a-r1'),
      'the replacement did not start',
    );
    t.deepEqual(await rows(h, `SELECT state, slo_missed, resolution FROM team_handoff_receipts WHERE team_id = $1`), [
      { state: 'failed', slo_missed: false, resolution: null },
    ]);
    const [fact] = await rows(h, `SELECT detail FROM team_facts WHERE team_id = $1 AND kind = 'handoff_failed'`);
    t.regex(fact.detail.why, /refused to stop \(session_closing\)/);
    // The yield ran once: a typed refusal is not retried.
    const history = await h.history();
    const types = activityTypes(history);
    t.is(history.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'yieldExecution').length, 1);
    const yieldFailed = history.find(
      (e) => e.activityTaskFailedEventAttributes && types.get(String(e.activityTaskFailedEventAttributes.scheduledEventId)) === 'yieldExecution',
    );
    t.is(
      yieldFailed?.activityTaskFailedEventAttributes.failure.cause?.applicationFailureInfo?.type ??
        yieldFailed?.activityTaskFailedEventAttributes.failure.applicationFailureInfo?.type,
      'handoff_yield_failed',
    );
    t.is(history.filter((e) => e.timerCanceledEventAttributes).length, 2, 'both handoff timers were cancelled, neither fired');

    // Nobody stopped the old execution: it still writes, and a release is refused for want of proof.
    const lines = readFileSync(log, 'utf8').length;
    await waitFor(async () => (readFileSync(log, 'utf8').length > lines ? true : undefined), 10_000, 'the old writer still writing');
    const refused = await t.throwsAsync(h.orchard.client.resolveHandoff(h.teamId, { receiptId, action: 'release' }));
    t.is((refused as any).code, 'old_runtime_not_quiescent');
    t.is((await h.status()).receipts[0].state, 'failed');
    // The user stops it, then releases with proof: the replacement runs.
    refuse = false;
    await h.orchard.client.cancel(memberSessionId(h.teamId, 'implementer'), 'stopped by the user after a failed handoff');
    const released = await waitFor(
      () =>
        h.orchard.client
          .resolveHandoff(h.teamId, { receiptId, action: 'release' })
          .catch((err) => (err.code === 'old_runtime_not_quiescent' ? undefined : Promise.reject(err))),
      60_000,
      'a release with proof',
    );
    t.like(released, { state: 'released', resolution: 'release' });
    await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
    await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-handoff-failed');
  },
);

test.serial(
  'a handoff whose old runtime nobody can see at the timeout is durable unknown, not timeout; release needs the runtime seen quiescent',
  async (t) => {
    const blind = new Set<string>();
    const h = await startScriptedTeam(t, {
      plan: [create('a', 'implementer'), APPROVE],
      work: { a: 'write' },
      handoff: { sloMs: 300, timeoutMs: 1_500 },
      teamHooks: {
        // Stands for Temporal not answering about the old session.
        sessionLiveness: (sessionId, answer) =>
          blind.has(sessionId) ? { liveness: 'unknown', execution: 'UNKNOWN', runtime: 'Temporal did not answer: unavailable' } : answer,
      },
    });
    await h.writing('a', 'implementer');
    const session = memberSessionId(h.teamId, 'implementer');
    blind.add(session);
    const { receiptId } = await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
    const unknown = await h.until('the handoff settled', (v) => SETTLED.includes(v.receipts[0]?.state));
    t.like(unknown.receipts[0], { state: 'unknown', sloMissed: true });
    t.deepEqual(unknown.receipts[0].trail, ['requested', 'yielding', 'unknown']);
    t.deepEqual(unknown.waiting, [{ taskId: 'a-r1', waiting: 'waiting_for_previous_execution', receiptId }]);
    t.false(
      unknown.executions.some((e) => e.taskId === 'a-r1'),
      'the replacement did not start',
    );
    t.deepEqual(await rows(h, `SELECT state, slo_missed FROM team_handoff_receipts WHERE team_id = $1`), [{ state: 'unknown', slo_missed: true }]);
    const [fact] = await rows(h, `SELECT detail FROM team_facts WHERE team_id = $1 AND kind = 'handoff_unknown'`);
    t.regex(fact.detail.why, /is unknown/);
    // The yield still asked the session to stop (a cancel is idempotent): the real session closed.
    await waitFor(
      async () => ((await h.orchard.temporal.workflow.getHandle(`session/${session}`).describe()).status.name !== 'RUNNING' ? true : undefined),
      60_000,
      'the old session closed',
    );
    // Blind, the release is refused; once Temporal answers again, the proof holds.
    const refused = await t.throwsAsync(h.orchard.client.resolveHandoff(h.teamId, { receiptId, action: 'release' }));
    t.is((refused as any).code, 'old_runtime_not_quiescent');
    t.regex(refused!.message, /unknown/);
    blind.delete(session);
    const released = await h.orchard.client.resolveHandoff(h.teamId, { receiptId, action: 'release' });
    t.like(released, { state: 'released', resolution: 'release' });
    await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
    await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-handoff-unknown');
  },
);
