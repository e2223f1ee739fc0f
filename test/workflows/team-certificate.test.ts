import test, { type ExecutionContext } from 'ava';
import fc from 'fast-check';
import type { Pool } from 'pg';
import { createTeamActivities } from '../../activities/team';
import { memberSessionId } from '../../contract/member-session';
import {
  __testing,
  activateTeamRun,
  cancelPendingTask,
  createTask,
  createTeamRun,
  failTask,
  fenceHandoff,
  issueCertificate,
  moveReceipt,
  postInboxMessage,
  readBoard,
  readInbox,
  recordTaskOutput,
  startTask,
  TeamStoreRefusal,
} from '../../activities/store/team';
import { appendEntry } from '../../activities/store/transcript';
import type { Actor } from '../../workflows/team/authority';
import { CLOSURE_VALIDATOR_VERSION } from '../../workflows/team/closure';
import { gate } from '../helpers/fleet-model';
import { makeRepo, testPool, uniqueId } from '../helpers/orchard';
import { activityTypes, startScriptedTeam, waitingBehind, type Call, type TeamHarness } from '../helpers/team';
import { waitFor } from '../helpers/wait';

/**
 * The certificate matrix (invariant 15) through a real `teamRun`, its activities and Postgres: each board state is
 * reached the way the system reaches it — the Coordinator's tool calls, the Members' outcomes, the user's
 * reassign/cancel/resolve updates — and then the Coordinator asks for completion. Asserted: the
 * `team_certificates` rows, the tool result the model was shown and the workflow's status. Only a full closure
 * (every task completed with output, replaced by a chain that ends in one, or removed by a cited user event of
 * this team) is delivered, with exactly one certificate.
 */
const COMPLETE: Call = ['org_run_complete', { summary: 'all done' }];
const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const APPROVE: Call = ['plan_approve', {}];

/** The Coordinator asks for completion and is refused: no certificate row, nothing changed, the run not delivered. */
async function refused(t: ExecutionContext, h: TeamHarness, reasons: RegExp): Promise<string> {
  const before = await readBoard(h.orchard.pool, h.teamId);
  const [result] = await h.script([COMPLETE]);
  t.regex(result, /^error \(completion_refused\): /);
  t.regex(result, reasons);
  t.is((await h.certificates()).length, 0, 'no certificate row');
  t.is((await readBoard(h.orchard.pool, h.teamId)).workRevision, before.workRevision, 'the refusal committed nothing');
  const view = await h.status();
  t.not(view.status, 'delivered');
  t.is(view.certificate, undefined);
  t.not(view.candidate, 'certified');
  t.deepEqual(view.refusals.at(-1), { tool: 'org_run_complete', code: 'completion_refused' });
  return result;
}

/** The Coordinator asks for completion and the run is delivered, with exactly one certificate row, the one the workflow holds. */
async function delivered(t: ExecutionContext, h: TeamHarness) {
  const [result] = await h.script([COMPLETE]);
  t.regex(result, /^delivered: certificate cert-/);
  const rows = await h.certificates();
  t.is(rows.length, 1, 'exactly one certificate row');
  const cert = rows[0].certificate;
  // What the model was shown is the stored certificate.
  t.deepEqual(JSON.parse(result.split('\n')[1]), cert);
  const board = await readBoard(h.orchard.pool, h.teamId);
  t.is(Number(rows[0].work_revision), board.workRevision, 'certified at the current revision');
  t.is(cert.workRevision, board.workRevision);
  t.like(cert, { teamId: h.teamId, outcome: 'delivered', generation: board.generation, validatorVersion: CLOSURE_VALIDATOR_VERSION });
  const view = await h.until('delivered', (v) => v.status === 'delivered');
  t.is(view.candidate, 'certified');
  t.like(view.certificate, { certificateId: cert.certificateId, workRevision: cert.workRevision, generation: cert.generation });
  t.deepEqual([...view.certificate!.taskIds], cert.evidence.taskIds);
  t.deepEqual([...view.certificate!.outputIds], cert.evidence.outputIds);
  // The Coordinator's final words did not cite the certificate: the recorded summary does, for it.
  const certifying = view.turns.find((turn) => turn.finalExcerpt?.startsWith('script ') && turn.turn === view.summary?.turn);
  t.truthy(certifying, "the summary is the certifying turn's");
  t.deepEqual(view.summary, {
    certificateId: cert.certificateId,
    turn: certifying!.turn,
    text: `Certificate ${cert.certificateId}. ${certifying!.finalExcerpt}`,
  });
  return { cert, board, view };
}

/**
 * How each task of the certificate counts. A reassigned task (cancelled by the user for a reassign) must count
 * `replaced_by` its own replacement: its scope moved there. Anything else is reported as it is.
 */
function resolutionsOf(cert: any, board: Awaited<ReturnType<typeof readBoard>>): [string, string][] {
  return cert.resolutions.map((r: any): [string, string] => {
    const task = board.tasks.find((x) => x.taskId === r.taskId);
    const replacement = board.tasks.find((x) => x.replacesTaskId === r.taskId);
    const reassigned = task?.cancel?.kind === 'reassign' && r.kind === 'replaced_by' && r.by === replacement?.taskId;
    return [r.taskId, reassigned ? 'reassigned' : r.kind];
  });
}

const outputOf = (board: Awaited<ReturnType<typeof readBoard>>, taskId: string) => board.outputs.find((o) => o.taskId === taskId)?.outputId;

test('all valid: every task completed with its output → delivered, one certificate citing every task and output', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b', 'reviewer'), APPROVE] });
  await h.until('both completed', (v) => v.executions.filter((e) => e.state === 'completed').length === 2);
  const { cert, board, view } = await delivered(t, h);
  t.deepEqual(cert.evidence.taskIds, ['a', 'b']);
  t.deepEqual(cert.evidence.outputIds, [outputOf(board, 'a'), outputOf(board, 'b')].sort());
  t.deepEqual(cert.resolutions, [
    { taskId: 'a', kind: 'completed' },
    { taskId: 'b', kind: 'completed' },
  ]);
  // The evidence is the members' executions', as the workflow ran them.
  for (const e of view.executions) t.is(board.outputs.find((o) => o.taskId === e.taskId)?.executionId, e.executionId);
});

test('all cancelled: every task removed by the user → never delivered (all_cancelled), no certificate', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b', 'reviewer')] });
  for (const taskId of ['a', 'b']) await h.orchard.client.cancelTask(h.teamId, { taskId, reason: 'not needed' });
  const result = await refused(t, h, /the run is cancelled: .*all_cancelled/);
  t.notRegex(result, /no_completed_output/);
});

test('all failed: every execution failed → never delivered (all_failed), no certificate', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b', 'reviewer'), APPROVE], work: { a: 'fail', b: 'fail' } });
  await h.until('both failed', (v) => v.executions.filter((e) => e.state === 'failed').length === 2);
  await refused(t, h, /the run is not_delivered: .*all_failed/);
});

test('missing output: a completed task whose evidence row is gone → never delivered (missing_output)', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b', 'reviewer'), APPROVE] });
  await h.until('both completed', (v) => v.executions.filter((e) => e.state === 'completed').length === 2);
  // No write path of the system makes this state (the output and the status are one transaction): the ledger
  // is damaged by hand, as a lost or purged evidence row would leave it.
  await h.orchard.pool.query(`DELETE FROM team_task_outputs WHERE team_id = $1 AND task_id = 'b'`, [h.teamId]);
  await refused(t, h, /the run is not_delivered: missing_output \(b\)/);
});

test.serial(
  'stale evidence: the board moves between the assessment and the certificate → refused; a fresh assessment certifies once, at the new revision',
  async (t) => {
    const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b', 'reviewer'), APPROVE] });
    await h.until('both completed, idle', (v) => v.executions.filter((e) => e.state === 'completed').length === 2 && v.status === 'waiting_for_org_event');
    const assessed = (await readBoard(h.orchard.pool, h.teamId)).workRevision;

    // A user's fact is being committed (through the store's own commit: the run row is locked) while the
    // Coordinator's completion reads the board — which still shows the old revision — and then queues for the row.
    const locked = gate();
    const go = gate();
    let writerPid = 0;
    const pool = await testPool(t);
    const writer = __testing.commit(pool, h.teamId, { kind: 'user', eventId: 'ev-late' }, 'user_event', async ({ c }) => {
      writerPid = Number((await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
      locked.open();
      await go.promise;
      await c.query(`INSERT INTO team_user_events (team_id, event_id, kind, text) VALUES ($1, 'ev-late', 'message', 'one more thing')`, [h.teamId]);
      return { result: undefined, fact: { kind: 'user_event', detail: { eventId: 'ev-late' } } };
    });
    await locked.promise;
    const answer = h.script([COMPLETE]);
    await waitFor(async () => (await waitingBehind(pool, writerPid)).length >= 1, 30_000, 'the certificate queued behind the writer');
    go.open();
    t.is((await writer).revision, assessed + 1);

    const [result] = await answer;
    t.regex(result, /^error \(stale_evidence\): /);
    t.is((await h.certificates()).length, 0);
    const view = await h.status();
    t.not(view.status, 'delivered');
    t.is(view.certificate, undefined);
    t.deepEqual(view.refusals.at(-1), { tool: 'org_run_complete', code: 'stale_evidence' });

    const { cert } = await delivered(t, h);
    t.is(cert.workRevision, assessed + 1, 'certified at the revision it assessed, not the stale one');
  },
);

test('replacement chain: implement → reassigned → reassigned again → the last one completes → delivered, the chain cited link by link', async (t) => {
  const h = await startScriptedTeam(t, {
    members: ['implementer', 'reviewer', 'tester'],
    plan: [create('impl', 'implementer'), APPROVE],
    work: { impl: 'write', 'impl-r1': 'write', 'impl-r1-r2': 'gate' },
    handoff: { sloMs: 30_000, timeoutMs: 60_000 },
  });
  await h.writing('impl', 'implementer');
  await h.orchard.client.reassignTask(h.teamId, { taskId: 'impl', newOwner: 'reviewer', reason: 'the reviewer knows it' });
  await h.writing('impl-r1', 'reviewer');
  await h.orchard.client.reassignTask(h.teamId, { taskId: 'impl-r1', newOwner: 'tester', reason: 'the tester knows it better' });
  // While the last link runs, the chain ends in an open task: not delivered.
  await h.gate('impl-r1-r2').arrived;
  await refused(t, h, /task_open \(impl-r1-r2\)/);
  h.gate('impl-r1-r2').open();
  await h.until('the last link completed', (v) => v.executions.some((e) => e.taskId === 'impl-r1-r2' && e.state === 'completed'));

  const { cert, board } = await delivered(t, h);
  // Every link is in the evidence; only the last one is counted by its output. (The reassigned links count
  // through the user's reassign event as the fence records it — see resolutionsOf.)
  t.deepEqual(resolutionsOf(cert, board), [
    ['impl', 'reassigned'],
    ['impl-r1', 'reassigned'],
    ['impl-r1-r2', 'completed'],
  ]);
  t.deepEqual(cert.evidence.taskIds, ['impl', 'impl-r1', 'impl-r1-r2']);
  t.deepEqual(cert.evidence.outputIds, [outputOf(board, 'impl-r1-r2')], 'only the last link produced evidence');
  t.deepEqual(board.handoffs, [
    { oldTaskId: 'impl', newTaskId: 'impl-r1', state: 'released' },
    { oldTaskId: 'impl-r1', newTaskId: 'impl-r1-r2', state: 'released' },
  ]);
});

test('user scope removal: tasks the user cancelled (waiting and running) count as removed, each citing its own user event of this team', async (t) => {
  const h = await startScriptedTeam(t, {
    members: ['implementer', 'reviewer', 'tester'],
    plan: [create('a', 'implementer'), create('b', 'reviewer'), create('c', 'tester')],
    work: { a: 'write' },
    handoff: { sloMs: 30_000, timeoutMs: 60_000 },
  });
  await h.orchard.client.cancelTask(h.teamId, { taskId: 'b', reason: 'no review this time' });
  await h.script([APPROVE]);
  await h.writing('a', 'implementer');
  const cancelled = await h.orchard.client.cancelTask(h.teamId, { taskId: 'a', reason: 'scope cut' });
  t.like(cancelled.receipt, { kind: 'cancel', oldTaskId: 'a' });
  await h.until('a released, c completed', (v) => v.receipts[0]?.state === 'released' && v.executions.some((e) => e.taskId === 'c' && e.state === 'completed'));

  const { cert, board } = await delivered(t, h);
  const events = (await h.orchard.pool.query(`SELECT event_id, kind, task_id FROM team_user_events WHERE team_id = $1`, [h.teamId])).rows;
  const eventOf = (taskId: string) => board.tasks.find((task) => task.taskId === taskId)!.cancel!.userEventId;
  t.deepEqual(cert.resolutions, [
    { taskId: 'a', kind: 'user_scope_removed', userEventId: eventOf('a') },
    { taskId: 'b', kind: 'user_scope_removed', userEventId: eventOf('b') },
    { taskId: 'c', kind: 'completed' },
  ]);
  // Each cited event is a real event of this team, about that task.
  for (const taskId of ['a', 'b'])
    t.deepEqual(
      events.filter((e) => e.event_id === eventOf(taskId)).map((e) => e.task_id),
      [taskId],
    );
  t.deepEqual(cert.evidence.outputIds, [outputOf(board, 'c')]);
});

test('pending handoff: while the old execution is not proven stopped the run is never delivered; once released and replaced, it is', async (t) => {
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 60_000, timeoutMs: 120_000 },
  });
  await h.writing('a', 'implementer');
  const stuck = await h.stick('implementer');
  await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
  await h.until('yielding', (v) => v.receipts[0]?.state === 'yielding');
  await refused(t, h, /handoff_pending \(a-r1\)/);
  t.deepEqual((await readBoard(h.orchard.pool, h.teamId)).handoffs, [{ oldTaskId: 'a', newTaskId: 'a-r1', state: 'yielding' }]);

  await stuck.unstick();
  await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === 'a-r1' && e.state === 'completed'));
  const { cert } = await delivered(t, h);
  t.deepEqual(resolutionsOf(cert, await readBoard(h.orchard.pool, h.teamId)), [
    ['a', 'reassigned'],
    ['a-r1', 'completed'],
  ]);
});

test.serial(
  'response-loss replay: the certificate commits, its activity response is lost, the retry finds it → still one certificate, the one the run ends with',
  async (t) => {
    const h = await startScriptedTeam(t, { members: ['implementer'], plan: [create('a', 'implementer'), APPROVE] });
    await h.until('completed, idle', (v) => v.executions.some((e) => e.state === 'completed') && v.status === 'waiting_for_org_event');

    // Before the Coordinator's completion call runs, hold the row its tool result will be written to: the
    // certificate commits, then the activity blocks writing the result — and its connection is cut there, so the
    // attempt fails after the commit and Temporal retries it.
    const pool = await testPool(t);
    const blocker = await pool.connect();
    t.teardown(() => blocker.release());
    const blockerPid = Number((await blocker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
    const answer = h.script([COMPLETE], {
      before: async () => {
        const turn = (
          await pool.query(
            `SELECT execution_id, turn_id, turn FROM transcript_entries WHERE session_id = $1 AND step = 0 AND role = 'user' ORDER BY seq DESC LIMIT 1`,
            [h.teamId],
          )
        ).rows[0];
        await blocker.query('BEGIN');
        await blocker.query(
          `INSERT INTO transcript_entries (session_id, execution_id, turn_id, turn, step, ordinal, role, content) VALUES ($1, $2, $3, $4, 1, 1, 'tool', 'held')`,
          [h.teamId, turn.execution_id, turn.turn_id, turn.turn],
        );
      },
    });
    const stuck = await waitFor(
      async () => {
        const waiting = await waitingBehind(pool, blockerPid);
        return waiting.length > 0 && (await h.certificates()).length === 1 ? waiting : undefined;
      },
      60_000,
      'the certificate committed and its result write blocked',
    );
    const committed = (await h.certificates())[0].certificate;
    for (const pid of stuck) await pool.query('SELECT pg_terminate_backend($1)', [pid]);
    await blocker.query('ROLLBACK');

    const [result] = await answer;
    t.regex(result, /^delivered: certificate /);
    const rows = await h.certificates();
    t.is(rows.length, 1, 'still exactly one certificate');
    t.deepEqual(rows[0].certificate, committed, 'the row is the first attempt’s, untouched');
    t.deepEqual(JSON.parse(result.split('\n')[1]), committed, 'the retry returned the stored certificate, not a new one');
    const view = await h.until('delivered', (v) => v.status === 'delivered');
    t.is(view.certificate!.certificateId, committed.certificateId);
    // The activity really was retried: its completed attempt is not its first.
    const events = await h.history();
    const types = activityTypes(events);
    const attempts = events
      .filter((e) => e.activityTaskStartedEventAttributes && types.get(String(e.activityTaskStartedEventAttributes.scheduledEventId)) === 'coordinatorTool')
      .map((e) => e.activityTaskStartedEventAttributes.attempt);
    t.true(
      attempts.some((a: number) => a >= 2),
      `coordinatorTool attempts: ${attempts}`,
    );
  },
);

// The property: generated boards, built in Postgres through the store as the system writes them ------------------

const MEMBERS = ['m1', 'm2', 'm3'] as const;
const RECEIPT_STATES = ['requested', 'yielding', 'released', 'timeout', 'unknown', 'failed'] as const;
type Fate = 'pending' | 'running' | 'completed' | 'failed' | 'user_cancelled' | 'cancel_handoff' | 'reassign';

interface TaskSpec {
  owner: number;
  fate: Fate;
  /** Where a handoff's receipt ends up. */
  receipt: (typeof RECEIPT_STATES)[number];
  /** The owner's execution posts an Inbox message while it runs. */
  messaged: boolean;
  /** A reassign's replacement: kept stopped by the user, or what happens to it next. */
  keepStopped: boolean;
  replacement?: TaskSpec;
}

interface Damage {
  /** The n-th output row is deleted (a lost evidence row). */
  deleteOutput?: number;
  /** The team was activated again (a new generation): earlier evidence is stale. */
  newGeneration: boolean;
  /** The n-th user-cancelled task cites an event that is not about it. */
  miscite?: number;
  /** The Coordinator read its Inbox. */
  inboxRead: boolean;
  turnsRunning: number;
}

const fate = fc.oneof(
  { arbitrary: fc.constant<Fate>('completed'), weight: 6 },
  { arbitrary: fc.constantFrom<Fate>('pending', 'running', 'failed', 'cancel_handoff'), weight: 1 },
  { arbitrary: fc.constant<Fate>('user_cancelled'), weight: 2 },
  { arbitrary: fc.constant<Fate>('reassign'), weight: 3 },
);
const { task: taskSpec } = fc.letrec<{ task: TaskSpec }>((tie) => ({
  task: fc.record({
    owner: fc.nat(MEMBERS.length - 1),
    fate,
    receipt: fc.oneof({ arbitrary: fc.constant('released' as const), weight: 4 }, { arbitrary: fc.constantFrom(...RECEIPT_STATES), weight: 1 }),
    messaged: fc.oneof({ arbitrary: fc.constant(false), weight: 4 }, { arbitrary: fc.constant(true), weight: 1 }),
    keepStopped: fc.oneof({ arbitrary: fc.constant(false), weight: 4 }, { arbitrary: fc.constant(true), weight: 1 }),
    replacement: fc.option(tie('task'), { nil: undefined, maxDepth: 2, depthIdentifier: 'replacement' }),
  }),
}));
const rarely = fc.oneof({ arbitrary: fc.constant(false), weight: 5 }, { arbitrary: fc.constant(true), weight: 1 });
const damage: fc.Arbitrary<Damage> = fc.record({
  deleteOutput: fc.option(fc.nat(5), { nil: undefined, freq: 6 }),
  newGeneration: rarely,
  miscite: fc.option(fc.nat(5), { nil: undefined, freq: 6 }),
  inboxRead: fc.boolean(),
  turnsRunning: fc.oneof({ arbitrary: fc.constant(0), weight: 6 }, { arbitrary: fc.constant(1), weight: 1 }),
});

/** Builds the board with the store's own writes, each by the actor that makes it in the system. */
async function build(pool: Pool, repo: string, teamId: string, specs: TaskSpec[], hurt: Damage): Promise<void> {
  await createTeamRun(pool, {
    teamId,
    repo,
    goal: 'property',
    members: MEMBERS.map((memberId) => ({ memberId, role: memberId, sessionId: memberSessionId(teamId, memberId) })),
  });
  await activateTeamRun(pool, teamId, 'first');
  const coordinator: Actor = { kind: 'coordinator', turnId: 'plan' };
  let executions = 0;
  async function place(taskId: string, spec: TaskSpec, owner: string): Promise<void> {
    const member: Actor = { kind: 'member', memberId: owner, executionId: `x${++executions}` };
    if (spec.fate === 'pending') return;
    if (spec.fate === 'user_cancelled') {
      await cancelPendingTask(pool, teamId, { eventId: `ev-${taskId}`, taskId, reason: 'not needed', kind: 'cancel' });
      return;
    }
    await startTask(pool, teamId, taskId, member.executionId);
    if (spec.messaged) await postInboxMessage(pool, teamId, member, { messageId: `msg-${taskId}`, relatedTaskId: taskId, purpose: 'risk', text: 'careful' });
    switch (spec.fate) {
      case 'running':
        return;
      case 'completed':
        await recordTaskOutput(pool, teamId, member, { taskId, outputId: `out-${taskId}`, summary: 'done' });
        return;
      case 'failed':
        await failTask(pool, teamId, member, taskId, 'it broke');
        return;
      case 'cancel_handoff':
      case 'reassign': {
        const reassign = spec.fate === 'reassign';
        const newOwner = MEMBERS[(MEMBERS.indexOf(owner as (typeof MEMBERS)[number]) + 1) % MEMBERS.length];
        const { result } = await fenceHandoff(pool, teamId, {
          eventId: `ev-${taskId}`,
          oldTaskId: taskId,
          kind: reassign ? 'reassign' : 'cancel',
          reason: 'handoff',
          sessionId: memberSessionId(teamId, owner),
          executionId: member.executionId,
          namespace: 'default',
          replacement: reassign ? { taskId: `${taskId}-r`, owner: newOwner } : undefined,
        });
        if (spec.receipt !== 'requested') await moveReceipt(pool, teamId, result.receiptId, spec.receipt);
        if (!reassign) return;
        if (spec.keepStopped) {
          await cancelPendingTask(pool, teamId, { eventId: `keep-${taskId}`, taskId: `${taskId}-r`, reason: 'keep stopped', kind: 'keep_stopped' });
          return;
        }
        // The replacement starts only once the handoff is released (the store refuses it before): until then it
        // stays pending.
        if (spec.receipt !== 'released') return;
        await place(`${taskId}-r`, spec.replacement ?? { ...spec, fate: 'completed', replacement: undefined }, newOwner);
      }
    }
  }
  for (const [i, spec] of specs.entries()) {
    const owner = MEMBERS[spec.owner];
    await createTask(pool, teamId, coordinator, { taskId: `t${i}`, title: `task ${i}`, owner });
    await place(`t${i}`, spec, owner);
  }
  if (hurt.deleteOutput !== undefined) {
    await pool.query(
      `DELETE FROM team_task_outputs WHERE team_id = $1 AND output_id = (SELECT output_id FROM team_task_outputs WHERE team_id = $1 ORDER BY output_id OFFSET $2 LIMIT 1)`,
      [teamId, hurt.deleteOutput],
    );
  }
  // The team was started again after its run closed: a new activation, a new generation.
  if (hurt.newGeneration) await activateTeamRun(pool, teamId, 'second');
  if (hurt.miscite !== undefined) {
    const cancelled = (await pool.query(`SELECT task_id FROM team_tasks WHERE team_id = $1 AND cancel->>'by' = 'user' ORDER BY task_id`, [teamId])).rows;
    if (cancelled.length > 0) {
      const victim = cancelled[hurt.miscite % cancelled.length].task_id;
      const other = (await pool.query(`SELECT event_id FROM team_user_events WHERE team_id = $1 AND task_id <> $2 ORDER BY event_id LIMIT 1`, [teamId, victim]))
        .rows[0];
      await pool.query(`UPDATE team_tasks SET cancel = jsonb_set(cancel, '{userEventId}', to_jsonb($3::text)) WHERE team_id = $1 AND task_id = $2`, [
        teamId,
        victim,
        other?.event_id ?? 'ev-nowhere',
      ]);
    }
  }
  if (hurt.inboxRead) await readInbox(pool, teamId, Number.MAX_SAFE_INTEGER, 'test-read');
}

/**
 * The oracle, written against the rows (not the validator): a full closure is every task closed — completed with
 * an output row of its own and of the run's generation, cancelled by the user citing an event of this team about
 * it, or replaced by a closed task — at least one completed, every handoff released, nothing unread or running.
 */
async function fullClosure(pool: Pool, teamId: string, turnsRunning: number): Promise<{ full: boolean; taskIds: string[]; outputIds: string[] }> {
  const run = (await pool.query(`SELECT generation FROM team_runs WHERE team_id = $1`, [teamId])).rows[0];
  const tasks = (await pool.query(`SELECT task_id, status, output_id, replaces_task_id, cancel FROM team_tasks WHERE team_id = $1`, [teamId])).rows;
  const outputs = (await pool.query(`SELECT output_id, task_id, generation FROM team_task_outputs WHERE team_id = $1`, [teamId])).rows;
  const events = (await pool.query(`SELECT event_id, task_id FROM team_user_events WHERE team_id = $1`, [teamId])).rows;
  const handoffs = (await pool.query(`SELECT state FROM team_handoff_receipts WHERE team_id = $1`, [teamId])).rows;
  const unread = (await pool.query(`SELECT count(*)::int AS n FROM team_inbox WHERE team_id = $1 AND read_revision IS NULL`, [teamId])).rows[0].n;
  const evidence = (t: any) =>
    t.status === 'completed' && outputs.find((o) => o.output_id === t.output_id && o.task_id === t.task_id && Number(o.generation) === Number(run.generation));
  const counted = (t: any, seen: Set<string>): boolean => {
    if (seen.has(t.task_id)) return false;
    if (evidence(t)) return true;
    if (t.status === 'cancelled' && t.cancel?.by === 'user' && events.some((e) => e.event_id === t.cancel.userEventId && e.task_id === t.task_id)) return true;
    if (t.status !== 'cancelled' && t.status !== 'failed' && t.status !== 'completed') return false;
    return tasks.some((r) => r.replaces_task_id === t.task_id && counted(r, new Set([...seen, t.task_id])));
  };
  const completed = tasks.filter(evidence);
  const full =
    completed.length > 0 && tasks.every((t) => counted(t, new Set())) && handoffs.every((h) => h.state === 'released') && unread === 0 && turnsRunning === 0;
  return { full, taskIds: tasks.map((t) => t.task_id).sort(), outputIds: completed.map((t) => t.output_id).sort() };
}

test('property: over generated boards built through the store, org_run_complete — and issueCertificate itself — certify exactly the full closures', async (t) => {
  const pool = await testPool(t);
  const acts = createTeamActivities({
    pool,
    temporal: () => {
      throw new Error('no Temporal here: only the board');
    },
  });
  const seen = { delivered: 0, refused: 0 };
  // A real repository: certification builds the run's result branch on its protected branch.
  const repo = makeRepo();
  await fc.assert(
    fc.asyncProperty(fc.array(taskSpec, { minLength: 1, maxLength: 4 }), damage, async (specs, hurt) => {
      const teamId = uniqueId('prop');
      await build(pool, repo, teamId, specs, hurt);
      const oracle = await fullClosure(pool, teamId, hurt.turnsRunning);
      const board = await readBoard(pool, teamId);

      // The Coordinator's completion request, as the workflow runs it (its tool call is in the transcript).
      const ref = { sessionId: teamId, executionId: `${teamId}-x`, turnId: `${teamId}-turn`, turn: 1, step: 1, callId: 'c1' };
      await appendEntry(
        pool,
        { ...ref, ordinal: 0 },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'org_run_complete', arguments: JSON.stringify({ summary: 'done' }) } }],
        },
      );
      const effects = await acts.coordinatorTool({ teamId, ref, index: 0, tool: 'org_run_complete', members: [...MEMBERS], turnsRunning: hurt.turnsRunning });

      // A caller that skips the validator: the store is asked for a certificate of this board as it stands.
      const forged = {
        certificateId: `forged-${teamId}`,
        teamId,
        outcome: 'delivered' as const,
        generation: board.generation,
        workRevision: board.workRevision,
        evidence: { taskIds: oracle.taskIds, outputIds: oracle.outputIds },
        resolutions: [],
        validatorVersion: CLOSURE_VALIDATOR_VERSION,
        issuedAt: new Date().toISOString(),
        summary: 'forged',
      };
      const direct = await issueCertificate(pool, teamId, { kind: 'coordinator', turnId: 'other' }, forged).then(
        () => 'issued',
        (err: unknown) => (err instanceof TeamStoreRefusal ? err.code : Promise.reject(err)),
      );
      const rows = (await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1`, [teamId])).rows;
      const context = JSON.stringify({ specs, hurt, oracle, effects, direct, board });
      if (oracle.full) {
        seen.delivered += 1;
        if (!effects.certificate) throw new Error(`a full closure was not certified: ${context}`);
        if (rows.length !== 1) throw new Error(`${rows.length} certificate rows: ${context}`);
        const cert = rows[0].certificate;
        if (cert.certificateId !== effects.certificate.certificateId) throw new Error(`the forged call replaced the certificate: ${context}`);
        if (
          JSON.stringify(cert.evidence.taskIds) !== JSON.stringify(oracle.taskIds) ||
          JSON.stringify(cert.evidence.outputIds) !== JSON.stringify(oracle.outputIds)
        ) {
          throw new Error(`the evidence is not the closure: ${JSON.stringify(cert.evidence)} ${context}`);
        }
      } else {
        seen.refused += 1;
        if (effects.certificate || effects.refused !== 'completion_refused') throw new Error(`org_run_complete certified an open board: ${context}`);
        if (rows.length !== 0 || direct === 'issued') throw new Error(`the store certified an open board (direct: ${direct}): ${context}`);
      }
    }),
    { numRuns: Number(process.env.ORCHARD_PROPERTY_RUNS ?? 60) },
  );
  t.log(seen);
  // Not vacuous: both sides of the property were exercised.
  t.true(seen.delivered > 0 && seen.refused > 0, JSON.stringify(seen));
});
