import test from 'ava';
import { join } from 'node:path';
import { loadScenario } from '../../activities/model/scenario';
import { topicKey } from '../../workflows/orchestrator/topic';
import { makeRepo, startOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

const ROUTE_FIRST = join(__dirname, '../../scenarios/route-first.json');

test("route-first through the real orchestrator: 8 messages, exactly 3 children, each message delivered to its topic's owner", async (t) => {
  const orchard = await startOrchard(t);
  const scenario = await loadScenario(ROUTE_FIRST);
  const script = scenario.messages!;
  const id = uniqueId('route-first');
  const model = { provider: 'scripted' as const, scenario: ROUTE_FIRST };
  await orchard.client.startOrchestrator({ orchestratorId: id, repo: makeRepo(), title: 'route-first', model, childModel: model });

  const messageIds: string[] = [];
  for (const m of script) {
    const { messageId } = await orchard.client.message(id, { text: m.text });
    const { turn } = await orchard.client.waitForMessageTurn(id, messageId, { timeoutMs: 60_000 });
    t.is(turn.outcome, 'finished', `${messageId}: ${JSON.stringify(turn.error)}`);
    messageIds.push(messageId);
  }

  const status = await orchard.client.orchestratorStatus(id);
  t.is(status.children.length, 3, JSON.stringify(status.children.map((c) => c.title)));
  const ownerOf = (topic: string) => status.children.find((c) => c.topicKey === topicKey(topic));
  for (const [i, m] of script.entries()) {
    const dispatches = status.deliveries.filter((d) => d.messageId === messageIds[i]);
    t.is(dispatches.length, 1, `message ${i + 1}: ${JSON.stringify(dispatches)}`);
    t.is(dispatches[0].childId, ownerOf(m.topic)?.childId ?? '(no owner)', `message ${i + 1} "${m.text}"`);
    // The first message of a topic created its child; every later one (paraphrase, "dispatch a new child") was sent.
    const firstOfTopic = script.findIndex((s) => s.topic === m.topic) === i;
    t.is(dispatches[0].via, firstOfTopic ? 'create' : 'send', `message ${i + 1}`);
  }

  // Each child session received exactly its topic's messages, one turn each, in one session.
  for (const topic of new Set(script.map((m) => m.topic))) {
    const expected = script.filter((m) => m.topic === topic).length;
    const child = ownerOf(topic)!;
    const view = await waitFor(
      async () => {
        const v = await orchard.client.status(child.childId);
        return v.turnsCompleted >= expected && v.status === 'idle' ? v : undefined;
      },
      60_000,
      `child ${child.childId} finished ${expected} tasks`,
    );
    t.is(view.turnsCompleted, expected, topic);
    t.is(view.tasks?.done, expected, topic);
  }
});
