import test, { type ExecutionContext } from 'ava';
import type { TeamActivityHooks } from '../../activities/team';
import { readBoard } from '../../activities/store/team';
import { memberSessionId } from '../../contract/member-session';
import { gate } from '../helpers/fleet-model';
import { startScriptedTeam, type Call, type Work } from '../helpers/team';

const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const APPROVE: Call = ['plan_approve', {}];

/**
 * A pause, archive or reassign may meet an execution the run has started whose dispatch has not yet marked its task in
 * progress, or has marked it and not yet handed it to the Member's session. Either way the task is frozen by the
 * fence and never runs afterwards: a fence on a task still pending for that execution commits (and the execution's
 * start is refused), and a fence meeting a dispatch in flight waits for it to hand the task over, then stops the
 * session it went to. The windows are held open by hooks, so each order is certain.
 */

/** A hook that holds the dispatch of `taskId` (once) until the test opens it. */
function holdOnce(taskId: string) {
  const arrived = gate();
  const go = gate();
  let held = false;
  return {
    arrived: arrived.promise,
    open: go.open,
    hook: async (input: { taskId: string }) => {
      if (input.taskId !== taskId || held) return;
      held = true;
      arrived.open();
      await go.promise;
    },
  };
}

/** One implementer with task a1 (doing `work`), the plan approved; `dispatched` opens once a1's first dispatch has ended. */
async function teamWithA1(t: ExecutionContext, work: Work, hooks: TeamActivityHooks) {
  const dispatched = gate();
  const h = await startScriptedTeam(t, {
    members: ['implementer'],
    plan: [create('a1', 'implementer'), APPROVE],
    work: { a1: work },
    teamHooks: {
      ...hooks,
      afterDispatch: async (input) => {
        if (input.taskId === 'a1') dispatched.open();
      },
    },
  });
  return { h, dispatched: dispatched.promise };
}

test('a pause before the dispatch marks its task in progress: the task stays pending, starts nowhere, and runs after the resume', async (t) => {
  const start = holdOnce('a1');
  const { h, dispatched } = await teamWithA1(t, 'finish', { beforeStartTask: start.hook });
  await start.arrived;
  const paused = await h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'hold on', requestId: 'p1' });
  t.deepEqual(
    paused.receipts.map((r) => [r.kind, r.oldTaskId]),
    [['pause', 'a1']],
  );
  // The held dispatch goes on now: its start is refused, nothing reaches the Member.
  start.open();
  await dispatched;
  t.is((await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a1')?.status, 'pending');
  await h.until('the pause released', (v) => v.receipts.every((r) => r.state === 'released'));
  const implementer = memberSessionId(h.teamId, 'implementer');
  t.is(await h.count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'task_started'`, [h.teamId]), 0);
  t.is(await h.count(`SELECT count(*) AS n FROM transcript_entries WHERE session_id = $1`, [implementer]), 0);

  await h.orchard.client.teamLifecycle(h.teamId, 'resume', { reason: 'go on', requestId: 'r1' });
  const done = await h.until('a1 completed', (v) => v.executions.some((e) => e.taskId === 'a1' && e.state === 'completed'));
  t.deepEqual(
    done.executions.map((e) => [e.taskId, e.state]),
    [
      ['a1', 'paused'],
      ['a1', 'completed'],
    ],
  );
});

test('an archive before the dispatch marks its task in progress: the task ends cancelled, not in progress', async (t) => {
  const start = holdOnce('a1');
  const board = holdOnce('*');
  const { h, dispatched } = await teamWithA1(t, 'gate', {
    beforeStartTask: start.hook,
    // The archive's fences are done and its board write waits: the held start goes first.
    beforeArchiveBoard: () => board.hook({ taskId: '*' }),
  });
  await start.arrived;
  const archived = h.orchard.client.teamLifecycle(h.teamId, 'archive', { reason: 'abandon', requestId: 'a1' });
  archived.catch(() => undefined);
  await board.arrived;
  start.open();
  await dispatched;
  board.open();
  const answer = await archived;
  t.is(answer.state, 'archived');
  t.true(answer.receipts.some((r) => r.kind === 'archive' && r.oldTaskId === 'a1') || (answer.cancelledTasks ?? []).includes('a1'), JSON.stringify(answer));
  t.is((await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a1')?.status, 'cancelled');
  t.is(await h.count(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'task_started'`, [h.teamId]), 0);
  const final = await h.until('the run ended', (v) => v.status === 'archived' && v.receipts.every((r) => r.state === 'released'));
  t.is(final.outcome, 'cancelled');
});

test('a pause while the dispatch hands its task to the session: the fence waits for it, and the session it went to is stopped', async (t) => {
  const creating = holdOnce('a1');
  const fencing = gate();
  const { h, dispatched } = await teamWithA1(t, 'gate', {
    beforeCreateSession: creating.hook,
    beforeFence: async (input) => {
      if (input.oldTaskId === 'a1') fencing.open();
    },
  });
  await creating.arrived;
  const paused = h.orchard.client.teamLifecycle(h.teamId, 'pause', { reason: 'hold on', requestId: 'p1' });
  paused.catch(() => undefined);
  await fencing.promise;
  // Time for a fence that would not wait to commit, and for its yield to find no session and release.
  await new Promise((r) => setTimeout(r, 1_000));
  creating.open();
  await dispatched;
  t.deepEqual(
    (await paused).receipts.map((r) => [r.kind, r.oldTaskId]),
    [['pause', 'a1']],
  );
  await h.until('the pause released', (v) => v.receipts.every((r) => r.state === 'released'));
  const session = await h.orchard.client.status(memberSessionId(h.teamId, 'implementer'));
  t.is(session.status, 'closed', JSON.stringify(session));
  t.is((await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a1')?.status, 'pending');

  await h.orchard.client.teamLifecycle(h.teamId, 'resume', { reason: 'go on', requestId: 'r1' });
  h.gate('a1').open();
  await h.until('a1 completed', (v) => v.executions.some((e) => e.taskId === 'a1' && e.state === 'completed'));
});
