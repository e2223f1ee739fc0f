import test from 'ava';
import { readBoard } from '../../activities/store/team';
import { memberSessionId } from '../../contract/member-session';
import { gate } from '../helpers/fleet-model';
import { waitFor } from '../helpers/wait';
import { activityTypes, startScriptedTeam, type Call } from '../helpers/team';

const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const APPROVE: Call = ['plan_approve', {}];

/**
 * A fenced owner stays busy from the moment its fence commits until its handoff is released: its next pending task
 * waits, and never goes into the session the handoff is cancelling (runs before 'team-handoff-yield-at-fence' recorded
 * the receipt only after the execution workflow's cancel had come back, and in that window the owner looked free).
 *
 * The window is a round trip through the server, too short to hit by timing. It is made certain instead: the fence's
 * answer and another handoff's release (which makes the run dispatch) reach the run's history while no worker takes
 * its workflow tasks, so the next worker finds both in one workflow task, the fence's first. The run dispatches in
 * that task, after the fence's state change, before anything else comes back.
 */
test("a fenced owner's next task waits for the release and runs in the owner's new session, not the one being cancelled", async (t) => {
  const fenceHeld = gate();
  const fenceGo = gate();
  const releaseHeld = gate();
  const releaseGo = gate();
  let releases = 0;
  const h = await startScriptedTeam(t, {
    members: ['implementer', 'reviewer', 'tester'],
    plan: [create('a1', 'implementer'), create('d1', 'tester'), APPROVE],
    work: { a1: 'gate', d1: 'gate' },
    // Generous: the workers stop for a while in the middle of both handoffs; this test is about order, not speed.
    handoff: { sloMs: 120_000, timeoutMs: 240_000 },
    teamHooks: {
      beforeFence: async (input) => {
        if (input.oldTaskId !== 'a1') return;
        fenceHeld.open();
        await fenceGo.promise;
      },
      beforeMoveReceipt: async (input) => {
        if (input.to !== 'released' || releases++ > 0) return;
        releaseHeld.open();
        await releaseGo.promise;
      },
    },
  });
  await h.gate('a1').arrived;
  await h.gate('d1').arrived;
  // The implementer's second task: pending while a1 runs.
  await h.script([create('a2', 'implementer')]);
  const implementer = memberSessionId(h.teamId, 'implementer');
  const oldChain = (await h.orchard.client.status(implementer)).executionId;
  t.truthy(oldChain);
  t.false((await h.status()).executions.some((e) => e.taskId === 'a2'));

  // Handoff X (d1 → reviewer) runs up to its release, which is held; the Coordinator has heard of it and waits.
  const turnsBefore = (await h.status()).turns.length;
  await h.orchard.client.reassignTask(h.teamId, { taskId: 'd1', newOwner: 'reviewer', reason: 'the reviewer takes it' });
  await releaseHeld.promise;
  await h.until('the Coordinator idle', (v) => v.status === 'waiting_for_org_event' && v.turns.length > turnsBefore);

  // Handoff Y (a1 → tester): its fence is held, then answered while the workers are stopped, and X's release after it.
  const reassigned = h.orchard.client.reassignTask(h.teamId, { taskId: 'a1', newOwner: 'tester', reason: 'the tester takes it' });
  reassigned.catch(() => undefined);
  await fenceHeld.promise;
  const completed = async (type: string) => {
    const events = await h.history();
    const types = activityTypes(events);
    return events.filter((e) => types.get(String(e.activityTaskCompletedEventAttributes?.scheduledEventId)) === type).length;
  };
  await h.orchard.restartWorkers(async () => {
    const fences = await completed('fenceHandoff');
    fenceGo.open();
    await waitFor(async () => (await completed('fenceHandoff')) > fences, 60_000, "the fence's answer in history");
    // X's release is written by its yield (a moveReceipt of the team's own in runs before 'team-handoff-moves-in-yield').
    const releases = async () => (await completed('moveReceipt')) + (await completed('yieldExecution'));
    const moves = await releases();
    releaseGo.open();
    await waitFor(async () => (await releases()) > moves, 60_000, "X's release in history");
  });
  t.like(await reassigned, { oldTaskId: 'a1', newTaskId: 'a1-r2', state: 'requested' });

  const settled = await h.until('a2 settled', (v) => v.executions.some((e) => e.taskId === 'a2' && ['completed', 'failed'].includes(e.state)));
  // Dispatched once, after the release, and done: no execution ended on a closed session.
  const a2 = settled.executions.filter((e) => e.taskId === 'a2');
  t.is(a2.length, 1);
  t.is(a2[0].state, 'completed', JSON.stringify(a2[0]));
  t.false(
    settled.executions.some((e) => e.failure?.code === 'session_closed'),
    JSON.stringify(settled.executions),
  );
  const facts = (
    await h.orchard.pool.query<{ revision: string; kind: string; task_id: string }>(
      `SELECT revision, kind, task_id FROM team_facts WHERE team_id = $1 AND task_id IN ('a1', 'a2') ORDER BY revision`,
      [h.teamId],
    )
  ).rows;
  const at = (kind: string, taskId: string) => facts.filter((f) => f.kind === kind && f.task_id === taskId).map((f) => Number(f.revision));
  t.is(at('task_started', 'a2').length, 1);
  t.is(at('handoff_released', 'a1').length, 1);
  t.true(at('task_started', 'a2')[0] > at('handoff_released', 'a1')[0], JSON.stringify(facts));
  t.deepEqual(at('task_failed', 'a2'), []);
  const board = await readBoard(h.orchard.pool, h.teamId);
  t.like(
    board.tasks.find((task) => task.taskId === 'a2'),
    { status: 'completed', owner: 'implementer' },
  );
  // In the implementer's new session: the old chain was closed by the handoff, a new one ran a2 to its end.
  const session = await h.orchard.client.status(implementer);
  t.not(session.executionId, oldChain);
  t.like(
    session.recentTasks?.find((task) => task.taskId === a2[0].sessionTaskId),
    { state: 'done' },
  );
});
