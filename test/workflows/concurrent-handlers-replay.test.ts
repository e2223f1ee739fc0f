import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { OrchardError } from '../../client/client';
import { orchestratorWorkflowId, sessionWorkflowId } from '../../contract/messages';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { calls, final, fleetModel, gate, lastUserText, session, startFleet, type Decide } from '../helpers/fleet-model';
import { pidsWithCommandLine as liveProcesses } from '../helpers/processes';
import { waitFor as until } from '../helpers/wait';
import { keepHistory, makeRepo, startOrchard, testStackEnv, uniqueId, type TestOrchard } from '../helpers/orchard';
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
  for (const id of expected)
    t.true(
      outcomes.some((o) => o.workflowId === id),
      `${id} was replayed`,
    );
  const failed = outcomes.filter((o) => o.error);
  for (const o of failed) t.log(`${o.workflowId} (${o.type}):\n${(await historyOf(orchard, o.workflowId)).join('\n')}`);
  t.deepEqual(
    failed.map((o) => ({ workflowId: o.workflowId, error: o.error })),
    [],
  );
  return outcomes;
}

/**
 * Tests that hold a store write need a PostgreSQL server: embedded PGlite has one session behind every connection,
 * so a row held open by the test would hold everyone. ava has no runtime skip: the reason is in the title.
 */
const noHolds = testStackEnv().embedded ? 'the run uses embedded PGlite, where a write cannot be held apart (set DATABASE_URL)' : undefined;
const holdingTest = (title: string, fn: import('ava').ImplementationFn<[]>) => {
  if (noHolds) {
    console.log(`skipped "${title}": ${noHolds}`);
    test.skip(`${title} — skipped: ${noHolds}`, () => undefined);
  } else test(title, fn);
};

/** Lets the worker act on what it was just given before the next write is let through (it has no outside effect yet). */
const beat = () => new Promise((r) => setTimeout(r, 1_000));

// With local activities for the store, the three results below reached the workflow in two activations live (t2,
// then t3 and t4) but in one on replay: the first send's answer and the turn it starts were emitted after the other
// answers, and the replay failed (TMPRL1100, Update machine vs UpsertWorkflowSearchAttributes).
holdingTest('sends whose store writes finish one at a time leave a session history that replays', async (t) => {
  const { orchard } = await orchardWith(t, sessionModel);
  const sessionId = uniqueId('burst');
  const workflowId = sessionWorkflowId(sessionId);
  await orchard.client.createSession({ sessionId, title: 'burst', repo: makeRepo(), task: 'hello' });
  const idle = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });

  const held = await holdTaskRows(idle.executionId!, sessionId, ['t2', 't3', 't4']);
  t.teardown(() => held.releaseAll());
  const sends = ['first', 'second', 'third'].map((task) => orchard.client.send(sessionId, task));
  await until(async () => (await held.waiting()) === 3, 20_000, 'the three store writes wait');
  // All three sends accepted in history: the workflow task that started their writes is over, the writes are not.
  await until(async () => (await historyOf(orchard, workflowId)).filter((l) => l.includes('update send')).length === 3, 30_000, 'sends accepted');

  await held.release('t2');
  await beat();
  await held.release('t3');
  await held.release('t4');
  const answers = await Promise.all(sends);
  t.deepEqual(answers.map((a) => [a.taskId, a.taskState]).sort(), [
    ['t2', 'queued'],
    ['t3', 'queued'],
    ['t4', 'queued'],
  ]);
  const done = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 4 });
  t.deepEqual(done.tasks, { queued: 0, running: 0, done: 4, failed: 0, cancelled: 0 });

  await assertEveryHistoryReplays(t, orchard, [workflowId]);
  await keepHistory(orchard, workflowId, 'session-sends-stored-one-at-a-time');
});

holdingTest('a message burst stored one write at a time, while a child reports, leaves orchestrator histories that replay', async (t) => {
  const child = gate();
  const decide: Decide = (ctx) => {
    if (ctx.results.length > 0) return final('ok');
    if (ctx.text === 'spawn a worker') return calls(session('create', { title: 'worker', task: 'work [gated]' }));
    return final('noted');
  };
  const fleet = await startFleet(
    t,
    fleetModel(decide, async (body) => {
      if (lastUserText(body).includes('[gated]')) await child.promise;
      return completion({ content: `finished: ${lastUserText(body)}` });
    }),
  );
  const { orchard, id } = fleet;
  const workflowId = orchestratorWorkflowId(id);
  await orchard.client.message(id, { text: 'spawn a worker' });
  const spawned = await fleet.settled(1);
  const childId = spawned.children[0].childId;

  const { rows } = await orchard.pool.query(`SELECT execution_id FROM session_tasks WHERE session_id = $1 AND task_id = 'm1'`, [id]);
  const held = await holdTaskRows(rows[0].execution_id, id, ['m2', 'm3', 'm4']);
  t.teardown(() => held.releaseAll());
  const messages = ['first', 'second', 'third'].map((text) => orchard.client.message(id, { text }));
  await until(async () => (await held.waiting()) === 3, 20_000, 'the three store writes wait');
  await until(async () => (await historyOf(orchard, workflowId)).filter((l) => l.includes('update message')).length === 4, 30_000, 'messages accepted');

  // The child reports while the messages' writes wait: its result waits behind them (the user's messages arrived
  // first, and a user message always goes before a manifest), and no turn starts on a message not yet stored.
  child.open();
  await until(async () => (await orchard.client.orchestratorStatus(id)).children[0]?.turnEnds === 1 || undefined, 30_000, 'the child reported');
  t.is((await orchard.client.orchestratorStatus(id)).turnsCompleted, 1);

  await held.release('m3');
  await beat();
  t.is((await orchard.client.orchestratorStatus(id)).turnsCompleted, 1, 'm3 is stored but m2, before it, is not: nothing runs');
  await held.release('m2');
  await held.release('m4');
  const accepted = await Promise.all(messages);
  t.deepEqual(accepted.map((a) => a.messageId).sort(), ['m2', 'm3', 'm4']);
  const settled = await fleet.settled(5);
  // Arrival order, whatever order the writes finished in; the child's result (the manifest) after the user's words.
  t.deepEqual(
    settled.turns.map((turn) => turn.taskId),
    ['m1', 'm2', 'm3', 'm4', 'm5'],
  );
  t.true(fleet.orchestratorRequests().some((b) => lastUserText(b).startsWith('Child results')));

  await assertEveryHistoryReplays(t, orchard, [workflowId, sessionWorkflowId(childId)]);
  await fleet.keepHistory('orchestrator-messages-stored-one-at-a-time');
});

/** Asks the status query back to back until stopped, as a dashboard or `orchard status --watch` would. */
function watchStatus(orchard: TestOrchard, sessionId: string): () => Promise<number> {
  let stopped = false;
  let answered = 0;
  const loop = (async () => {
    while (!stopped) {
      if (
        await orchard.client.status(sessionId).then(
          () => true,
          () => false,
        )
      )
        answered++;
    }
  })();
  return async () => {
    stopped = true;
    await loop;
    return answered;
  };
}

test('sessions created, sent to and cancelled during a long bash command while watched by queries leave histories that replay', async (t) => {
  const { orchard } = await orchardWith(t, sessionModel);
  const ids = await Promise.all(
    Array.from({ length: 5 }, async () => {
      const seconds = 3000 + Math.floor(Math.random() * 900);
      const sessionId = uniqueId('watched');
      // Watched from before it exists: queries reach the session's first workflow tasks too.
      const watchers = [watchStatus(orchard, sessionId), watchStatus(orchard, sessionId)];
      await orchard.client.createSession({ sessionId, title: 'watched', repo: makeRepo(), task: `run sleep ${seconds}` });
      await until(() => liveProcesses(`sleep ${seconds}`).length > 0 || undefined, 30_000, 'the command runs');
      const [first, cancelled, second] = await Promise.allSettled([
        orchard.client.send(sessionId, 'queued behind the command'),
        orchard.client.cancel(sessionId, 'stop'),
        orchard.client.send(sessionId, 'sent as the cancel lands'),
      ]);
      const answered = await Promise.all(watchers.map((stop) => stop()));
      t.true(
        answered.every((n) => n > 0),
        'the watchers were answered',
      );
      t.is(cancelled.status === 'fulfilled' && cancelled.value.status, 'closed');
      // A racing send is accepted (and then ends cancelled with the session) or refused because the session closes.
      for (const send of [first, second]) {
        if (send.status === 'fulfilled') t.is(send.value.duplicate, false);
        else t.true(send.reason instanceof OrchardError && ['session_closing', 'session_closed'].includes(send.reason.code), String(send.reason));
      }
      t.deepEqual(liveProcesses(`sleep ${seconds}`), []);
      const { rows } = await orchard.pool.query(`SELECT state FROM session_tasks WHERE session_id = $1`, [sessionId]);
      t.true(rows.length >= 1 && rows.every((r) => r.state === 'cancelled'), JSON.stringify(rows));
      return sessionId;
    }),
  );
  await assertEveryHistoryReplays(t, orchard, ids.map(sessionWorkflowId));
  await keepHistory(orchard, sessionWorkflowId(ids[0]), 'session-send-and-cancel-during-bash-watched');
});
