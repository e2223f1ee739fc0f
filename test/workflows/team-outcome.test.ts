import test from 'ava';
import { readBoard } from '../../activities/store/team';
import { teamWorkflowId } from '../../contract/messages';
import { ORCHARD_STATUS } from '../../contract/search-attributes';
import { lastUserText } from '../helpers/fleet-model';
import { startScriptedTeam, type Call, type TeamHarness } from '../helpers/team';
import { waitFor } from '../helpers/wait';

/**
 * Issue 22, deliverable 2: a team run's outcome (`running | needs_attention | delivered | cancelled | failed`),
 * derived from board, receipts and certificate, and shown by the status query and the `OrchardStatus` search
 * attribute; a failed task's reason (its typed code and message) on the board, in the Coordinator's wake and in
 * the status. Real stack: dev server, Postgres, sessions; the model played over HTTP.
 */
const create = (taskId: string, owner: string, extra: Record<string, string> = {}): Call => [
  'task_create',
  { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner, ...extra },
];
const APPROVE: Call = ['plan_approve', {}];

async function searchStatus(h: TeamHarness): Promise<unknown> {
  const described = await h.orchard.temporal.workflow.getHandle(teamWorkflowId(h.teamId)).describe();
  return described.typedSearchAttributes.get(ORCHARD_STATUS);
}

test("a failed task carries its reason to the board, the Coordinator's wake and the status; the run needs attention until the Coordinator replaces it, then delivers", async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), APPROVE], work: { a: 'fail' } });
  const failed = await h.until('task a failed', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'failed'));
  const failure = failed.executions.find((e) => e.taskId === 'a')!.failure;
  t.truthy(failure, JSON.stringify(failed.executions));
  t.regex(failure!.code, /^[a-z_]+$/);
  t.not(failure!.message, '');
  // The board holds the same reason.
  const task = (await readBoard(h.orchard.pool, h.teamId)).tasks.find((x) => x.taskId === 'a')!;
  t.is(task.status, 'failed');
  t.deepEqual(task.failure, failure);

  // Nobody replaced it and nothing else can move: a person is needed, and every surface says so.
  const attention = await h.until('needs attention', (v) => v.outcome === 'needs_attention');
  t.is(attention.status, 'waiting_for_org_event');
  t.true(
    attention.outcomeBecause.some((b) => b.includes('task a')),
    attention.outcomeBecause.join('; '),
  );
  t.is(await waitFor(async () => ((await searchStatus(h)) === 'needs_attention' ? 'needs_attention' : undefined), 30_000, 'OrchardStatus'), 'needs_attention');
  // The Coordinator was woken with the reason (what the model was sent).
  const wakes = h.stub.requests.map((r) => lastUserText(r.body)).filter((text) => text.includes('task a failed by implementer'));
  t.true(
    wakes.some((text) => text.includes(`(${failure!.code}:`)),
    wakes.join('\n---\n'),
  );

  // Only failed work is replaced: a replacement of a task that did not fail is refused, nothing created.
  const [refusedReplace] = await h.script([create('x', 'reviewer', { replaces: 'nope' })]);
  t.regex(refusedReplace, /^error \(task_not_found\)/);
  // The Coordinator replaces the failed task: the run is running again, then the replacement completes.
  const [created] = await h.script([create('a2', 'implementer', { replaces: 'a' })]);
  t.regex(created, /^created task a2/);
  await h.until('a2 completed', (v) => v.executions.some((e) => e.taskId === 'a2' && e.state === 'completed'));
  const after = await h.until('running again', (v) => v.outcome === 'running' && v.status === 'waiting_for_org_event');
  t.deepEqual(after.outcomeBecause, []);
  const [notAgain] = await h.script([create('a3', 'implementer', { replaces: 'a2' })]);
  t.regex(notAgain, /^error \(task_not_replaceable\)/);
  const [done] = await h.script([['org_run_complete', { summary: 'all done' }]]);
  t.regex(done, /cert/);
  const delivered = await h.until('delivered', (v) => v.outcome === 'delivered');
  t.truthy(delivered.certificate);
  t.is(await waitFor(async () => ((await searchStatus(h)) === 'delivered' ? 'delivered' : undefined), 30_000, 'OrchardStatus delivered'), 'delivered');
});

test("cancelled is the user's word: every task removed by the user reads cancelled, in the status and OrchardStatus", async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), create('b', 'reviewer')] });
  t.is((await h.status()).outcome, 'running');
  await h.orchard.client.cancelTask(h.teamId, { taskId: 'a', reason: 'not needed' });
  // One task left in scope: still running.
  t.is((await h.status()).outcome, 'running');
  await h.orchard.client.cancelTask(h.teamId, { taskId: 'b', reason: 'not needed either' });
  const cancelled = await h.until('cancelled', (v) => v.outcome === 'cancelled');
  t.is(cancelled.certificate, undefined);
  t.is(await waitFor(async () => ((await searchStatus(h)) === 'cancelled' ? 'cancelled' : undefined), 30_000, 'OrchardStatus cancelled'), 'cancelled');
});
