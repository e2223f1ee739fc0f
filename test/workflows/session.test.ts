import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { OrchardError } from '../../client/client';
import { sessionWorkflowId, type SendResult } from '../../contract/messages';
import { git, makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);
const DEMO = join(__dirname, '../../scenarios/demo.json');

async function historyLength(temporal: import('@temporalio/client').Client, sessionId: string): Promise<number> {
  const history = await temporal.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  return history.events?.length ?? 0;
}

test('a session works in its own worktree and a second send resumes the same session with its history', async (t) => {
  const orchard = shared();
  const repo = makeRepo();
  const sessionId = uniqueId('demo');
  await orchard.client.createSession({
    sessionId,
    title: 'notes and changelog',
    repo,
    model: { provider: 'scripted', scenario: DEMO },
    task: 'Create NOTES.md describing how this session works',
  });
  const first = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(first.status, 'idle');
  t.is(first.lastTurn?.outcome, 'finished');
  t.is(first.branch, `orchard/${sessionId}/work`);
  t.true(existsSync(join(first.worktree!, 'NOTES.md')));

  const sent = await orchard.client.send(sessionId, 'Add a CHANGELOG entry for the notes');
  t.false(sent.duplicate);
  const second = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  t.is(second.sessionId, sessionId);
  t.is(second.turnsCompleted, 2);
  t.is(second.lastTurn?.outcome, 'finished', JSON.stringify(second.lastTurn));

  // Both commits are on the session's branch; the main checkout did not move.
  const log = git(repo, 'log', '--format=%s', `orchard/${sessionId}/work`).split('\n');
  t.deepEqual(log.slice(0, 2), ['docs: add CHANGELOG.md referencing NOTES.md', 'docs: add NOTES.md (orchard demo)']);
  t.is(git(repo, 'rev-parse', '--abbrev-ref', 'HEAD'), 'main');
  t.is(git(repo, 'log', '--format=%s', 'main'), 'initial');
  t.false(existsSync(join(repo, 'NOTES.md')));
  t.regex(readFileSync(join(second.worktree!, 'CHANGELOG.md'), 'utf8'), /NOTES\.md/);

  // The second turn's model request carried the first turn: the transcript in Postgres holds both, in order.
  const { rows } = await orchard.pool.query(`SELECT turn, role FROM transcript_entries WHERE session_id = $1 ORDER BY turn, step, ordinal`, [sessionId]);
  t.deepEqual([...new Set(rows.map((r) => r.turn))], [1, 2]);
  const usage = await orchard.pool.query(`SELECT count(*)::int AS n, sum(total_tokens)::int AS tokens FROM model_calls WHERE session_id = $1`, [sessionId]);
  t.is(usage.rows[0].n, 8);
  t.true(usage.rows[0].tokens > 0);
  // Exactly one session workflow exists for this id.
  const refs = await orchard.client.transcriptRefs(sessionId);
  t.deepEqual(
    refs.turns.map((r) => r.taskId),
    ['t1', 't2'],
  );
});

test('send with an empty task is refused by the validator and writes nothing to history', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('empty');
  await orchard.client.createSession({ sessionId, title: 'idle', repo: makeRepo(), model: { provider: 'scripted', scenario: DEMO } });
  await orchard.client.waitUntilSettled(sessionId);
  const before = await historyLength(orchard.temporal, sessionId);
  // Bypass the client's own check to prove the workflow's validator refuses it too.
  const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  const err = await t.throwsAsync(handle.executeUpdate('send', { args: [{ task: '   ' }] }));
  t.is((err as { cause?: { type?: string } }).cause?.type, 'task_empty');
  const viaClient = await t.throwsAsync(orchard.client.send(sessionId, ''), { instanceOf: OrchardError });
  t.is((viaClient as OrchardError).code, 'task_empty');
  t.is(await historyLength(orchard.temporal, sessionId), before);
  t.is((await orchard.client.status(sessionId)).queued, 0);
});

test('send to an unknown session id fails loudly and creates nothing', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('nobody');
  const err = await t.throwsAsync(orchard.client.send(sessionId, 'do something'), { instanceOf: OrchardError });
  t.is((err as OrchardError).code, 'session_not_found');
  await t.throwsAsync(orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe());
});

test('a cancelled session refuses sends with session_closed', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('closed');
  await orchard.client.createSession({ sessionId, title: 'to cancel', repo: makeRepo(), model: { provider: 'scripted', scenario: DEMO } });
  await orchard.client.waitUntilSettled(sessionId);
  const view = await orchard.client.cancel(sessionId, 'no longer needed');
  t.is(view.status, 'closed');
  const err = await t.throwsAsync(orchard.client.send(sessionId, 'more work'), { instanceOf: OrchardError });
  t.is((err as OrchardError).code, 'session_closed');
  const again = await t.throwsAsync(orchard.client.cancel(sessionId), { instanceOf: OrchardError });
  t.is((again as OrchardError).code, 'session_closed');
});

test('creating a running session again binds to it: no second agent, the task is routed to it', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('twice');
  const scenario = writeScenario({
    name: 'two-tasks',
    turns: [1, 2].map((n) => ({ steps: [{ content: `done ${n}` }] })),
  });
  const input = { sessionId, title: 'once', repo: makeRepo(), model: { provider: 'scripted' as const, scenario } };
  // Two concurrent starts of one session: exactly one workflow (and so one lease holder); the other binds.
  const [a, b] = await Promise.all([orchard.client.createSession(input), orchard.client.createSession(input)]);
  t.deepEqual([a.outcome, b.outcome].sort(), ['bound', 'created']);
  const again = await orchard.client.createSession({ ...input, task: 'routed, not created' });
  t.is(again.outcome, 'bound');
  t.regex(again.message, /no second agent/);
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.turnsCompleted, 1);
  // One execution chain: the current run is the first run of the id.
  const description = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
  t.is(description.raw.workflowExecutionInfo?.firstRunId, description.runId);
  const { rows } = await orchard.pool.query(`SELECT holder, generation FROM worktree_leases WHERE worktree LIKE $1`, [`%/${sessionId}`]);
  t.is(rows.length, 1);
  t.is(Number(rows[0].generation), 1);
});

test('a repeated requestId is acknowledged once and queued once; a signal send queues a task', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('dedupe');
  const scenario = writeScenario({
    name: 'echo',
    turns: [1, 2].map((n) => ({ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: `echo turn ${n}` } }] }, { content: `done ${n}` }] })),
  });
  await orchard.client.createSession({ sessionId, title: 'dedupe', repo: makeRepo(), model: { provider: 'scripted', scenario } });
  const a = await orchard.client.send(sessionId, { task: 'first', requestId: 'req-1' });
  t.false(a.duplicate);
  // The same call again (a client's retry after a lost answer): the same task, and it says it is a duplicate.
  const again = await orchard.client.send(sessionId, { task: 'first', requestId: 'req-1' });
  t.is(again.taskId, a.taskId);
  t.true(again.duplicate, JSON.stringify(again));
  // A different Temporal update id, the same request id: the session's own dedupe window answers.
  const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  const b: SendResult = await handle.executeUpdate('send', { args: [{ task: 'first', requestId: 'req-1' }], updateId: 'other' });
  t.is(b.taskId, a.taskId);
  t.true(b.duplicate);
  await orchard.client.signalSend(sessionId, { task: 'first', requestId: 'req-1' });
  await orchard.client.signalSend(sessionId, { task: 'second, by signal' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  t.is(view.turnsCompleted, 2);
  const refs = await orchard.client.transcriptRefs(sessionId);
  t.deepEqual(
    refs.turns.map((r) => r.outcome),
    ['finished', 'finished'],
  );
});

test('continue-as-new at the turn bound keeps a send queued at that moment', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('can');
  const scenario = writeScenario({
    name: 'slow-then-fast',
    turns: [
      { steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'sleep 1; echo slow' } }] }, { content: 'first done' }] },
      { expect: { historyIncludes: ['first done'] }, steps: [{ content: 'second done' }] },
    ],
  });
  await orchard.client.createSession({
    sessionId,
    title: 'continue-as-new',
    repo: makeRepo(),
    model: { provider: 'scripted', scenario },
    limits: { turnsPerRun: 1 },
    task: 'first task',
  });
  // Queued while the first turn runs: it must survive the continue-as-new that follows that turn.
  const queued = await orchard.client.send(sessionId, 'second task');
  t.is(queued.position, 1);
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  // A session that closed (e.g. its setup failed) says why in the assertion, not only "0 turns".
  t.is(view.turnsCompleted, 2, JSON.stringify({ status: view.status, closedAs: view.closedAs, error: view.error, lastTurn: view.lastTurn }));
  t.true(view.runIndex >= 1, `runIndex ${view.runIndex}`);
  t.is(view.lastTurn?.finalExcerpt, 'second done');
  const description = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
  t.is(description.status.name, 'RUNNING');
});

test('a turn that keeps calling tools ends at the step limit and the session stays usable', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('steps');
  const scenario = writeScenario({
    name: 'loop',
    turns: [{ steps: [{ tool_calls: [{ name: 'git_status' }], repeat: true }] }, { steps: [{ content: 'ok' }] }],
  });
  await orchard.client.createSession({
    sessionId,
    title: 'loop',
    repo: makeRepo(),
    model: { provider: 'scripted', scenario },
    limits: { maxStepsPerTurn: 3 },
    task: 'loop forever',
  });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'step_limit');
  t.is(view.lastTurn?.steps, 3);
  t.is(view.lastTurn?.toolCalls, 3);
  await orchard.client.send(sessionId, 'now finish');
  const next = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  t.is(next.lastTurn?.outcome, 'finished');
});

test('a worktree that cannot be created fails the session with a typed error', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('norepo');
  await orchard.client.createSession({ sessionId, title: 'no repo', repo: '/nonexistent/repo', model: { provider: 'scripted', scenario: DEMO } });
  const view = await orchard.client.waitUntilSettled(sessionId);
  t.is(view.status, 'closed');
  t.is(view.error?.code, 'repository_not_found');
  const err = await t.throwsAsync(orchard.client.send(sessionId, 'anything'), { instanceOf: OrchardError });
  t.is((err as OrchardError).code, 'session_closed');
});

test('a tool the profile does not offer is refused as a result and runs nothing', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('unknown-tool');
  const scenario = writeScenario({
    name: 'bad-tool',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              { name: 'delete_everything', arguments: {} },
              { name: 'bash', arguments: '{not json' },
            ],
          },
          { content: 'ok' },
        ],
      },
    ],
  });
  await orchard.client.createSession({ sessionId, title: 'bad tool', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'x' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'finished');
  const { rows } = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool' ORDER BY step, ordinal`, [
    sessionId,
  ]);
  t.regex(rows[0].content, /tool_unknown/);
  t.regex(rows[1].content, /tool_args_invalid/);
});
