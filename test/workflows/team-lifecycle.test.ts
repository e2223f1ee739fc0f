import test from 'ava';
import { createTask, readBoard, TeamStoreRefusal } from '../../activities/store/team';
import { teamWorkflowId, type TeamStatusView } from '../../contract/messages';
import { memberSessionId } from '../../contract/member-session';
import { ORCHARD_STATUS } from '../../contract/search-attributes';
import { holdRunRow, startScriptedTeam, type Call } from '../helpers/team';

/**
 * Issue 22, deliverable 1: a person steers a team run — pause, resume, archive — through the real stack (dev
 * server, Postgres, sessions; the model played over HTTP). Asserted on the workflow's state, the board's rows, the
 * receipts and the Members' sessions.
 */
const create = (taskId: string, owner?: string): Call => [
  'task_create',
  { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, ...(owner ? { owner } : {}) },
];
const APPROVE: Call = ['plan_approve', {}];
const PAUSE_QUIET_MS = Number(process.env.ORCHARD_TEST_PAUSE_QUIET_MS ?? 2_000);
const codeOf = async (p: Promise<unknown>) => ((await p.then(() => undefined).catch((err: unknown) => err)) as { code?: string } | undefined)?.code;

test('pause mid-task fences and stops the running work, its task waits pending for its owner; nothing starts while paused; resume runs it again to delivery', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), APPROVE], work: { a: 'gate' } });
  const gate = h.gate('a');
  await gate.arrived;
  const first = (await h.status()).executions.find((e) => e.taskId === 'a' && e.state === 'running')!;
  t.truthy(first);

  const paused = await h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'hold on', requestId: 'p1' });
  t.is(paused.state, 'paused');
  t.is(paused.receipts.length, 1);
  t.like(paused.receipts[0], { kind: 'pause', oldTaskId: 'a', oldOwner: 'implementer' });
  // A retry with the same request id answers the same and fences nothing more.
  t.deepEqual(await h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'hold on', requestId: 'p1' }), paused);
  // Pausing a paused team is refused, typed.
  t.is(await codeOf(h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'again' })), 'team_paused');

  const released = await h.until('the pause receipt released', (v) => v.receipts.some((r) => r.kind === 'pause' && r.state === 'released'));
  t.is(released.status, 'paused');
  t.deepEqual(released.paused, { reason: 'hold on' });
  t.false(released.executions.some((e) => e.state === 'running'));
  t.is(released.executions.find((e) => e.executionId === first.executionId)?.state, 'paused');
  // No new task state: the task is pending again, for the same owner.
  const board = await readBoard(h.orchard.pool, h.teamId);
  t.like(
    board.tasks.find((x) => x.taskId === 'a'),
    { status: 'pending', owner: 'implementer' },
  );
  // The old execution's session was closed (its runtime is gone before the receipt said released).
  t.is((await h.orchard.client.status(memberSessionId(h.teamId, 'implementer'))).status, 'closed');

  // A message while paused is accepted, but no Coordinator turn runs and nothing is dispatched (watched for a while:
  // ORCHARD_TEST_PAUSE_QUIET_MS).
  const turnsBefore = released.turns.length;
  const asked = (text: string) => h.stub.requests.filter((r) => JSON.stringify(r.body.messages ?? []).includes(text)).length;
  await h.orchard.client.teamMessage(h.teamId, { text: 'how is it going?' });
  await new Promise((resolve) => setTimeout(resolve, PAUSE_QUIET_MS));
  const waiting = await h.status();
  t.is(waiting.turns.length, turnsBefore);
  t.is(asked('how is it going?'), 0, 'the Coordinator was not asked while paused');
  t.false(waiting.executions.some((e) => e.state === 'running'));
  t.is(waiting.status, 'paused');
  t.is(waiting.queuedMessages, 1);

  const resumed = await h.orchard.client.teamLifecycle(h.teamId, 'resume', { reason: 'go on' });
  t.is(resumed.state, 'running');
  t.is(await codeOf(h.orchard.client.teamLifecycle(h.teamId, 'resume', { reason: 'again' })), 'team_not_paused');
  // The paused task starts again with its owner, under a new execution; the gate lets its work finish.
  const again = await h.until('a running again', (v) =>
    v.executions.some((e) => e.taskId === 'a' && e.state === 'running' && e.executionId !== first.executionId),
  );
  t.not(again.status, 'paused');
  // The Coordinator hears the message after the resume.
  await h.until('the message answered', (v) => v.queuedMessages === 0 && v.turns.length > turnsBefore);
  t.true(asked('how is it going?') > 0);
  gate.open();
  await h.until('a completed', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'completed'));
  const [done] = await h.script([['org_run_complete', { summary: 'all done' }]]);
  t.regex(done, /cert/);
  const delivered = await h.until('delivered', (v) => v.outcome === 'delivered');
  // The evidence is the second execution's, never the fenced one's.
  const output = (await readBoard(h.orchard.pool, h.teamId)).outputs.find((o) => o.taskId === 'a')!;
  t.not(output.executionId, first.executionId);
  t.true(delivered.receipts.every((r) => r.state === 'released'));
  // A delivered team is neither paused nor archived.
  t.is(await codeOf(h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'late' })), 'run_delivered');
  t.is(await codeOf(h.orchard.client.teamLifecycle(h.teamId, 'archive', { reason: 'late' })), 'run_delivered');
});

test('archive abandons the whole run: running work stopped, open tasks cancelled citing one user event, sessions closed, no certificate; the run ends cancelled', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b'), APPROVE], work: { a: 'gate' } });
  await h.gate('a').arrived;
  const running = (await h.status()).executions.find((e) => e.taskId === 'a' && e.state === 'running')!;

  const archived = await h.orchard.client.teamLifecycle(h.teamId, 'archive', { reason: 'not needed any more' });
  t.is(archived.state, 'archived');
  t.deepEqual(archived.cancelledTasks, ['b']);
  t.is(archived.receipts.length, 1);
  t.like(archived.receipts[0], { kind: 'archive', oldTaskId: 'a' });

  // The run has ended, with its outcome as its result.
  const handle = h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId));
  const result = (await handle.result()) as TeamStatusView;
  t.is(result.status, 'archived');
  t.is(result.outcome, 'cancelled');
  t.is(result.certificate, undefined);
  t.true(result.receipts.every((r) => r.state === 'released'));
  t.is((await handle.describe()).typedSearchAttributes.get(ORCHARD_STATUS), 'cancelled');
  t.is(await h.count('SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1'), 0);

  // Every task cancelled by the user, citing the one archive event.
  const board = await readBoard(h.orchard.pool, h.teamId);
  const events = new Set(board.tasks.map((x) => x.cancel?.userEventId));
  t.is(events.size, 1);
  t.deepEqual(
    board.tasks.map((x) => [x.taskId, x.status, x.cancel?.by]),
    [
      ['a', 'cancelled', 'user'],
      ['b', 'cancelled', 'user'],
    ],
  );
  t.true(board.userEvents.some((e) => e.id === [...events][0] && e.kind === 'archive'));
  // The Members' sessions are closed and the task execution workflow has ended.
  for (const member of ['implementer', 'reviewer']) {
    const session = await h.orchard.client.status(memberSessionId(h.teamId, member)).catch(() => undefined);
    if (session) t.is(session.status, 'closed', member);
  }
  t.not((await h.orchard.temporal.workflow.getHandle(running.workflowId!).describe()).status.name, 'RUNNING');
  // The archived board takes no more writes: a late Coordinator write is refused, typed.
  const late = await t.throwsAsync(createTask(h.orchard.pool, h.teamId, { kind: 'coordinator', turnId: 'late' }, { taskId: 'c', title: 'late' }));
  t.true(late instanceof TeamStoreRefusal);
  t.is((late as TeamStoreRefusal).code, 'team_archived');
  // An ended run takes no more requests.
  t.is(await codeOf(h.orchard.client.teamLifecycle(h.teamId, 'archive', { reason: 'again' })), 'team_not_running');
});

type Settled<T> = { ok: true; value: T } | { ok: false; code: string; message: string };
const settle = <T>(p: Promise<T>): Promise<Settled<T>> =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (err: any) => ({ ok: false as const, code: String(err?.code ?? 'untyped'), message: String(err?.message) }),
  );

/**
 * A Member's completion and a user's pause or archive reach the store together (the run row held while both queue
 * behind it, released in a forced order). Either the evidence commits first — the pause/archive fences nothing
 * and the task stays completed — or the fence does, and the late end is no evidence. Either way: every receipt
 * settles, no member runs two executions, nothing is certified.
 */
const completionVersusLifecycle = test.macro({
  async exec(t, action: 'pause' | 'archive', first: 'completion' | 'fence') {
    const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), APPROVE], work: { a: 'gate' }, handoff: { sloMs: 30_000, timeoutMs: 60_000 } });
    const held = h.gate('a');
    await held.arrived;
    const user = () => settle(h.orchard.client.teamLifecycle(h.teamId, action, { reason: 'stop' }));
    const lock = await holdRunRow(t, h.teamId);
    let answer: Promise<Settled<Awaited<ReturnType<typeof h.orchard.client.teamLifecycle>>>>;
    if (first === 'completion') {
      held.open();
      await lock.queued(1);
      answer = user();
      await lock.queued(2);
    } else {
      answer = user();
      await lock.queued(1);
      held.open();
      await lock.queued(2);
    }
    await lock.release();
    const result = await answer;
    t.true(result.ok, JSON.stringify(result));
    const lifecycle = (result as { value: { receipts: readonly { kind: string }[] } }).value;
    const outputs = (await h.orchard.pool.query(`SELECT execution_id FROM team_task_outputs WHERE team_id = $1`, [h.teamId])).rows;
    const task = async () => (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a')!;
    if (first === 'completion') {
      t.is(lifecycle.receipts.length, 0, 'the fence lost: nothing to fence');
      t.is(outputs.length, 1);
      t.is((await task()).status, 'completed');
    } else {
      t.deepEqual(
        lifecycle.receipts.map((r) => r.kind),
        [action],
      );
      t.is(outputs.length, 0, 'the late end is no evidence');
      t.is((await task()).status, action === 'pause' ? 'pending' : 'cancelled');
    }
    const view =
      action === 'archive'
        ? ((await h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).result()) as TeamStatusView)
        : await h.until('every receipt settled', (v) => v.receipts.every((r) => r.state === 'released'));
    t.true(
      view.receipts.every((r) => r.state === 'released'),
      JSON.stringify(view.receipts),
    );
    for (const member of ['implementer', 'reviewer']) t.true(view.executions.filter((e) => e.memberId === member && e.state === 'running').length <= 1);
    t.is(view.certificate, undefined);
    t.is(view.status, action === 'pause' ? 'paused' : 'archived');
  },
  title: (_, action, first) => `race: ${action} against a Member's completion, ${first} first`,
});

for (const action of ['pause', 'archive'] as const) for (const first of ['completion', 'fence'] as const) test(completionVersusLifecycle, action, first);

test('race: a pause and a reassign of the same running task at once — one fences it, the other is refused or skips; every receipt settles, one writer', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), APPROVE], work: { a: 'gate' } });
  await h.gate('a').arrived;
  const [paused, reassigned] = await Promise.all([
    settle(h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'hold' })),
    settle(h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move' })),
  ]);
  t.true(paused.ok, JSON.stringify(paused));
  const receipts = (await h.until('receipts settled', (v) => v.receipts.length > 0 && v.receipts.every((r) => r.state === 'released'))).receipts;
  // Exactly one fence of the one execution.
  t.is(receipts.length, 1, JSON.stringify(receipts));
  if (reassigned.ok) t.is(receipts[0].kind, 'reassign');
  else {
    t.is(reassigned.code, 'task_not_in_progress');
    t.is(receipts[0].kind, 'pause');
  }
  const view = await h.status();
  t.false(
    view.executions.some((e) => e.state === 'running'),
    'nothing starts while paused',
  );
  t.is(view.status, 'paused');
});

/**
 * A user's cancel of the running task and a pause or archive of the team at once: one of them fences the execution
 * (one receipt), the other skips it or is refused typed; every receipt settles; the cancel, when it was accepted,
 * stands (the task is not pending again after a resume); nothing is certified.
 */
const cancelVersusLifecycle = test.macro({
  async exec(t, action: 'pause' | 'archive') {
    const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), APPROVE], work: { a: 'gate' }, handoff: { sloMs: 30_000, timeoutMs: 60_000 } });
    await h.gate('a').arrived;
    const [life, cancelled] = await Promise.all([
      settle(h.orchard.client.teamLifecycle(h.teamId, action, { reason: 'stop' })),
      settle(h.orchard.client.cancelTask(h.teamId, { taskId: 'a', reason: 'not needed' })),
    ]);
    t.true(life.ok, JSON.stringify(life));
    if (!cancelled.ok)
      t.true(['team_archived', 'task_not_in_progress', 'task_not_found', 'team_not_running'].includes(cancelled.code), JSON.stringify(cancelled));
    const view =
      action === 'archive'
        ? ((await h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).result()) as TeamStatusView)
        : await h.until('every receipt settled', (v) => v.receipts.length > 0 && v.receipts.every((r) => r.state === 'released'));
    t.is(view.receipts.length, 1, JSON.stringify(view.receipts));
    t.true(view.receipts.every((r) => r.state === 'released'));
    t.is(view.certificate, undefined);
    const task = (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a')!;
    if (action === 'archive') t.is(task.status, 'cancelled');
    else {
      // Paused: the cancel, if accepted, removed the task; otherwise it waits pending for its owner.
      t.is(task.status, cancelled.ok ? 'cancelled' : 'pending');
      await h.orchard.client.teamLifecycle(h.teamId, 'resume', { reason: 'go on' });
      if (cancelled.ok) {
        await new Promise((r) => setTimeout(r, PAUSE_QUIET_MS));
        t.false(
          (await h.status()).executions.some((e) => e.taskId === 'a' && e.state === 'running'),
          'a cancelled task never runs again',
        );
      } else await h.until('a runs again', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'running'));
    }
  },
  title: (_, action) => `race: ${action} against a user's cancel of the running task — one fence, every receipt settled, the cancel stands`,
});
for (const action of ['pause', 'archive'] as const) test(cancelVersusLifecycle, action);

/**
 * The Coordinator's org_run_complete and a user's pause or archive at once (the user acts the moment the
 * Coordinator's completion request reaches the model): either the run is delivered and the user is refused
 * `run_delivered`, or the user's action holds and no certificate is ever issued — never both.
 */
const completeVersusLifecycle = test.macro({
  async exec(t, action: 'pause' | 'archive', when: 'as it is asked' | 'while it certifies') {
    // `while it certifies`: the completion runs a slow verify command, and the user acts while it runs.
    const inFlight = when === 'while it certifies';
    const h = await startScriptedTeam(t, {
      plan: [create('a', 'implementer'), APPROVE],
      ...(inFlight ? { verify: { command: 'sleep 4' } } : {}),
    });
    await h.until('ready', (v) => v.candidate === 'ready');
    let life: Promise<Settled<unknown>> | undefined;
    void settle(
      h.script([['org_run_complete', { summary: 'done' }]], {
        before: async () => {
          const act = () => {
            life = settle(h.orchard.client.teamLifecycle(h.teamId, action, { reason: 'stop' }));
          };
          if (inFlight) setTimeout(act, 1500);
          else act();
        },
      }),
    );
    await h.until('the completion was asked for', () => life !== undefined);
    const user = await life!;
    t.log(`the user's ${action}: ${user.ok ? 'accepted' : user.code}`);
    const certificates = await h.certificates();
    if (user.ok) {
      t.is(certificates.length, 0, 'the user stopped the run: nothing may be certified');
      const view =
        action === 'archive'
          ? ((await h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).result()) as TeamStatusView)
          : await h.until('paused', (v) => v.status === 'paused');
      t.is(view.certificate, undefined);
      t.is((await h.certificates()).length, 0);
      // Still nothing after the Coordinator's turn had time to go on (a paused turn's tool calls are refused).
      await new Promise((r) => setTimeout(r, PAUSE_QUIET_MS));
      t.is((await h.certificates()).length, 0);
    } else {
      t.is(user.code, 'run_delivered', JSON.stringify(user));
      t.is(certificates.length, 1);
      t.is((await h.until('delivered', (v) => v.outcome === 'delivered')).status, 'delivered');
    }
  },
  title: (_, action, when) => `race: ${action} against the Coordinator's org_run_complete ${when} — delivered and refused, or stopped and never certified`,
});
for (const action of ['pause', 'archive'] as const)
  for (const when of ['as it is asked', 'while it certifies'] as const) test(completeVersusLifecycle, action, when);
