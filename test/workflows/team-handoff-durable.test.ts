import test from 'ava';
import { orchardFailure } from '../../contract/failures';
import { teamWorkflowId } from '../../contract/messages';
import { keepHistory } from '../helpers/orchard';
import { activityTypes, startScriptedTeam, type Call } from '../helpers/team';

/**
 * A handoff's driver cannot wedge its team (issue 18, deliverable 3): a write that fails for good settles the receipt
 * `unknown` — queries keep answering and a user can resolve it — and its clocks start when the user's request is
 * accepted, not once the fence and its writes are done.
 */
const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const APPROVE: Call = ['plan_approve', {}];

test('a receipt write that fails for good settles the handoff unknown; the team answers and the user releases it', async (t) => {
  let failures = 0;
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 20_000, timeoutMs: 40_000 },
    teamHooks: {
      // Both writes of `yielding` fail: the yield's own (left to the team) and then the team's (its driver's).
      beforeMoveReceipt: async (input) => {
        if (input.to === 'yielding' && failures++ < 2) throw orchardFailure('store_unavailable', 'the receipt row could not be written (test)');
      },
    },
  });
  await h.writing('a', 'implementer');
  const receipt = await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it', requestId: 'r-1' });
  const settled = await h.until('the receipt settled unknown', (v) => v.receipts[0]?.state === 'unknown');
  t.deepEqual(settled.receipts[0].trail, ['requested', 'unknown']);
  t.is(failures, 2);
  // The run is healthy: it answers queries and runs its workflow tasks (no failed workflow task in its history).
  const history = await h.history();
  t.false(
    history.some((e) => e.workflowTaskFailedEventAttributes),
    'no workflow task failed',
  );
  t.is((await h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).describe()).status.name, 'RUNNING');
  // The old execution had already been asked to stop: its session closes. The user's release, with that proof, frees the
  // replacement; a retry of the same request is answered the same, not refused.
  // (A refused release is an answer too: each attempt gets a request id of its own.)
  const resolve = (requestId: string) =>
    h.orchard.client.resolveHandoff(h.teamId, { receiptId: receipt.receiptId, action: 'release', reason: 'checked', requestId });
  let released: { answer: Awaited<ReturnType<typeof resolve>>; requestId: string } | undefined;
  for (let i = 0; i < 600 && !released; i++) {
    const requestId = `release-${i}`;
    released = await resolve(requestId).then(
      (answer) => ({ answer, requestId }),
      () => undefined,
    );
    if (!released) await new Promise((r) => setTimeout(r, 100));
  }
  t.like(released?.answer, { state: 'released', resolution: 'release' });
  t.like(await resolve(released!.requestId), { receiptId: receipt.receiptId, state: 'released', resolution: 'release' });
  await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === receipt.newTaskId && e.state === 'completed'));
  t.is((await h.status()).receipts.length, 1);
  await keepHistory(h.orchard, teamWorkflowId(h.teamId), 'team-handoff-write-failed');
});

test('the handoff clocks start when the request is accepted, before the fence is written', async (t) => {
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 30_000, timeoutMs: 60_000 },
  });
  await h.writing('a', 'implementer');
  await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
  await h.until('released', (v) => v.receipts[0]?.state === 'released');
  const history = await h.history();
  const types = activityTypes(history);
  const fenceAt = history.findIndex((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'fenceHandoff');
  const timersAt = history.flatMap((e, i) => (e.timerStartedEventAttributes ? [i] : []));
  t.true(fenceAt > 0, 'the fence was scheduled');
  t.is(timersAt.length, 2, 'the SLO and timeout timers');
  t.true(
    timersAt.every((i) => i < fenceAt),
    `timers at ${timersAt}, fence at ${fenceAt}`,
  );
  t.true(types.size > 0);
});

test('a team terminated from outside while a Member works: its task execution ends (team_closed), it does not wait for ever', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), APPROVE], work: { a: 'gate' } });
  await h.gate('a').arrived;
  const running = await h.until('the execution running', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'running'));
  const execution = running.executions.find((e) => e.taskId === 'a')!;
  await h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).terminate('gone (test)');
  const handle = h.orchard.temporal.workflow.getHandle(execution.workflowId!);
  const result = await handle.result();
  t.like(result, { taskId: 'a', state: 'team_closed' });
  t.is((await handle.describe()).status.name, 'COMPLETED');
  h.gate('a').open();
  await keepHistory(h.orchard, execution.workflowId!, 'team-execution-team-closed');
});

test('a handoff whose old runtime is on a host that cannot be reached settles unknown, not timeout', async (t) => {
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), APPROVE],
    work: { a: 'write' },
    handoff: { sloMs: 300, timeoutMs: 1_500 },
  });
  await h.writing('a', 'implementer');
  // The old runtime cannot be proven stopped (a process group not verified gone)…
  const stuck = await h.stick('implementer');
  // …and its host's worker last reported an hour ago: whether anything of it still runs, nobody can tell.
  await h.orchard.pool.query(
    `INSERT INTO worker_hosts (host_id, instance_id, hostname, boot_id, pid_namespace, pid, state, heartbeat_at)
     VALUES ($1, 'gone', 'elsewhere', 'boot', 'pidns', 1, 'running', now() - interval '1 hour')`,
    [h.orchard.hostId],
  );
  t.teardown(() => h.orchard.pool.query(`DELETE FROM worker_hosts WHERE host_id = $1`, [h.orchard.hostId]));
  const receipt = await h.orchard.client.reassignTask(h.teamId, { taskId: 'a', newOwner: 'reviewer', reason: 'move it' });
  const settled = await h.until('the receipt settled', (v) => !['requested', 'yielding'].includes(v.receipts[0]?.state));
  t.like(settled.receipts[0], { receiptId: receipt.receiptId, state: 'unknown' });
  const rows = await h.orchard.pool.query(`SELECT state FROM team_handoff_receipts WHERE receipt_id = $1`, [receipt.receiptId]);
  t.is(rows.rows[0].state, 'unknown');
  await stuck.unstick();
});
