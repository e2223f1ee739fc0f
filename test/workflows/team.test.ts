import { readdirSync } from 'node:fs';
import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { readBoard } from '../../activities/store/team';
import { teamWorkflowId } from '../../contract/messages';
import { calls, final, gate, lastUserText } from '../helpers/fleet-model';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { git, keepHistory, makeRepo, startOrchard, uniqueId } from '../helpers/orchard';
import { activityTypes, untilTeam } from '../helpers/team';
import { CLOSURE_VALIDATOR_VERSION } from '../../workflows/team/closure';
import { memberSessionId } from '../../contract/member-session';
import { TOOL_PROFILES } from '../../workflows/tools';

/**
 * Team runs against the real dev server and Postgres, the model played over HTTP: Coordinator requests (they offer
 * `task_list`) are answered by the test's `coordinator`, from the request alone; member requests by `member`.
 */
const isCoordinatorRequest = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');

interface TeamCtx {
  /** The last user message of the request (the goal, a user message or the events that woke the Coordinator). */
  text: string;
  /** Tool results since that message. */
  results: string[];
  body: any;
}

async function startTeam(
  t: import('ava').ExecutionContext,
  coordinator: (ctx: TeamCtx) => Reply | Promise<Reply>,
  member: (body: any) => Reply | Promise<Reply> = (body) => completion({ content: `done: ${lastUserText(body).slice(0, 60)}` }),
) {
  const stub = await stubModel(t, (body) => {
    if (!isCoordinatorRequest(body)) return member(body);
    const messages: any[] = body.messages;
    const lastUser = messages.map((m) => m.role).lastIndexOf('user');
    const results = messages
      .slice(lastUser + 1)
      .filter((m) => m.role === 'tool')
      .map((m) => String(m.content));
    return coordinator({ text: String(messages[lastUser].content), results, body });
  });
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const teamId = uniqueId('team');
  const repo = makeRepo();
  return { stub, orchard, teamId, repo, coordinatorRequests: () => stub.requests.map((r) => r.body).filter(isCoordinatorRequest) };
}

const until = untilTeam;

/** A Coordinator that plans two tasks on the goal, approves, and on every wake reads the board once and ends. */
const planner = (ctx: TeamCtx): Reply => {
  if (ctx.text.startsWith('Build')) {
    if (ctx.results.length === 0) {
      return calls(
        ['task_create', { taskId: 'implement', title: 'Implement the evaluator', description: 'Write evaluator.js', owner: 'implementer' }],
        ['task_create', { taskId: 'test', title: 'Test the evaluator', description: 'Write evaluator.test.js', owner: 'tester' }],
        ['plan_approve', {}],
      );
    }
    return final('Plan approved.');
  }
  if (ctx.results.length === 0) return calls(['task_list', {}]);
  return final('Noted.');
};

test('a team plans, dispatches to its members, and records their evidence; the Coordinator wakes only on their facts', async (t) => {
  const { orchard, teamId, repo, coordinatorRequests } = await startTeam(t, planner);
  await orchard.client.startTeam({ teamId, repo, goal: 'Build a poker hand evaluator with tests' });
  const done = await until(orchard, teamId, 'both tasks completed', (v) => v.executions.length === 2 && v.executions.every((e) => e.state === 'completed'));
  t.deepEqual(done.executions.map((e) => [e.taskId, e.memberId, e.sessionId]).sort(), [
    ['implement', 'implementer', memberSessionId(teamId, 'implementer')],
    ['test', 'tester', memberSessionId(teamId, 'tester')],
  ]);
  const board = await readBoard(orchard.pool, teamId);
  t.deepEqual(board.tasks.map((task) => [task.taskId, task.status]).sort(), [
    ['implement', 'completed'],
    ['test', 'completed'],
  ]);
  // The evidence is attributed to each member's execution, never to the Coordinator.
  const facts = (await orchard.pool.query(`SELECT kind, task_id, actor FROM team_facts WHERE team_id = $1 ORDER BY revision`, [teamId])).rows;
  for (const e of done.executions) {
    t.truthy(facts.find((f) => f.kind === 'task_output' && f.task_id === e.taskId && f.actor === `member:${e.memberId}:${e.executionId}`));
  }
  t.false(facts.some((f) => f.kind === 'task_output' && String(f.actor).startsWith('coordinator')));
  // The plan's approval is a fact of the Coordinator's turn, committed before any task started.
  const approvals = facts.filter((f) => f.kind === 'plan_approved');
  t.is(approvals.length, 1);
  t.regex(approvals[0].actor, /^coordinator:/);
  t.true(facts.indexOf(approvals[0]) < facts.findIndex((f) => f.kind === 'task_started'));
  // Each member worked in its own session (own worktree).
  const sessions = await Promise.all(done.executions.map((e) => orchard.client.status(e.sessionId)));
  t.is(new Set(sessions.map((s) => s.worktree)).size, 2);
  // The Coordinator's turns: the goal, then wakes that each carried a member's fact; no turn without a cause.
  const settled = await until(orchard, teamId, 'the Coordinator idle', (v) => v.status === 'waiting_for_org_event' && v.turns.length >= 2);
  const wakes = coordinatorRequests()
    .filter((b) => b.messages.at(-1).role === 'user')
    .map((b) => String(b.messages.at(-1).content));
  t.true(wakes[0].startsWith('Build a poker hand evaluator'));
  t.true(
    wakes.slice(1).every((w) => /^Work facts changed \(revision \d+\):\n- task (implement|test) completed by (implementer|tester)/.test(w)),
    JSON.stringify(wakes),
  );
  t.true(settled.turns.length <= 3, 'two completions wake the Coordinator at most twice');
  t.truthy(git(repo, 'rev-parse', 'main'));
});

test('while a member works, the Coordinator makes no model call, no store query and starts no timer', async (t) => {
  const hold = gate();
  const { orchard, teamId, repo, coordinatorRequests } = await startTeam(t, planner, async (body) => {
    if (lastUserText(body).includes('evaluator.js')) await hold.promise;
    return completion({ content: 'done' });
  });
  await orchard.client.startTeam({
    teamId,
    repo,
    goal: 'Build a poker hand evaluator with tests',
    members: [
      { memberId: 'implementer', role: 'Implementer' },
      { memberId: 'tester', role: 'Tester' },
    ],
  });
  // The tester finishes; the implementer is held.
  await until(
    orchard,
    teamId,
    'the tester done and the Coordinator idle',
    (v) => v.executions.some((e) => e.taskId === 'test' && e.state === 'completed') && v.status === 'waiting_for_org_event',
  );
  const handle = orchard.temporal.workflow.getHandle(teamWorkflowId(teamId));
  const before = (await handle.fetchHistory()).events!.length;
  const requestsBefore = coordinatorRequests().length;
  // The member works for a while (configurable; short here).
  const workMs = Number(process.env.ORCHARD_TEST_MEMBER_WORK_MS ?? 3000);
  await new Promise((r) => setTimeout(r, workMs));
  const quiet = (await handle.fetchHistory()).events!;
  t.is(quiet.length, before, 'no event at all: no activity (no store query), no timer, no workflow task');
  t.is(coordinatorRequests().length, requestsBefore, 'no model call');
  t.false(
    quiet.some((e) => e.timerStartedEventAttributes),
    'no timer ever',
  );
  hold.open();
  await until(orchard, teamId, 'the implementer done', (v) => v.executions.every((e) => e.state === 'completed') && v.status === 'waiting_for_org_event');
  t.true(coordinatorRequests().length > requestsBefore, 'its fact woke the Coordinator');
});

/**
 * Every tool of the system that is not the Coordinator's — read from the tool profiles every agent is offered, so
 * a tool added to any profile joins this matrix — and some tools that exist nowhere (sleeping, awaiting output,
 * messaging oneself: what a polling Coordinator would reach for).
 */
const SYSTEM_TOOLS = [...new Set(Object.values(TOOL_PROFILES).flatMap((profile) => profile.map((tool) => tool.name)))];
const EVERY_TOOL = [
  ...SYSTEM_TOOLS.filter((name) => !TOOL_PROFILES.coordinator.some((tool) => tool.name === name)),
  'sleep',
  'await_output',
  'delegate',
  'send_message_to_self',
  'org_send_message_to_self',
];

test('the Coordinator allowlist: only its tools are offered; every other tool of the system is refused and changes nothing, also after a worker restart', async (t) => {
  let round = 0;
  const coordinator = (ctx: TeamCtx): Reply => {
    if (ctx.results.length > 0) return final('done');
    round += 1;
    return calls(
      ...EVERY_TOOL.map((name): [string, unknown] => [
        name,
        name === 'bash' ? { command: 'echo owned > pwned.txt && git commit -qam x' } : name === 'write_file' ? { path: 'pwned.txt', content: 'x' } : {},
      ]),
      ['task_list', {}],
      ['task_list', {}],
    );
  };
  const { orchard, teamId, repo, coordinatorRequests } = await startTeam(t, coordinator);
  await orchard.client.startTeam({ teamId, repo, goal: 'Try everything', members: [{ memberId: 'implementer', role: 'Implementer' }] });
  const first = await until(orchard, teamId, 'the first turn', (v) => v.turns.length >= 1 && v.status === 'waiting_for_org_event');
  const offered = coordinatorRequests()[0].tools.map((tool: any) => tool.function.name);
  t.deepEqual(offered, [
    'task_list',
    'task_get',
    'task_create',
    'task_assign',
    'task_update',
    'plan_approve',
    'org_send_message',
    'user_reply',
    'org_run_complete',
  ]);
  t.deepEqual(
    first.refusals.slice(0, EVERY_TOOL.length),
    EVERY_TOOL.map((tool) => ({ tool, code: 'tool_not_allowed' })),
  );
  // The second read of the same revision is refused without a board query.
  t.deepEqual(first.refusals.at(-1), { tool: 'task_list', code: 'coordinator_no_new_work_facts' });
  t.is(first.turns[0].outcome, 'waiting_for_org_event');
  // The only fact is the team's activation (revision 1), committed before the turn.
  const facts = async () => (await orchard.pool.query('SELECT kind FROM team_facts WHERE team_id = $1 ORDER BY revision', [teamId])).rows.map((r) => r.kind);
  t.deepEqual(await facts(), ['activated'], 'no fact was committed by the turn');
  t.is((await readBoard(orchard.pool, teamId)).workRevision, 1);
  t.false(readdirSync(repo).includes('pwned.txt'));

  await orchard.restartWorkers();
  await orchard.client.teamMessage(teamId, { text: 'again, please' });
  const second = await until(orchard, teamId, 'the second turn', (v) => v.turns.length >= 2 && v.status === 'waiting_for_org_event');
  t.is(round, 2);
  // The same refusals after the restart; this time both reads are refused: the board is still at the revision read in turn 1.
  t.deepEqual(second.refusals.slice(-(EVERY_TOOL.length + 2)), [
    ...EVERY_TOOL.map((tool) => ({ tool, code: 'tool_not_allowed' })),
    ...[1, 2].map(() => ({ tool: 'task_list', code: 'coordinator_no_new_work_facts' })),
  ]);
  t.deepEqual(await facts(), ['activated']);
  // Only the first read queried the board: every refusal (an unknown tool, a re-read) ran no Coordinator tool.
  const events = (await orchard.temporal.workflow.getHandle(teamWorkflowId(teamId)).fetchHistory()).events ?? [];
  t.is([...activityTypes(events).values()].filter((type) => type === 'coordinatorTool').length, 1);
  t.false(readdirSync(repo).includes('pwned.txt'));
  t.is(git(repo, 'status', '--porcelain'), '');
});

test('a closed board steers the Coordinator to completion; one certificate, idempotent, cited in the summary', async (t) => {
  const coordinator = (ctx: TeamCtx): Reply => {
    if (ctx.text.includes('completion_candidate.state is ready') || ctx.text === 'certify again') {
      if (ctx.results.length === 0) return calls(['org_run_complete', { summary: 'Evaluator and tests delivered.' }]);
      const cert = /certificate (cert-\S+)/.exec(ctx.results[0])?.[1];
      return final(cert ? `Delivered, certificate ${cert}.` : `Not delivered: ${ctx.results[0]}`);
    }
    return planner(ctx);
  };
  const { orchard, teamId, repo, coordinatorRequests } = await startTeam(t, coordinator);
  await orchard.client.startTeam({ teamId, repo, goal: 'Build a poker hand evaluator with tests' });
  const delivered = await until(orchard, teamId, 'delivered', (v) => v.status === 'delivered');
  t.is(delivered.candidate, 'certified');
  t.deepEqual([...delivered.certificate!.taskIds], ['implement', 'test']);
  t.is(delivered.certificate!.outputIds.length, 2);
  // The wake that carried "ready" was answered with org_run_complete as the first call: no task_list first.
  const readyRequest = coordinatorRequests().find((b) => String(b.messages.at(-1).content).includes('completion_candidate.state is ready'));
  t.truthy(readyRequest);
  const after = coordinatorRequests().find((b) => b.messages.some((m: any) => m.role === 'tool' && String(m.content).startsWith('delivered: certificate')));
  const firstCall = after.messages.filter((m: any) => m.role === 'assistant' && m.tool_calls).at(-1).tool_calls[0].function.name;
  t.is(firstCall, 'org_run_complete');
  // The final summary cites the certificate; the turn ended after it.
  const last = delivered.turns.at(-1)!;
  t.is(last.outcome, 'finished');
  t.is(last.finalExcerpt, `Delivered, certificate ${delivered.certificate!.certificateId}.`);
  t.deepEqual(delivered.summary, { certificateId: delivered.certificate!.certificateId, turn: last.turn, text: last.finalExcerpt });
  const rows = async () => (await orchard.pool.query('SELECT certificate FROM team_certificates WHERE team_id = $1', [teamId])).rows;
  t.is((await rows()).length, 1);
  t.like((await rows())[0].certificate, {
    outcome: 'delivered',
    validatorVersion: CLOSURE_VALIDATOR_VERSION,
    generation: 1,
    workRevision: delivered.certificate!.workRevision,
  });
  // Asking again gets the same certificate back: one per generation and revision.
  await orchard.client.teamMessage(teamId, { text: 'certify again' });
  const again = await until(orchard, teamId, 'the second request answered', (v) => v.turns.length > delivered.turns.length && v.status === 'delivered');
  t.is(again.turns.at(-1)!.finalExcerpt, `Delivered, certificate ${delivered.certificate!.certificateId}.`);
  t.is((await rows()).length, 1);
  await keepHistory(orchard, `team/${teamId}`, 'team-certified');
});

test('a run whose work failed is never delivered: the completion request is refused with the reasons, and no certificate exists', async (t) => {
  const coordinator = (ctx: TeamCtx): Reply => {
    if (ctx.text === 'complete now') {
      if (ctx.results.length === 0) return calls(['org_run_complete', { summary: 'done?' }]);
      return final(ctx.results[0]);
    }
    if (ctx.text.startsWith('Build')) {
      return ctx.results.length === 0
        ? calls(['task_create', { taskId: 'implement', title: 'Implement', description: 'Write evaluator.js', owner: 'implementer' }], ['plan_approve', {}])
        : final('ok');
    }
    return final('noted');
  };
  // The member's model refuses every request: its turn fails, and so does the task.
  const { orchard, teamId, repo } = await startTeam(t, coordinator, () => ({ status: 400, body: { error: { message: 'bad request' } } }));
  await orchard.client.startTeam({ teamId, repo, goal: 'Build it', members: [{ memberId: 'implementer', role: 'Implementer' }] });
  await until(orchard, teamId, 'the task failed', (v) => v.executions.some((e) => e.state === 'failed') && v.status === 'waiting_for_org_event');
  await orchard.client.teamMessage(teamId, { text: 'complete now' });
  const refused = await until(orchard, teamId, 'the completion answered', (v) =>
    v.turns.some((turn) => turn.finalExcerpt?.startsWith('error (completion_refused)')),
  );
  t.regex(refused.turns.at(-1)!.finalExcerpt!, /the run is not_delivered: .*all_failed/);
  t.not(refused.status, 'delivered');
  t.is(refused.certificate, undefined);
  t.is((await orchard.pool.query('SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1', [teamId])).rows[0].n, 0);
});
