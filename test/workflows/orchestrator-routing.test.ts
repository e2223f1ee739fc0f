import test from 'ava';
import { orchestratorWorkflowId, sessionWorkflowId } from '../../contract/messages';
import { createOrchestratorActivities } from '../../activities/orchestrator';
import { JUST_DISPATCHED, ROUTE_FIRST } from '../../workflows/orchestrator/echo';
import { dispatchRequestId } from '../../workflows/orchestrator/session-call';
import { renderRoster } from '../../workflows/orchestrator/roster';
import { calls, final, fleetModel, lastUserText, oneCallPerTurn, session, startFleet } from '../helpers/fleet-model';
import { waitFor } from '../helpers/wait';

/**
 * The routing invariants (issue 8, items 2, 5, 6 and 9) against the real workflows, with the model played over
 * HTTP. The test's model speaks a tiny language in the user's words — `create <topic>: <task>`,
 * `send <id>: <task>`, `raw <json>` (sent as the session call's arguments verbatim) — so each test says exactly
 * which call the model makes; assertions are on workflow state and on the bytes the model was sent.
 */
const directive = oneCallPerTurn((text) => {
  let m = /^create ([^:]+): (.+)$/s.exec(text);
  if (m) return calls(session('create', { title: m[1], task: m[2], topic: m[1] }));
  m = /^send (\S+): (.+)$/s.exec(text);
  if (m) return calls(session('send', { sessionID: m[1], task: m[2] }));
  m = /^raw (.+)$/s.exec(text);
  if (m) return calls(['session', m[1]]);
  if (text.startsWith('echo')) return final(text.slice(5));
  return final('Nothing to do.');
});

test('a create whose topic an existing child owns is routed to it; a different topic gets its own child', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create PR 1741: the login test is flaky' });
  const first = await fleet.settled(1);
  const owner = first.children[0].childId;
  // Written three ways: one topic.
  await orchard.client.message(id, { text: 'create pr_1741: also bump the timeout' });
  await orchard.client.message(id, { text: 'create Pr-1741: and add a changelog line' });
  await orchard.client.message(id, { text: 'create PR 1742: a different PR' });
  const view = await fleet.settled(4);
  t.deepEqual(
    view.children.map((c) => c.topicKey),
    ['pr-1741', 'pr-1742'],
  );
  t.deepEqual(
    view.deliveries.map((d) => [d.messageId, d.via, d.childId === owner]),
    [
      ['m1', 'create', true],
      ['m2', 'topic', true],
      ['m3', 'topic', true],
      ['m4', 'create', false],
    ],
  );
  // The routed creates said so to the model, with the echo.
  const routed = fleet.toolResults().filter((r) => r.startsWith('topic "'));
  t.is(routed.length, 2);
  for (const r of routed) {
    t.true(r.includes(`is owned by ${owner}: routed to ${owner}`));
    t.true(r.includes(ROUTE_FIRST));
    t.is(r.split(JUST_DISPATCHED).length - 1, 1);
  }
  // The owner got all three tasks, in its one session.
  const child = await waitFor(async () => {
    const v = await orchard.client.status(owner);
    return v.turnsCompleted >= 3 ? v : undefined;
  }, 60_000);
  t.is(child.turnsCompleted, 3);
});

test('a send to an idle child resumes that same session with its history; no new child, no new ledger row', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id, stub } = fleet;
  await orchard.client.message(id, { text: 'create billing: find why invoices round wrong' });
  const childId = (await fleet.settled(1)).children[0].childId;
  const idle = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.children[0].status === 'idle' ? v : undefined;
    },
    60_000,
    'the child went idle',
  );
  const { runId } = await orchard.temporal.workflow.getHandle(sessionWorkflowId(childId)).describe();

  await orchard.client.message(id, { text: `send ${childId}: now fix the rounding` });
  await fleet.settled(2);
  const after = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.children[0].turnEnds >= 2 ? v : undefined;
  }, 60_000);
  t.is(after.children.length, 1);
  t.is(after.children[0].childId, childId);
  t.is(after.children[0].lastActivity > idle.children[0].lastActivity, true);
  t.is((await orchard.temporal.workflow.getHandle(sessionWorkflowId(childId)).describe()).runId, runId, 'the same workflow run');
  // The child's second request carries its first task: its history is intact.
  const childRequests = stub.requests.map((r) => r.body).filter((b) => !(b.tools ?? []).some((tool: any) => tool.function.name === 'session'));
  const second = childRequests.find((b) => lastUserText(b).includes('now fix the rounding'));
  t.truthy(second);
  t.true(JSON.stringify(second.messages).includes('find why invoices round wrong'));
});

test('malformed session calls: a flattened send is read as the send it means; what is not a send is refused and creates nothing', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create docs: write the README' });
  const childId = (await fleet.settled(1)).children[0].childId;
  await orchard.client.message(id, { text: `raw ${JSON.stringify({ sessionID: childId, task: 'flattened: add a FAQ' })}` });
  await orchard.client.message(id, { text: `raw ${JSON.stringify({ title: 'sneaky', task: 'should never become a create' })}` });
  await orchard.client.message(id, { text: `raw ${JSON.stringify({ operation: 'create', args: { sessionID: childId, title: 'x', task: 'y' } })}` });
  await orchard.client.message(id, { text: 'raw {"operation": "send", "args": ' });
  const view = await fleet.settled(5);
  t.deepEqual(
    view.children.map((c) => c.childId),
    [childId],
    'no child was created by a malformed call',
  );
  t.deepEqual(
    view.deliveries.map((d) => [d.messageId, d.via]),
    [
      ['m1', 'create'],
      ['m2', 'send'],
    ],
  );
  const results = fleet.toolResults();
  t.truthy(results.find((r) => r.startsWith('(read sessionID, task as args; no operation given: read as a send)\nsent to ')));
  t.is(results.filter((r) => r.startsWith('error (session_call_invalid)')).length, 3);
});

test('a closed child leaves the roster; a send to it or to an unknown id is an error the model reads; nothing is created or sent', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id } = fleet;
  const childId = (await fleet.say('create cache: warm the cache')).children[0].childId;
  await orchard.client.waitUntilSettled(childId, { afterTurn: 1 });
  await orchard.client.cancel(childId, 'user closed it');
  // The child tells its orchestrator it closed, though it was idle: the ledger and roster follow.
  const closed = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.children[0].status === 'cancelled' ? v : undefined;
    },
    60_000,
    'the close notice',
  );
  t.is(closed.children[0].turnEnds, 1, 'a close is not a turn end');
  t.false((await orchard.client.roster(id)).includes(childId));
  await fleet.say(`send ${childId}: one more thing`);
  const view = await fleet.say('send no-such-child: hello');
  t.is(view.children.length, 1);
  t.deepEqual(
    view.deliveries.map((d) => d.via),
    ['create'],
  );
  const results = fleet.toolResults();
  t.truthy(results.find((r) => r.startsWith(`error (session_closed): child ${childId} is closed`)));
  t.truthy(results.find((r) => r.startsWith('error (session_not_found): no child no-such-child')));
  // The close reached the model as a child result (after the user's messages, which always go first).
  const manifests = () =>
    fleet
      .orchestratorRequests()
      .map((b) => String(b.messages.at(-1).content))
      .filter((c) => c.startsWith('Child results'));
  t.truthy(
    await waitFor(() => manifests().find((m) => m.includes(`- ${childId}: session closed (cancelled) — user closed it`)), 150_000, 'the close in a manifest'),
  );
  await t.throwsAsync(orchard.temporal.workflow.getHandle(sessionWorkflowId('no-such-child')).describe());
});

test('a repeated message request id is accepted once; a bad message is refused before history', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id } = fleet;
  const a = await orchard.client.message(id, { text: 'echo hello', requestId: 'req-1' });
  const b = await orchard.client.message(id, { text: 'echo hello', requestId: 'req-1' });
  t.deepEqual([a.duplicate, b.duplicate, b.messageId], [false, true, a.messageId]);
  // The signal is deduplicated by the same window.
  await orchard.temporal.workflow.getHandle(orchestratorWorkflowId(id)).signal('message', { text: 'echo hello', requestId: 'req-1' });
  const err = await t.throwsAsync(orchard.client.message(id, { text: '   ' }));
  t.regex(String(err?.message), /task_empty|non-empty/);
  // A later message is numbered right after the first: the duplicates took no number.
  t.is((await orchard.client.message(id, { text: 'echo bye' })).messageId, 'm2');
  const view = await fleet.settled(2);
  t.deepEqual(
    view.turns.map((turn) => turn.taskId),
    ['m1', 'm2'],
  );
});

test('text shown to the user never carries the roster header, route lines or markers, even when the model echoes them', async (t) => {
  const fleet = await startFleet(
    t,
    fleetModel((ctx) => {
      if (ctx.text.startsWith('create')) return directive(ctx);
      // The model parrots its last tool result (roster, ROUTE FIRST, marker) around its answer.
      const echoed = ctx.body.messages.filter((m: any) => m.role === 'tool').at(-1)?.content ?? '';
      return final(`Routed your request.\n${echoed}\nAnything else?`);
    }),
  );
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create ui: make the button blue' });
  await fleet.settled(1);
  await orchard.client.message(id, { text: 'what did you do?' });
  const view = await fleet.settled(2);
  const shown = view.lastTurn?.finalExcerpt ?? '';
  t.true(shown.includes('Routed your request.'));
  t.true(shown.includes('Anything else?'));
  const roster = await orchard.client.roster(id);
  for (const scaffold of [ROUTE_FIRST, JUST_DISPATCHED, roster.split('\n')[0], 'id | title | agent | status']) t.false(shown.includes(scaffold), scaffold);
});

test('children survive the orchestrator continuing as new, and the ledger carries them', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive), { limits: { turnsPerRun: 1 } });
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create search: index the docs' });
  const first = await fleet.settled(1);
  const childId = first.children[0].childId;
  const childRun = (await orchard.temporal.workflow.getHandle(sessionWorkflowId(childId)).describe()).runId;
  const handed = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.runIndex >= 1 ? v : undefined;
    },
    60_000,
    'the orchestrator continued as new',
  );
  t.deepEqual(
    handed.children.map((c) => c.childId),
    [childId],
  );
  const child = await orchard.temporal.workflow.getHandle(sessionWorkflowId(childId)).describe();
  t.is(child.status.name, 'RUNNING');
  t.is(child.runId, childRun, 'the child was not restarted or terminated');

  await orchard.client.message(id, { text: `create search: also index the changelog` });
  await fleet.settled(2);
  const routed = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.children[0].turnEnds >= 2 && v.runIndex >= 2 ? v : undefined;
    },
    60_000,
    'the second turn end reached a later run',
  );
  t.is(routed.children.length, 1);
  t.deepEqual(
    routed.deliveries.map((d) => d.via),
    ['create', 'topic'],
  );
  await fleet.keepHistory('orchestrator-continued-as-new');
});

test('children survive a worker restart; the orchestrator routes to them afterwards and hears their turn ends', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create perf: profile the API' });
  const childId = (await fleet.settled(1)).children[0].childId;
  await waitFor(async () => (await orchard.client.orchestratorStatus(id)).children[0].turnEnds >= 1 || undefined, 60_000);
  await orchard.restartWorkers();
  await orchard.client.message(id, { text: `send ${childId}: and the database` });
  await fleet.settled(2);
  const view = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.children[0].turnEnds >= 2 ? v : undefined;
    },
    60_000,
    'the child turn end after the restart',
  );
  t.deepEqual(
    view.children.map((c) => c.childId),
    [childId],
  );
  t.is((await orchard.client.status(childId)).turnsCompleted, 2);
  t.is((await orchard.temporal.workflow.getHandle(orchestratorWorkflowId(id)).describe()).status.name, 'RUNNING');
});

test('the roster query is the text in the model request, rows built by the one roster function', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create alpha: a' });
  await orchard.client.message(id, { text: 'create beta: b' });
  await fleet.settled(2);
  // Both children idle and counted, so the roster cannot change under the next request.
  const view = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.children.every((c) => c.status === 'idle') && v.queued === 0 ? v : undefined;
  }, 60_000);
  const roster = await orchard.client.roster(id);
  t.is(roster, renderRoster(view.children));
  t.is(roster.split('\n').filter((l) => / \| (alpha|beta) \| coder \| idle$/.test(l)).length, 2);
  await orchard.client.message(id, { text: 'echo ok' });
  await fleet.settled(3);
  const last = fleet.orchestratorRequests().at(-1);
  t.true(String(last.messages[0].content).includes(await orchard.client.roster(id)));
  // Every orchestrator request offers exactly its three tools, with their JSON Schemas; no bash, no files.
  for (const body of fleet.orchestratorRequests()) {
    t.deepEqual(
      body.tools.map((tool: any) => tool.function.name),
      ['session', 'list_orchestrator_agents', 'update_orchestrator_agent_description'],
    );
    const session = body.tools[0].function.parameters;
    t.deepEqual(session.properties.operation.enum, ['create', 'send', 'list', 'status']);
    t.deepEqual(session.required, ['operation', 'args']);
  }
});

test('a retried or replayed dispatch is delivered once: its request id comes from the tool call', async (t) => {
  const fleet = await startFleet(t, fleetModel(directive));
  const { orchard, id, stub } = fleet;
  await orchard.client.message(id, { text: 'create queue: drain the queue' });
  const childId = (await fleet.settled(1)).children[0].childId;
  const sent = await orchard.client.message(id, { text: `send ${childId}: then purge it` });
  // The send's turn is found by its message: the child's first result may take a turn before or after it.
  const view = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.status === 'idle' && v.deliveries.some((d) => d.messageId === sent.messageId) ? v : undefined;
    },
    60_000,
    'the send delivered',
  );
  const child = await orchard.client.waitUntilSettled(childId, { afterTurn: 2 });
  const delivery = view.deliveries.find((d) => d.messageId === sent.messageId)!;
  t.is(delivery.via, 'send');
  const sendTurn = view.turns.find((turn) => turn.turn === delivery.turn)!;
  // The call the model made in that turn's first step, as the orchestrator's next request shows it.
  const callId = stub.requests
    .map((r) => r.body.messages as any[])
    .flatMap((messages) => messages.filter((m) => m.role === 'assistant' && m.tool_calls))
    .map((m) => m.tool_calls[0])
    .find((c) => JSON.parse(c.function.arguments).operation === 'send').id;
  const ref = { sessionId: id, executionId: '', turnId: sendTurn.turnId!, turn: sendTurn.turn, step: 1, callId };
  // The activity, run again as a retry (or a replay after a lost result) would run it.
  const acts = createOrchestratorActivities({ pool: orchard.pool, temporal: () => orchard.client });
  const from = orchestratorWorkflowId(id);
  const again = await acts.sendToChild({ ref, childId, requestId: dispatchRequestId(from, ref), from });
  t.deepEqual(again, { ok: true, taskId: delivery.taskId });
  const after = await orchard.client.status(childId);
  t.is(after.queued, 0);
  t.is(after.turnsCompleted, child.turnsCompleted);
  t.is(after.currentTask, undefined);
  // A different request id is a different dispatch: the child takes it (the check above could fail).
  const other = await acts.sendToChild({ ref, childId, requestId: `${dispatchRequestId(from, ref)}-other`, from });
  t.true(other.ok && other.taskId !== delivery.taskId);
});
