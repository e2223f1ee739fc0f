import test, { type ExecutionContext } from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { OrchardError } from '../../client/client';
import { sessionWorkflowId, type SessionStatusView } from '../../contract/messages';
import { stubModel } from '../helpers/model-stub';
import { pidsWithCommandLine as liveProcesses } from '../helpers/processes';
import { waitFor as until } from '../helpers/wait';
import { makeRepo, startOrchard, uniqueId, writeScenario, type TestOrchard } from '../helpers/orchard';

/**
 * Cancel at any moment ends the session (issue 7, item 2), and nothing accepted is dropped (item 3): the
 * workflow closes within a bound, every handler is answered, the worktree lease is released, no process of
 * the session lives, and every task it accepted ends in a recorded terminal state.
 */

/** A gate per session id: worktree preparation waits on it (the hook widens the race window; no sleeps). */
const gates = new Map<string, { stage: 'start' | 'leased'; wait: (signal: AbortSignal) => Promise<void> }>();
const hooks = {
  beforePrepare: async (input: { sessionId: string }, signal: AbortSignal) => {
    const gate = gates.get(input.sessionId);
    if (gate?.stage === 'start') await gate.wait(signal);
  },
  afterLease: async (input: { sessionId: string }, signal: AbortSignal) => {
    const gate = gates.get(input.sessionId);
    if (gate?.stage === 'leased') await gate.wait(signal);
  },
};

let orchard: TestOrchard;
const teardowns: (() => unknown)[] = [];
test.before(async () => {
  orchard = await startOrchard({ teardown: (fn) => teardowns.push(fn) }, { hostHooks: hooks });
});
test.after.always(async () => {
  for (const fn of teardowns.reverse()) await fn();
});

const abortOf = (signal: AbortSignal) => new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));

/** Holds the session's preparation at `stage` until it is cancelled; resolves once the preparation got there. */
function entered(sessionId: string, stage: 'start' | 'leased'): Promise<void> {
  return new Promise<void>((arrived) =>
    gates.set(sessionId, {
      stage,
      wait: (signal) => {
        arrived();
        return abortOf(signal);
      },
    }),
  );
}

/** Like entered(), but the held preparation ends only once it was cancelled *and* the test releases it. */
function heldUntilReleased(sessionId: string): { arrived: Promise<void>; release: () => void } {
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  const arrived = new Promise<void>((resolve) =>
    gates.set(sessionId, {
      stage: 'start',
      wait: async (signal) => {
        resolve();
        await Promise.all([abortOf(signal), released]);
      },
    }),
  );
  return { arrived, release };
}

async function leaseStates(sessionId: string): Promise<string[]> {
  const { rows } = await orchard.pool.query(`SELECT state FROM worktree_leases WHERE holder LIKE $1`, [`%session/${sessionId}@%`]);
  return rows.map((r) => r.state);
}

/** Cancels and checks the common promises: bounded, answered, closed, lease released, every task terminal. */
async function cancelAndCheck(t: import('ava').ExecutionContext, sessionId: string, reason = 'test'): Promise<SessionStatusView> {
  const started = Date.now();
  const view = await orchard.client.cancel(sessionId, reason);
  t.true(Date.now() - started < 15_000, `cancel took ${Date.now() - started} ms`);
  t.is(view.status, 'closed');
  t.false(view.closing);
  const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  t.is((await handle.describe()).status.name, 'COMPLETED');
  t.false((await leaseStates(sessionId)).includes('held'));
  t.is(view.tasks!.queued + view.tasks!.running, 0, JSON.stringify(view.tasks));
  const { rows } = await orchard.pool.query(`SELECT state FROM session_tasks WHERE session_id = $1`, [sessionId]);
  t.true(
    rows.every((r) => ['done', 'failed', 'cancelled'].includes(r.state)),
    JSON.stringify(rows),
  );
  return view;
}

const scripted = (turns: unknown[]) => ({ provider: 'scripted' as const, scenario: writeScenario({ name: 'cancel', turns }) });

test('cancel during worktree preparation (before the lease) closes the session and creates no worktree', async (t) => {
  const sessionId = uniqueId('cancel-prep');
  const preparing = entered(sessionId, 'start');
  await orchard.client.createSession({ sessionId, title: 'prep', repo: makeRepo(), model: scripted([{ steps: [{ content: 'x' }] }]), task: 'never runs' });
  await preparing;
  const view = await cancelAndCheck(t, sessionId);
  t.is(view.worktree, undefined);
  t.deepEqual(
    view.recentTasks?.map((r) => [r.taskId, r.state]),
    [['t1', 'cancelled']],
  );
});

test('cancel after the lease was taken but before preparation returned releases the lease by holder', async (t) => {
  const sessionId = uniqueId('cancel-leased');
  gates.set(sessionId, { stage: 'leased', wait: abortOf });
  await orchard.client.createSession({ sessionId, title: 'leased', repo: makeRepo(), model: scripted([{ steps: [{ content: 'x' }] }]) });
  await until(async () => (await leaseStates(sessionId)).includes('held'));
  await cancelAndCheck(t, sessionId);
  t.deepEqual(await leaseStates(sessionId), ['released']);
});

test('preparation failing while a cancel is pending still closes the session and answers the cancel', async (t) => {
  const sessionId = uniqueId('cancel-fail');
  let fail!: () => void;
  const failed = new Promise<void>((resolve) => (fail = resolve));
  gates.set(sessionId, {
    stage: 'leased',
    // Ignores the cancel and fails on its own, as a preparation that breaks mid-way would.
    wait: async () => {
      await failed;
      throw new Error('disk full while creating the worktree');
    },
  });
  await orchard.client.createSession({ sessionId, title: 'fails', repo: makeRepo(), model: scripted([{ steps: [{ content: 'x' }] }]), task: 'queued' });
  await until(async () => (await leaseStates(sessionId)).includes('held'));
  const cancelled = orchard.client.cancel(sessionId, 'stop');
  await until(async () => (await orchard.client.status(sessionId)).closing);
  fail();
  const view = await cancelled;
  t.is(view.status, 'closed');
  t.deepEqual(await leaseStates(sessionId), ['released']);
  t.deepEqual(
    view.recentTasks?.map((r) => r.state),
    ['cancelled'],
  );
});

/**
 * A model that never answers its first request, on workers whose sessions' model calls beat every `BEAT_MS` (their
 * heartbeat timeout is 30 s): a cancel that waited for a session's next beat would take that long.
 */
const BEAT_MS = 25_000;
async function hangingModel(t: ExecutionContext) {
  const stub = await stubModel(t, [{ hang: true }]);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 120_000 });
  return { stub, own: await startOrchard(t, { defaultProvider: provider, sessionModelHeartbeatMs: BEAT_MS }) };
}

test('cancel during a model call aborts the request and closes the session', async (t) => {
  const { stub, own } = await hangingModel(t);
  const sessionId = uniqueId('cancel-model');
  await own.client.createSession({ sessionId, title: 'model', repo: makeRepo(), task: 'think hard' });
  await stub.arrived(1);
  const asked = Date.now();
  const view = await own.client.cancel(sessionId, 'too slow');
  // Closed because the session poked its call, which then heard its cancellation: not on the call's next beat.
  t.true(Date.now() - asked < BEAT_MS / 2, `the cancel took ${Date.now() - asked} ms`);
  t.is(view.status, 'closed');
  t.is(view.lastTurn?.outcome, 'cancelled');
  await until(() => stub.abandoned === 1 || undefined, 20_000, 'the model request aborted');
  const { rows } = await own.pool.query(`SELECT state FROM worktree_leases WHERE holder LIKE $1`, [`%session/${sessionId}@%`]);
  t.deepEqual(
    rows.map((r) => r.state),
    ['released'],
  );
  t.deepEqual(
    view.recentTasks?.map((r) => [r.taskId, r.state, r.outcome]),
    [['t1', 'cancelled', 'cancelled']],
  );
});

test("an orchestrator cancelled in a model call closes without waiting for a session's long beat", async (t) => {
  // Nothing pokes an orchestrator's call: it must not beat on the sessions' long cadence.
  const { stub, own } = await hangingModel(t);
  const orchestratorId = uniqueId('cancel-orch');
  await own.client.startOrchestrator({ orchestratorId, repo: makeRepo(), title: 'fleet' });
  await own.client.message(orchestratorId, { text: 'plan the work' });
  await stub.arrived(1);
  const asked = Date.now();
  const result = await own.client.cancelRun('orchestrator', orchestratorId, { reason: 'too slow' });
  t.true(Date.now() - asked < BEAT_MS / 2, `the cancel took ${Date.now() - asked} ms`);
  t.is(result.execution, 'CANCELLED');
  await until(() => stub.abandoned === 1 || undefined, 20_000, 'the model request aborted');
});

test('two concurrent cancels during bash both return the closed session; queued sends end cancelled; later sends are refused', async (t) => {
  const seconds = 3000 + Math.floor(Math.random() * 900);
  const sessionId = uniqueId('cancel-twice');
  await orchard.client.createSession({
    sessionId,
    title: 'twice',
    repo: makeRepo(),
    model: scripted([{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: `sleep ${seconds}` } }] }, { content: 'never' }] }]),
    task: 'sleep',
  });
  await until(() => liveProcesses(`sleep ${seconds}`).length > 0 || undefined);
  const queued = await orchard.client.send(sessionId, 'queued behind the sleep');
  t.is(queued.taskState, 'queued');

  const first = cancelAndCheck(t, sessionId, 'first');
  await until(async () => (await orchard.client.status(sessionId)).closing || (await orchard.client.status(sessionId)).status === 'closed');
  const second = orchard.client.cancel(sessionId, 'second').catch((err: unknown) => err);
  // While the cancel is under way: an update is refused with a typed code, a signal is recorded as refused.
  const refused = await orchard.client.send(sessionId, 'too late').catch((err: unknown) => err);
  await orchard.client.signalSend(sessionId, { task: 'too late, by signal', requestId: 'late-signal' }).catch(() => undefined);
  const [view, other] = await Promise.all([first, second]);
  t.true(refused instanceof OrchardError && ['session_closing', 'session_closed'].includes(refused.code), String(refused));
  // The second cancel either waited for the same close or arrived after it (then the session was already closed).
  t.true((other as SessionStatusView).status === 'closed' || (other as OrchardError).code === 'session_closed', String(other));
  t.deepEqual(liveProcesses(`sleep ${seconds}`), []);
  t.deepEqual(
    view.recentTasks?.map((r) => [r.taskId, r.state]),
    [
      ['t1', 'cancelled'],
      ['t2', 'cancelled'],
    ],
  );
  const { rows } = await orchard.pool.query(`SELECT task_id, state, reason FROM session_tasks WHERE session_id = $1 ORDER BY task_id`, [sessionId]);
  t.deepEqual(
    rows.map((r) => [r.task_id, r.state, r.reason]),
    [
      ['t1', 'cancelled', 'first'],
      ['t2', 'cancelled', 'first'],
    ],
  );
});

test('a signalled send during the cancel is recorded as refused, never queued', async (t) => {
  const seconds = 3000 + Math.floor(Math.random() * 900);
  const sessionId = uniqueId('cancel-signal');
  await orchard.client.createSession({
    sessionId,
    title: 'signal',
    repo: makeRepo(),
    model: scripted([{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: `sleep ${seconds}` } }] }, { content: 'never' }] }]),
    task: 'sleep',
  });
  await until(() => liveProcesses(`sleep ${seconds}`).length > 0 || undefined);
  // The cancel and the signal reach the workflow together; whichever way they are ordered, nothing is run.
  const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  const cancelled = orchard.client.cancel(sessionId, 'stop');
  await until(async () => (await orchard.client.status(sessionId)).closing || undefined);
  await handle.signal('send', { task: 'by signal while closing', requestId: 'sig-1' });
  const view = await cancelled;
  t.is(view.refusedSignals?.count, 1);
  t.is(view.refusedSignals?.recent[0].code, 'session_closing');
  t.deepEqual(
    view.recentTasks?.map((r) => r.taskId),
    ['t1'],
  );
});

test('cancel between turns closes an idle session', async (t) => {
  const sessionId = uniqueId('cancel-idle');
  await orchard.client.createSession({ sessionId, title: 'idle', repo: makeRepo(), model: scripted([{ steps: [{ content: 'done' }] }]), task: 'one' });
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  const view = await cancelAndCheck(t, sessionId);
  t.deepEqual(
    view.recentTasks?.map((r) => [r.taskId, r.state]),
    [['t1', 'done']],
  );
});

test('a Temporal cancellation answers a waiting cancel update before the workflow ends', async (t) => {
  const seconds = 3000 + Math.floor(Math.random() * 900);
  const sessionId = uniqueId('cancel-both');
  // The preparation stays in its cancellation until released: the Temporal cancel surely arrives while closing.
  const preparing = heldUntilReleased(sessionId);
  await orchard.client.createSession({
    sessionId,
    title: 'both',
    repo: makeRepo(),
    model: scripted([{ steps: [{ content: 'x' }] }]),
    task: `sleep ${seconds}`,
  });
  await preparing.arrived;
  const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  const update = orchard.client.cancel(sessionId, 'by update');
  await until(async () => (await orchard.client.status(sessionId)).closing || undefined);
  await handle.cancel();
  await until(async () => ((await handle.fetchHistory()).events ?? []).some((e) => e.workflowExecutionCancelRequestedEventAttributes) || undefined);
  preparing.release();
  const view = await update;
  t.is(view.status, 'closed');
  await t.throwsAsync(handle.result());
  t.false((await leaseStates(sessionId)).includes('held'));
});
