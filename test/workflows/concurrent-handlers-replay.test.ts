import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { sessionWorkflowId } from '../../workflows/messages';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { calls } from '../helpers/fleet-model';
import { waitFor as until } from '../helpers/wait';
import { keepHistory, makeRepo, startOrchard, uniqueId, type TestOrchard } from '../helpers/orchard';
import { eventLines, replayEveryHistory } from '../helpers/replay';
import { holdTaskRows } from '../helpers/store-gate';

/**
 * Update and signal handlers run beside the main loop of a session (and of an orchestrator), and both write to
 * the store. Whatever order their writes finish in, the history they leave must replay: a worker restart, a cache
 * eviction or a query on a cold worker replays it, and a nondeterminism error there stalls the workflow.
 */

const lastUser = (body: any): string => String(body.messages.filter((m: any) => m.role === 'user').at(-1)?.content ?? '');
const afterTool = (body: any): boolean => body.messages.at(-1)?.role === 'tool';

/** A session model: a task `run <command>` runs it with bash and then ends; any other task ends at once. */
const sessionModel = (body: any): Reply => {
  if (afterTool(body)) return completion({ content: 'ran it' });
  const m = /^run (.+)$/.exec(lastUser(body));
  return m ? calls(['bash', { command: m[1] }]) : completion({ content: `done: ${lastUser(body).slice(0, 40)}` });
};

async function orchardWith(t: import('ava').ExecutionContext, model: (body: any) => Reply | Promise<Reply>) {
  const stub = await stubModel(t, model);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 });
  return { stub, orchard: await startOrchard(t, { defaultProvider: provider }) };
}

const historyOf = async (orchard: TestOrchard, workflowId: string) => eventLines(await orchard.temporal.workflow.getHandle(workflowId).fetchHistory());

/** Every history this orchard produced replays; the ones that do not are shown with their events. */
async function assertEveryHistoryReplays(t: import('ava').ExecutionContext, orchard: TestOrchard, expected: string[]) {
  const outcomes = await replayEveryHistory(orchard);
  for (const id of expected) t.true(outcomes.some((o) => o.workflowId === id), `${id} was replayed`);
  const failed = outcomes.filter((o) => o.error);
  for (const o of failed) t.log(`${o.workflowId} (${o.type}):\n${(await historyOf(orchard, o.workflowId)).join('\n')}`);
  t.deepEqual(
    failed.map((o) => ({ workflowId: o.workflowId, error: o.error })),
    [],
  );
  return outcomes;
}

/** Lets the worker act on what it was just given before the next write is let through (it has no outside effect yet). */
const beat = () => new Promise((r) => setTimeout(r, 1_000));

test('sends whose store writes finish one at a time leave a session history that replays', async (t) => {
  const { orchard } = await orchardWith(t, sessionModel);
  const sessionId = uniqueId('burst');
  const workflowId = sessionWorkflowId(sessionId);
  await orchard.client.createSession({ sessionId, title: 'burst', repo: makeRepo(), task: 'hello' });
  const idle = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });

  const held = await holdTaskRows(idle.executionId!, sessionId, ['t2', 't3', 't4']);
  t.teardown(() => held.releaseAll());
  const sends = ['first', 'second', 'third'].map((task) => orchard.client.send(sessionId, task));
  await until(async () => (await held.waiting()) === 3, 20_000, 'the three store writes wait');
  // All three sends accepted in history: the workflow task that took them is over, their writes still running.
  await until(async () => (await historyOf(orchard, workflowId)).filter((l) => l.includes('update send')).length === 3, 30_000, 'sends accepted');

  await held.release('t2');
  await beat();
  await held.release('t3');
  await held.release('t4');
  const answers = await Promise.all(sends);
  t.deepEqual(answers.map((a) => [a.taskId, a.taskState]).sort(), [['t2', 'queued'], ['t3', 'queued'], ['t4', 'queued']]);
  const done = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 4 });
  t.deepEqual(done.tasks, { queued: 0, running: 0, done: 4, failed: 0, cancelled: 0 });

  await assertEveryHistoryReplays(t, orchard, [workflowId]);
  await keepHistory(orchard, workflowId, 'session-sends-stored-one-at-a-time');
});
