import test from 'ava';
import type { Pool } from 'pg';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { createTask, createTeamRun, postInboxMessage, readBoard, readInbox, startTask, TeamStoreRefusal } from '../../activities/store/team';
import { OrchardError } from '../../client/client';
import { sessionWorkflowId, teamWorkflowId, type TeamStatusView } from '../../contract/messages';
import { MEMBER_MESSAGE_PURPOSES, type Actor } from '../../workflows/team/authority';
import { memberSessionId } from '../../contract/member-session';
import { calls, final, gate, lastUserText } from '../helpers/fleet-model';
import { stubModel, type Reply } from '../helpers/model-stub';
import { makeRepo, startOrchard, testPool, uniqueId, type TestOrchard } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';
import { TEAM_WAIT_MS, untilTeam } from '../helpers/team';

/**
 * A team Member's `org_send_message` (issue 9, deliverable 7; invariant 16) against the real dev server, Postgres,
 * git and bash, the model played over HTTP. Coordinator requests (they offer `task_list`) are answered by a
 * scripted Coordinator; every other request by the Members' script below, which decides from the request alone.
 */
const isCoordinatorRequest = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const toolNames = (body: any): string[] => (body.tools ?? []).map((tool: any) => tool.function.name);
/** Tool results since the last user message of a request, oldest first. */
const resultsOf = (body: any): string[] => {
  const messages: any[] = body.messages;
  const lastUser = messages.map((m) => m.role).lastIndexOf('user');
  return messages
    .slice(lastUser + 1)
    .filter((m) => m.role === 'tool')
    .map((m) => String(m.content));
};

const MESSAGE = 'The evaluator spec contradicts itself on ace-low straights: which one wins?';

/** Each refused message: its arguments and the code the Member's tool result must carry. */
const REFUSED: [string, Record<string, unknown>, string][] = [
  ['no related task', { purpose: 'blocker', text: 'help' }, 'related_task_required'],
  ['an unknown task', { related_task_id: 'nope', purpose: 'blocker', text: 'help' }, 'related_task_unknown'],
  ["another member's task (in progress)", { related_task_id: 'review', purpose: 'blocker', text: 'help' }, 'related_task_not_current'],
  ['its own task not in progress (pending)', { related_task_id: 'later', purpose: 'blocker', text: 'help' }, 'related_task_not_current'],
  ['its own completed task', { related_task_id: 'warmup', purpose: 'risk', text: 'help' }, 'related_task_not_current'],
  ['an unknown purpose', { related_task_id: 'work', purpose: 'chitchat', text: 'help' }, 'message_purpose_invalid'],
  ['no purpose', { related_task_id: 'work', text: 'help' }, 'message_purpose_invalid'],
  ['no text', { related_task_id: 'work', purpose: 'blocker', text: '' }, 'tool_args_invalid'],
];

const factSignals = async (orchard: TestOrchard, workflowId: string) =>
  ((await orchard.temporal.workflow.getHandle(workflowId).fetchHistory()).events ?? []).filter(
    (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'fact',
  ).length;
const inboxRows = async (pool: Pool, teamId: string) =>
  (await pool.query('SELECT message_id, from_member, related_task_id, purpose, text, read_revision FROM team_inbox WHERE team_id = $1', [teamId])).rows;

test('a Member messages its Coordinator: each refusal is typed, writes nothing and wakes nothing; the accepted message is one Inbox row and one wake that carries it', async (t) => {
  const reviewHeld = gate();
  const workStart = gate();
  const sendGood = gate();
  const finishWork = gate();
  const refusalsSeen = gate();
  const acceptedSeen = gate();
  const memberBodies: { sessionTask: string; body: any }[] = [];

  const member = async (body: any): Promise<Reply> => {
    const task = lastUserText(body);
    memberBodies.push({ sessionTask: task, body });
    const results = resultsOf(body);
    if (task.startsWith('Task review')) {
      await reviewHeld.promise;
      return final('reviewed');
    }
    if (task.startsWith('Task work')) {
      if (results.length === 0) {
        await workStart.promise;
        return calls(...REFUSED.map(([, args]): [string, unknown] => ['org_send_message', args]));
      }
      if (results.length === REFUSED.length) {
        refusalsSeen.open();
        await sendGood.promise;
        return calls(['org_send_message', { related_task_id: 'work', purpose: 'decision_required', text: MESSAGE }]);
      }
      acceptedSeen.open();
      await finishWork.promise;
      return final('work done');
    }
    // A plain child tries the Member's tool anyway.
    if (task.startsWith('Plain task'))
      return results.length === 0 ? calls(['org_send_message', { related_task_id: 'work', purpose: 'blocker', text: 'let me in' }]) : final('ok');
    return final(`done: ${task.slice(0, 40)}`);
  };
  const coordinator = (body: any): Reply => {
    const messages: any[] = body.messages;
    const text = String(messages[messages.map((m) => m.role).lastIndexOf('user')].content);
    const results = resultsOf(body);
    if (text.startsWith('Build')) {
      if (results.length > 0) return final('Plan approved.');
      return calls(
        ['task_create', { taskId: 'warmup', title: 'Warm up', description: 'Read the repo', owner: 'implementer' }],
        ['task_create', { taskId: 'work', title: 'Implement', description: 'Write evaluator.js', owner: 'implementer' }],
        ['task_create', { taskId: 'later', title: 'Polish', description: 'Later', owner: 'implementer' }],
        ['task_create', { taskId: 'review', title: 'Review', description: 'Review the repo', owner: 'reviewer' }],
        ['plan_approve', {}],
      );
    }
    // Every wake: read the board (and the Inbox) once, then end the turn.
    return results.length === 0 ? calls(['task_list', {}]) : final('Noted.');
  };
  const stub = await stubModel(t, (body) => (isCoordinatorRequest(body) ? coordinator(body) : member(body)));
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 60_000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  t.teardown(() => {
    for (const g of [reviewHeld, workStart, sendGood, finishWork]) g.open();
  });
  const teamId = uniqueId('team');
  const repo = makeRepo();
  const coordinatorRequests = () => stub.requests.map((r) => r.body).filter(isCoordinatorRequest);
  const wakes = () =>
    coordinatorRequests()
      .filter((b) => b.messages.at(-1).role === 'user')
      .map((b) => String(b.messages.at(-1).content));
  const status = () => orchard.client.teamStatus(teamId);
  const until = (what: string, probe: (v: TeamStatusView) => boolean) => untilTeam(orchard, teamId, what, probe);

  await orchard.client.startTeam({
    teamId,
    repo,
    goal: 'Build a poker hand evaluator',
    members: [
      { memberId: 'implementer', role: 'Implementer' },
      { memberId: 'reviewer', role: 'Reviewer' },
    ],
  });
  // warmup done, work running (the implementer's second execution), review held in progress, later pending.
  const settled = await until(
    'work running and the Coordinator idle',
    (v) => v.status === 'waiting_for_org_event' && v.turns.length >= 2 && v.executions.some((e) => e.taskId === 'work' && e.state === 'running'),
  );
  const board = await readBoard(orchard.pool, teamId);
  t.deepEqual(board.tasks.map((task) => [task.taskId, task.owner, task.status]).sort(), [
    ['later', 'implementer', 'pending'],
    ['review', 'reviewer', 'in_progress'],
    ['warmup', 'implementer', 'completed'],
    ['work', 'implementer', 'in_progress'],
  ]);
  const teamWorkflow = teamWorkflowId(teamId);
  const memberWorkflow = sessionWorkflowId(memberSessionId(teamId, 'implementer'));
  const revisionBefore = board.workRevision;
  const turnsBefore = settled.turns.length;
  const requestsBefore = coordinatorRequests().length;
  t.is(await factSignals(orchard, teamWorkflow), 0);

  // The tool schema as the model received it: a Member is offered org_send_message (its purposes are the ones the Inbox accepts).
  const memberTools = memberBodies.find((m) => m.sessionTask.startsWith('Task work'))!.body.tools;
  const sendTool = memberTools.find((tool: any) => tool.function.name === 'org_send_message');
  t.truthy(sendTool, JSON.stringify(memberTools.map((tool: any) => tool.function.name)));
  t.deepEqual([...sendTool.function.parameters.required].sort(), ['purpose', 'related_task_id', 'text']);
  t.deepEqual(sendTool.function.parameters.properties.purpose.enum, [...MEMBER_MESSAGE_PURPOSES]);
  t.deepEqual(
    toolNames({ tools: memberTools }).filter((name) => name !== 'org_send_message'),
    ['bash', 'read_file', 'write_file', 'git_status', 'git_diff', 'git_commit'],
  );

  // Every bad message: refused with its code, as the Member's tool result.
  workStart.open();
  await refusalsSeen.promise;
  const afterRefusals = memberBodies.filter((m) => m.sessionTask.startsWith('Task work')).at(-1)!.body;
  const refusedResults = resultsOf(afterRefusals);
  t.is(refusedResults.length, REFUSED.length);
  for (const [i, [what, , code]] of REFUSED.entries()) t.true(refusedResults[i].startsWith(`error (${code}):`), `${what}: ${refusedResults[i]}`);
  // Nothing written, nothing woken: no Inbox row, the same work revision, no signal to the team, no Coordinator turn.
  t.deepEqual(await inboxRows(orchard.pool, teamId), []);
  t.is((await readBoard(orchard.pool, teamId)).workRevision, revisionBefore);
  t.is(await factSignals(orchard, teamWorkflow), 0, 'no wake was sent');
  await new Promise((r) => setTimeout(r, 1000));
  const quiet = await status();
  t.is(quiet.workRevision, settled.workRevision, "the team's revision did not move");
  t.is(quiet.turns.length, turnsBefore);
  t.is(quiet.status, 'waiting_for_org_event');
  t.is(coordinatorRequests().length, requestsBefore, 'no Coordinator model call');

  // The good message: one row attributed to the Member and its current execution, one signal, one wake carrying it.
  sendGood.open();
  await acceptedSeen.promise;
  const afterGood = memberBodies.filter((m) => m.sessionTask.startsWith('Task work')).at(-1)!.body;
  t.is(resultsOf(afterGood).length, REFUSED.length + 1);
  t.regex(resultsOf(afterGood).at(-1)!, /^sent to your Coordinator as message /);
  const execution = settled.executions.find((e) => e.taskId === 'work')!;
  const rows = await inboxRows(orchard.pool, teamId);
  t.is(rows.length, 1);
  t.like(rows[0], { from_member: 'implementer', related_task_id: 'work', purpose: 'decision_required', text: MESSAGE });
  const facts = (
    await orchard.pool.query(`SELECT revision, kind, actor, detail FROM team_facts WHERE team_id = $1 AND revision > $2 ORDER BY revision`, [
      teamId,
      revisionBefore,
    ])
  ).rows;
  t.is(facts.length, 1);
  t.like(facts[0], { kind: 'inbox_message', actor: `member:implementer:${execution.executionId}`, revision: String(revisionBefore + 1) });
  const started = (
    await orchard.pool.query(`SELECT detail->>'executionId' AS e FROM team_facts WHERE team_id = $1 AND task_id = 'work' AND kind = 'task_started'`, [teamId])
  ).rows;
  t.deepEqual(
    started.map((r) => r.e),
    [execution.executionId],
    'the execution the board recorded for the task',
  );

  const woken = await until('the wake answered', (v) => v.turns.length === turnsBefore + 1 && v.status === 'waiting_for_org_event');
  t.is(await factSignals(orchard, teamWorkflow), 1);
  t.is(woken.workRevision, revisionBefore + 1);
  const carrying = wakes().filter((w) => w.includes(MESSAGE));
  t.is(carrying.length, 1, JSON.stringify(wakes()));
  t.true(carrying[0].includes(`from implementer about task work (decision_required)`), carrying[0]);
  // The Coordinator read it: its task_list result (as sent to the model) holds the message, and the row is read.
  const read = coordinatorRequests()
    .flatMap((b) => resultsOf(b))
    .map((content) => {
      try {
        return JSON.parse(content);
      } catch {
        return undefined;
      }
    })
    .find((r) => Array.isArray(r?.inbox) && r.inbox.length > 0);
  t.like(read?.inbox?.[0], { from: 'implementer', relatedTaskId: 'work', purpose: 'decision_required', text: MESSAGE });
  t.is(read?.inboxUnread, 0);
  t.not((await inboxRows(orchard.pool, teamId))[0].read_revision, null);

  // The Member's session signalled its team once, and only for the accepted message.
  const memberHistory = (await orchard.temporal.workflow.getHandle(memberWorkflow).fetchHistory()).events ?? [];
  t.is(memberHistory.filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === 'fact').length, 1);

  // The work ends (the implementer's second execution settles): its completion wakes the Coordinator again, without the message.
  finishWork.open();
  reviewHeld.open();
  await until(
    'work and review completed',
    (v) => v.executions.filter((e) => ['work', 'review'].includes(e.taskId)).every((e) => e.state === 'completed') && v.status === 'waiting_for_org_event',
  );
  t.is(wakes().filter((w) => w.includes(MESSAGE)).length, 1, 'the message woke the Coordinator exactly once');
  t.is(await factSignals(orchard, teamWorkflow), 1);

  // A plain child (no team) is not offered the tool, and cannot run it.
  const plainId = uniqueId('plain');
  await orchard.client.createSession({ sessionId: plainId, title: 'plain child', repo, isolated: true, task: 'Plain task: say hi' });
  const plain = await waitFor(() => memberBodies.find((m) => m.sessionTask.startsWith('Plain task'))?.body, TEAM_WAIT_MS, 'the plain child asked its model');
  t.deepEqual(toolNames(plain), ['bash', 'read_file', 'write_file', 'git_status', 'git_diff', 'git_commit']);
  const plainAfter = await waitFor(
    () => memberBodies.find((m) => m.sessionTask.startsWith('Plain task') && resultsOf(m.body).length > 0)?.body,
    TEAM_WAIT_MS,
    'the plain child saw its result',
  );
  t.regex(resultsOf(plainAfter)[0], /^error \(tool_unknown\):/);
  t.is((await inboxRows(orchard.pool, teamId)).length, 1);
  t.is(await factSignals(orchard, teamWorkflow), 1);
});

test('a Member whose team no longer runs (terminated from outside while the Member works) is refused team_not_running: no Inbox row, no revision, no wake', async (t) => {
  const asked = gate();
  const send = gate();
  const answered = gate();
  let refusedWith: string | undefined;
  const stub = await stubModel(t, async (body): Promise<Reply> => {
    if (isCoordinatorRequest(body)) {
      const results = resultsOf(body);
      if (lastUserText(body).startsWith('Build') && results.length === 0) {
        return calls(['task_create', { taskId: 'work', title: 'Implement', description: 'Write evaluator.js', owner: 'implementer' }], ['plan_approve', {}]);
      }
      return final('ok');
    }
    const results = resultsOf(body);
    if (results.length === 0) {
      asked.open();
      await send.promise;
      return calls(['org_send_message', { related_task_id: 'work', purpose: 'blocker', text: MESSAGE }]);
    }
    refusedWith = results[0];
    answered.open();
    return final('stopping');
  });
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 60_000 }) });
  t.teardown(() => send.open());
  const teamId = uniqueId('team');
  await orchard.client.startTeam({
    teamId,
    repo: makeRepo(),
    goal: 'Build a poker hand evaluator',
    members: [{ memberId: 'implementer', role: 'Implementer' }],
  });
  // The Member is working on its task (its model request is held), and the board says the task runs.
  await asked.promise;
  const before = await waitFor(
    async () => {
      const board = await readBoard(orchard.pool, teamId);
      return board.tasks.find((task) => task.taskId === 'work')?.status === 'in_progress' ? board : undefined;
    },
    TEAM_WAIT_MS,
    'work in progress on the board',
  );

  // The team run is terminated from outside; its Member's session runs on (the board still says the task runs).
  await orchard.temporal.workflow.getHandle(teamWorkflowId(teamId)).terminate('an operator stopped the team');
  const memberWorkflow = sessionWorkflowId(memberSessionId(teamId, 'implementer'));
  t.is((await orchard.temporal.workflow.getHandle(memberWorkflow).describe()).status.name, 'RUNNING');
  send.open();
  await answered.promise;
  t.regex(refusedWith!, /^error \(team_not_running\):/);
  t.deepEqual(await inboxRows(orchard.pool, teamId), []);
  t.is((await readBoard(orchard.pool, teamId)).workRevision, before.workRevision);
  const memberHistory = (await orchard.temporal.workflow.getHandle(memberWorkflow).fetchHistory()).events ?? [];
  t.is(memberHistory.filter((e) => e.signalExternalWorkflowExecutionInitiatedEventAttributes?.signalName === 'fact').length, 0, 'no wake was sent');
});

test("a session claims team membership only as <teamId>__<memberId> (or a pre-encoding team's <teamId>-<memberId>): anything else is refused before it starts", async (t) => {
  const orchard = await startOrchard(t);
  const repo = makeRepo();
  const sessionId = uniqueId('impostor');
  for (const team of [{ teamId: 'some-team', memberId: 'implementer' }, { teamId: 'x' }, 'some-team']) {
    const err = await t.throwsAsync(orchard.client.createSession({ sessionId, title: 'impostor', repo, team: team as any }), { instanceOf: OrchardError });
    t.is(err?.code, 'invalid_input', err?.message);
  }
  await t.throwsAsync(orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe(), { message: /not found/i });
});

test('the Inbox rule at the store: the message is attributed to the execution the task runs as now; a retry is one row; a read is up to a revision', async (t) => {
  const pool = await testPool(t);
  const teamId = uniqueId('team');
  await createTeamRun(pool, {
    teamId,
    repo: '/srv/repo',
    goal: 'g',
    members: [{ memberId: 'implementer', role: 'Implementer', sessionId: memberSessionId(teamId, 'implementer') }],
  });
  const coordinator: Actor = { kind: 'coordinator', turnId: 'turn-1' };
  await createTask(pool, teamId, coordinator, { taskId: 'work', title: 'work', owner: 'implementer' });
  await startTask(pool, teamId, 'work', 'exec-2');
  const revision = async () => (await readBoard(pool, teamId)).workRevision;
  const before = await revision();
  // A stale execution of the Member (not the one the task runs as) is refused.
  const stale: Actor = { kind: 'member', memberId: 'implementer', executionId: 'exec-1' };
  const err = await t.throwsAsync(postInboxMessage(pool, teamId, stale, { messageId: 'm0', relatedTaskId: 'work', purpose: 'risk', text: 'late' }), {
    instanceOf: TeamStoreRefusal,
  });
  t.is(err?.code, 'related_task_not_current');
  t.is(await revision(), before);
  const current: Actor = { kind: 'member', memberId: 'implementer', executionId: 'exec-2' };
  const first = await postInboxMessage(pool, teamId, current, { messageId: 'm1', relatedTaskId: 'work', purpose: 'risk', text: 'careful' });
  t.is(first.result.revision, before + 1);
  const again = await postInboxMessage(pool, teamId, current, { messageId: 'm1', relatedTaskId: 'work', purpose: 'risk', text: 'careful' });
  t.deepEqual([again.result.revision, again.revision], [before + 1, before + 1], 'a retry finds the accepted message and its revision');
  t.is(await revision(), before + 1);
  // A read as of the revision before the second message leaves that one unread.
  const second = await postInboxMessage(pool, teamId, current, { messageId: 'm2', relatedTaskId: 'work', purpose: 'blocker', text: 'stuck' });
  t.deepEqual(
    (await readInbox(pool, teamId, second.revision - 1, 'read-1')).map((m) => m.messageId),
    ['m1'],
  );
  t.is((await readBoard(pool, teamId)).inboxUnread, 1);
  // A retry of that read (its result lost with a worker) gets the same message again; the message stays read.
  t.deepEqual(
    (await readInbox(pool, teamId, second.revision - 1, 'read-1')).map((m) => m.messageId),
    ['m1'],
  );
  t.is((await readBoard(pool, teamId)).inboxUnread, 1);
  t.deepEqual(
    (await readInbox(pool, teamId, second.revision, 'read-2')).map((m) => [m.messageId, m.actor]),
    [['m2', 'member:implementer:exec-2']],
  );
  t.is((await readBoard(pool, teamId)).inboxUnread, 0);
  // Another read finds nothing unread.
  t.deepEqual(await readInbox(pool, teamId, second.revision, 'read-3'), []);
});
