import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { closureInputOf, readBoard } from '../../activities/store/team';
import { validateClosure } from '../../workflows/team/closure';
import { memberSessionId } from '../../contract/member-session';
import { calls, final, lastUserText } from '../helpers/fleet-model';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { keepHistory, makeRepo, startOrchard, uniqueId, type TestOrchard } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';
import { untilTeam } from '../helpers/team';

/**
 * A user's `cancelTask` (issue 9): the task leaves the run's scope citing a user event, so the closure counts it
 * as `user_scope_removed`. Running work is fenced and stopped exactly like a reassign, with a receipt and no
 * replacement; waiting work is cancelled in one transaction and never starts. Real sessions, bash and Postgres.
 */
const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const agentOf = (body: any) => /^You are (\S+),/.exec(String(body.messages[0].content))?.[1];
const afterTool = (body: any) => body.messages.at(-1).role === 'tool';

function model(body: any): Reply {
  if (isCoordinator(body)) {
    if (afterTool(body)) return final('ok');
    const text = lastUserText(body);
    if (text.startsWith('Build')) {
      return calls(
        ['task_create', { taskId: 'write', title: 'Write', description: 'write the log', owner: 'implementer' }],
        ['task_create', { taskId: 'check', title: 'Check', description: 'check the log', owner: 'reviewer' }],
      );
    }
    if (text.startsWith('approve')) return calls(['plan_approve', {}]);
    return final('ok');
  }
  if (afterTool(body)) return completion({ content: 'done' });
  const bash = (command: string) => calls(['bash', { command }]);
  if (agentOf(body) === 'implementer') return bash('for i in $(seq 1 200); do date +%s%N >> old.log; sleep 0.05; done');
  return bash('date +%s%N >> check.log');
}

async function team(t: ExecutionContext) {
  const stub = await stubModel(t, model);
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }) });
  const teamId = uniqueId('team');
  await orchard.client.startTeam({
    teamId,
    repo: makeRepo(),
    goal: 'Build a log',
    members: [
      { memberId: 'implementer', role: 'Implementer' },
      { memberId: 'reviewer', role: 'Reviewer' },
    ],
    handoff: { sloMs: 30_000, timeoutMs: 60_000 },
  });
  await until(orchard, teamId, 'the plan', (v) => v.turns.length >= 1 && v.status === 'waiting_for_org_event');
  return { orchard, teamId };
}

const until = untilTeam;

const lines = (path: string) => readFileSync(path, 'utf8').split('\n').filter(Boolean).length;
const historyLength = async (orchard: TestOrchard, teamId: string) =>
  (await orchard.temporal.workflow.getHandle(`team/${teamId}`).fetchHistory()).events!.length;

test('a waiting task cancelled by the user never starts; the closure counts it as user scope removed, citing the user event', async (t) => {
  const { orchard, teamId } = await team(t);
  const result = await orchard.client.cancelTask(teamId, { taskId: 'check', reason: 'no review this time' });
  t.like(result, { taskId: 'check', status: 'cancelled' });
  t.is(result.receipt, undefined);
  const board = await readBoard(orchard.pool, teamId);
  const check = board.tasks.find((task) => task.taskId === 'check')!;
  t.like(check, { status: 'cancelled', cancel: { by: 'user', kind: 'cancel', reason: 'no review this time' } });
  const event = (
    await orchard.pool.query(`SELECT kind, task_id FROM team_user_events WHERE team_id = $1 AND event_id = $2`, [teamId, check.cancel!.userEventId])
  ).rows;
  t.deepEqual(event, [{ kind: 'cancel', task_id: 'check' }]);
  t.is(result.workRevision, board.workRevision);

  // The plan is approved afterwards: the remaining task runs, the cancelled one never does.
  await orchard.client.teamMessage(teamId, { text: 'approve the plan' });
  await until(orchard, teamId, 'write completed', (v) => v.executions.some((e) => e.taskId === 'write' && e.state !== 'running'));
  const view = await orchard.client.teamStatus(teamId);
  t.deepEqual(
    view.executions.map((e) => e.taskId),
    ['write'],
  );
  // The execution was a workflow of its own, under the team, ended with the evidence it recorded.
  const execution = view.executions[0];
  t.is(execution.workflowId, `team/${teamId}/task/write/${execution.executionId}`);
  const handle = orchard.temporal.workflow.getHandle(execution.workflowId!);
  // The board records the execution's end before its workflow returns: its result first, then how it ended.
  t.like(await handle.result(), { executionId: execution.executionId, taskId: 'write', memberId: 'implementer', state: 'completed' });
  const described = await handle.describe();
  t.is(described.type, 'teamTaskExecution');
  t.is(described.status.name, 'COMPLETED');
  t.is(described.searchAttributes.OrchardKind?.[0], 'task_execution');
  t.is(described.searchAttributes.OrchardParent?.[0], `team/${teamId}`);
  const output = (await readBoard(orchard.pool, teamId)).outputs.find((o) => o.taskId === 'write');
  t.is(output?.outputId, `out-${execution.executionId}`);
  const closure = validateClosure(closureInputOf(await readBoard(orchard.pool, teamId), 0));
  t.is(closure.outcome, 'delivered');
  await keepHistory(orchard, execution.workflowId!, 'team-task-execution-completed');
  t.deepEqual(
    closure.evidence.resolutions.find((r) => r.taskId === 'check'),
    { taskId: 'check', kind: 'user_scope_removed', userEventId: check.cancel!.userEventId },
  );
});

test('running work cancelled by the user: fenced first, its execution stopped, a receipt to released and no replacement', async (t) => {
  const { orchard, teamId } = await team(t);
  await orchard.client.cancelTask(teamId, { taskId: 'check', reason: 'not needed' });
  await orchard.client.teamMessage(teamId, { text: 'approve the plan' });
  const session = memberSessionId(teamId, 'implementer');
  const oldLog = await waitFor(
    async () => {
      const s = await orchard.client.status(session).catch(() => undefined);
      const path = s?.worktree ? join(s.worktree, 'old.log') : undefined;
      return path && existsSync(path) && lines(path) > 3 ? path : undefined;
    },
    60_000,
    'the writer running',
  );

  const result = await orchard.client.cancelTask(teamId, { taskId: 'write', reason: 'scope cut' });
  t.like(result.receipt, { kind: 'cancel', oldTaskId: 'write', oldOwner: 'implementer', state: 'requested' });
  t.is(result.receipt!.newTaskId, undefined);
  // The fence committed before the answer: the task is frozen as the user's cancel.
  const fenced = await readBoard(orchard.pool, teamId);
  t.like(
    fenced.tasks.find((task) => task.taskId === 'write'),
    { status: 'cancelled', cancel: { by: 'user', kind: 'cancel' } },
  );

  const done = await until(orchard, teamId, 'the receipt released', (v) => v.receipts[0]?.state === 'released');
  t.deepEqual(done.receipts[0].trail, ['requested', 'yielding', 'released']);
  t.deepEqual(done.waiting, []);
  t.like(
    done.executions.find((e) => e.taskId === 'write'),
    { state: 'cancelled' },
  );
  // Its workflow was cancelled once the fence had committed; it recorded nothing.
  const cancelledExecution = done.executions.find((e) => e.taskId === 'write')!;
  t.is((await orchard.temporal.workflow.getHandle(cancelledExecution.workflowId!).describe()).status.name, 'CANCELLED');
  t.deepEqual((await readBoard(orchard.pool, teamId)).outputs, []);
  t.not((await orchard.temporal.workflow.getHandle(`session/${session}`).describe()).status.name, 'RUNNING');
  const count = lines(oldLog);
  t.true(count < 200, 'the writer was stopped');
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.is(lines(oldLog), count, 'and stays stopped');

  const board = await readBoard(orchard.pool, teamId);
  t.deepEqual(
    board.tasks.map((task) => [task.taskId, task.status]),
    [
      ['write', 'cancelled'],
      ['check', 'cancelled'],
    ],
  );
  t.deepEqual(board.handoffs, [{ oldTaskId: 'write', state: 'released' }]);
  // Everything was removed by the user: nothing to deliver.
  const closure = validateClosure(closureInputOf(board, 0));
  t.not(closure.outcome, 'delivered');
  await keepHistory(orchard, `team/${teamId}`, 'team-cancel-running');
  await keepHistory(orchard, cancelledExecution.workflowId!, 'team-task-execution-cancelled');
});

test('cancel refusals are typed and change nothing: bad input before history, an unknown task, finished work', async (t) => {
  const { orchard, teamId } = await team(t);
  const before = await readBoard(orchard.pool, teamId);
  const events = await historyLength(orchard, teamId);
  const bad = await t.throwsAsync(orchard.client.cancelTask(teamId, { taskId: 'check', reason: ' ' }));
  t.is((bad as any).code, 'invalid_input');
  t.is(await historyLength(orchard, teamId), events, 'the validator refused before history was written');
  const unknown = await t.throwsAsync(orchard.client.cancelTask(teamId, { taskId: 'nope', reason: 'x' }));
  t.is((unknown as any).code, 'task_not_found');
  t.is((await readBoard(orchard.pool, teamId)).workRevision, before.workRevision);

  await orchard.client.teamMessage(teamId, { text: 'approve the plan' });
  await until(orchard, teamId, 'check completed', (v) => v.executions.some((e) => e.taskId === 'check' && e.state === 'completed'));
  const revision = (await readBoard(orchard.pool, teamId)).workRevision;
  const finished = await t.throwsAsync(orchard.client.cancelTask(teamId, { taskId: 'check', reason: 'too late' }));
  t.is((finished as any).code, 'task_not_pending');
  const after = await readBoard(orchard.pool, teamId);
  t.like(
    after.tasks.find((task) => task.taskId === 'check'),
    { status: 'completed' },
  );
  t.is(after.workRevision, revision);
  t.is(Number((await orchard.pool.query(`SELECT count(*) AS n FROM team_user_events WHERE team_id = $1`, [teamId])).rows[0].n), 0);
});
