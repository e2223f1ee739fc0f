import test from 'ava';
import { orchestratorWorkflowId, sessionWorkflowId } from '../../contract/messages';
import { JUST_DISPATCHED, ROUTE_FIRST } from '../../workflows/orchestrator/echo';
import { currentTurn, startFleet } from '../helpers/fleet-model';
import { completion, type Reply } from '../helpers/model-stub';
import { waitFor } from '../helpers/wait';

/**
 * The model, played by a local OpenAI-compatible server: an orchestrator request (it offers the `session` tool)
 * is answered from the request alone — the roster rows in its system message and the user's words — the way a
 * routing model would; a child's request is answered with a short summary.
 */
function routingModel(body: any): Reply {
  const names = (body.tools ?? []).map((tool: any) => tool.function.name);
  const messages: any[] = body.messages;
  const last = messages[messages.length - 1];
  if (!names.includes('session'))
    return completion({ content: `child done: ${String(messages.filter((m) => m.role === 'user').at(-1)?.content).slice(0, 40)}` });
  if (last.role !== 'user') return completion({ content: 'Routed.' });
  const text: string = last.content;
  if (text.startsWith('Child results')) return completion({ content: 'Noted.' });
  const rows = String(messages[0].content)
    .split('\n')
    .filter((line) => / \| .* \| .* \| (running|idle)$/.test(line))
    .map((line) => line.split(' | '));
  const topic = /ghost/.test(text) ? 'ghost' : /pr[\s_-]?1741/i.test(text) ? 'PR 1741' : 'login page';
  const call = (args: unknown) =>
    completion({ tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'session', arguments: JSON.stringify(args) } }] }, 'tool_calls');
  if (topic === 'ghost') return call({ operation: 'send', args: { sessionID: 'ghost-child', task: text } });
  const owner = rows.find((r) => r[1] === topic);
  if (owner) return call({ operation: 'send', args: { sessionID: owner[0], task: text } });
  return call({ operation: 'create', args: { title: topic, task: text, topic } });
}

test('a second message on the same topic is routed to the child the first one created; the roster is in every request', async (t) => {
  const { orchard, id, settled, orchestratorRequests } = await startFleet(t, routingModel);
  await orchard.client.message(id, { text: 'PR 1741: the login test is flaky, fix it' });
  const first = await settled(1);
  t.is(first.children.length, 1);
  const child = first.children[0];
  t.like(child, { title: 'PR 1741', topicKey: 'pr-1741' });
  // The child is a session of its own, created isolated for this orchestrator.
  const childView = await orchard.client.waitUntilSettled(child.childId, { afterTurn: 1 });
  t.regex(childView.lastTurn?.finalExcerpt ?? '', /^child done: PR 1741/);

  await orchard.client.message(id, { text: 'pr-1741 again: also add a changelog entry' });
  await waitFor(async () => (await orchard.client.status(child.childId)).turnsCompleted >= 2 || undefined, 60_000);
  const after = await orchard.client.orchestratorStatus(id);
  t.deepEqual(
    after.children.map((c) => c.childId),
    [child.childId],
    'no second child for the same topic',
  );

  // The orchestrator's next model call after the send carries its result.
  await waitFor(() => JSON.stringify(orchestratorRequests()).includes('sent to ') || undefined, 60_000, 'the send result reached the model');
  const requests = orchestratorRequests();
  // Every orchestrator request carried the roster (after the create, with the child's row), and no envelope tag.
  const withRow = requests.filter((b) => b.messages[0].content.split('\n').some((l: string) => l.startsWith(`${child.childId} | PR 1741 | coder | `)));
  t.true(withRow.length >= 2);
  for (const b of requests) t.notRegex(JSON.stringify(b.messages), /<\/[A-Za-z][\w-]*>/);
  // The create's and the send's results echo the roster, the route command and exactly one marker (in the turn of the
  // call: later turns see them without the roster).
  const results = requests.flatMap((b) =>
    currentTurn(b.messages)
      .filter((m: any) => m.role === 'tool')
      .map((m: any) => m.content as string),
  );
  const dispatches = [...new Set(results)].filter((c) => c.startsWith('created child') || c.startsWith('sent to'));
  t.is(dispatches.length, 2, JSON.stringify([...new Set(results)]));
  for (const content of dispatches) {
    t.true(content.includes(ROUTE_FIRST));
    t.is(content.split(JUST_DISPATCHED).length - 1, 1);
  }
  // The children's turn ends reached the orchestrator.
  const final = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.children[0].turnEnds >= 2 ? v : undefined;
  }, 60_000);
  t.is(final.children[0].turnEnds, 2);
});

test('a send to an id the ledger does not know is an error the model reads, and creates nothing', async (t) => {
  const { orchard, id, settled, orchestratorRequests } = await startFleet(t, routingModel);
  await orchard.client.message(id, { text: 'tell the ghost child to stop' });
  const view = await settled(1);
  t.deepEqual(view.children, []);
  const results = orchestratorRequests().flatMap((b) => b.messages.filter((m: any) => m.role === 'tool').map((m: any) => m.content));
  t.regex(results[0], /^error \(session_not_found\)/);
  await t.throwsAsync(orchard.temporal.workflow.getHandle(sessionWorkflowId('ghost-child')).describe());
});

test('children outlive their orchestrator, and a turn end delivered twice counts once', async (t) => {
  const { orchard, id, settled } = await startFleet(t, routingModel);
  await orchard.client.message(id, { text: 'the login page is slow' });
  const view = await settled(1);
  const childId = view.children[0].childId;
  const handle = orchard.temporal.workflow.getHandle(orchestratorWorkflowId(id));
  const before = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.children[0].turnEnds >= 1 ? v : undefined;
  }, 60_000);
  const notice = { childId, turnId: 'turn-x', taskId: 't9', outcome: 'finished', queued: 0 };
  await handle.signal('childTurnEnded', notice);
  await handle.signal('childTurnEnded', notice);
  const twice = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.children[0].turnEnds > before.children[0].turnEnds ? v : undefined;
  });
  t.is(twice.children[0].turnEnds, before.children[0].turnEnds + 1);

  await handle.terminate('operator stops the orchestrator');
  const child = await orchard.temporal.workflow.getHandle(sessionWorkflowId(childId)).describe();
  t.is(child.status.name, 'RUNNING');
  t.is((await orchard.client.send(childId, 'still here?')).duplicate, false);
});
