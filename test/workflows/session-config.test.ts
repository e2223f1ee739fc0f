import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { OrchardError } from '../../client/client';
import { sessionWorkflowId } from '../../contract/messages';
import { completion, stubModel } from '../helpers/model-stub';
import { makeRepo, startOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const looping = () => writeScenario({ name: 'loop', turns: [{ repeat: true, steps: [{ tool_calls: [{ name: 'git_status' }], repeat: true }] }] });

test('limits come from the worker environment once, when a session starts: a later change reaches only new sessions', async (t) => {
  const env: NodeJS.ProcessEnv = { ORCHARD_MAX_STEPS_PER_TURN: '2' };
  const orchard = await startOrchard(t, { env });
  const scenario = looping();
  const first = uniqueId('limits');
  await orchard.client.createSession({ sessionId: first, title: 'limits', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'loop' });
  const before = await orchard.client.waitUntilSettled(first, { afterTurn: 1 });
  t.is(before.limits?.maxStepsPerTurn, 2);
  t.like(before.lastTurn, { outcome: 'step_limit', steps: 2 });

  // The operator changes the worker's environment: the running session keeps what it resolved at its start.
  env.ORCHARD_MAX_STEPS_PER_TURN = '4';
  await orchard.client.send(first, 'loop again');
  const after = await orchard.client.waitUntilSettled(first, { afterTurn: 2 });
  t.like(after.lastTurn, { outcome: 'step_limit', steps: 2 });
  const second = uniqueId('limits');
  await orchard.client.createSession({ sessionId: second, title: 'limits', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'loop' });
  const fresh = await orchard.client.waitUntilSettled(second, { afterTurn: 1 });
  t.like(fresh.lastTurn, { outcome: 'step_limit', steps: 4 });
  // What the creator asked for wins over the worker's default.
  const third = uniqueId('limits');
  await orchard.client.createSession({
    sessionId: third,
    title: 'limits',
    repo: makeRepo(),
    model: { provider: 'scripted', scenario },
    limits: { maxStepsPerTurn: 3 },
    task: 'loop',
  });
  t.like((await orchard.client.waitUntilSettled(third, { afterTurn: 1 })).lastTurn, { steps: 3 });
});

test('a retried create with the same request id starts one session and queues its task once', async (t) => {
  const orchard = await startOrchard(t);
  const sessionId = uniqueId('idem');
  const scenario = writeScenario({ name: 'once', turns: [{ repeat: true, steps: [{ content: 'done' }] }] });
  const request = { sessionId, title: 'once', repo: makeRepo(), model: { provider: 'scripted' as const, scenario }, task: 'only once', requestId: 'create-1' };
  // A client that retries because the first answer was lost: the same request, twice at once, then once more.
  const [a, b] = await Promise.all([orchard.client.createSession(request), orchard.client.createSession(request)]);
  const c = await orchard.client.createSession(request);
  t.deepEqual([a.outcome, b.outcome, c.outcome], ['created', 'created', 'created']);
  t.is(new Set([a.task?.taskId, b.task?.taskId, c.task?.taskId]).size, 1);
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.deepEqual(view.tasks, { queued: 0, running: 0, done: 1, failed: 0, cancelled: 0 });
  const description = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe();
  t.is(description.raw.workflowExecutionInfo?.firstRunId, description.runId);
  const { rows } = await orchard.pool.query(`SELECT task FROM session_tasks WHERE session_id = $1`, [sessionId]);
  t.deepEqual(rows, [{ task: 'only once' }]);
  // Another request for the running session binds to it.
  const other = await orchard.client.createSession({ ...request, requestId: 'create-2', task: 'routed' });
  t.is(other.outcome, 'bound');
  // The first task does not travel in the workflow's input (continue-as-new never carries it again).
  const history = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  const started = history.events?.[0].workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  t.notRegex(Buffer.from(started!.data!).toString(), /only once/);
});

test('create with an empty task says what is wrong with the create', async (t) => {
  const orchard = await startOrchard(t);
  const err = await t.throwsAsync(orchard.client.createSession({ sessionId: uniqueId('empty'), title: 'x', repo: makeRepo(), task: '  ' }), {
    instanceOf: OrchardError,
  });
  t.is((err as OrchardError).code, 'task_empty');
  t.regex((err as OrchardError).message, /^create /);
});

test('every handler of the session workflow carries a description the Web UI shows', async (t) => {
  const orchard = await startOrchard(t);
  const sessionId = uniqueId('described');
  await orchard.client.createSession({ sessionId, title: 'described', repo: makeRepo(), model: { provider: 'scripted', scenario: looping() } });
  const metadata = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).query<any>('__temporal_workflow_metadata');
  const definitions = metadata.definition;
  const handlers = [...definitions.queryDefinitions, ...definitions.signalDefinitions, ...definitions.updateDefinitions].filter(
    (d: { name: string }) => !d.name.startsWith('__'),
  );
  t.deepEqual(handlers.map((d: { name: string }) => d.name).sort(), [
    'cancel',
    'create',
    'resolveHold',
    'send',
    'send',
    'setBudget',
    'status',
    'transcriptRefs',
  ]);
  for (const d of handlers) t.true(typeof d.description === 'string' && d.description.length > 10, d.name);
});

test('tool calls that share an id from the model are told apart: each runs and gets its own result', async (t) => {
  const stub = await stubModel(t, [
    completion(
      {
        tool_calls: [
          { id: 'dup', type: 'function', function: { name: 'bash', arguments: '{"command":"echo first-call"}' } },
          { id: 'dup', type: 'function', function: { name: 'bash', arguments: '{"command":"echo second-call"}' } },
        ],
      },
      'tool_calls',
    ),
    completion({ content: 'done' }),
  ]);
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 }) });
  const sessionId = uniqueId('dup-ids');
  await orchard.client.createSession({ sessionId, title: 'dup', repo: makeRepo(), task: 'two calls, one id' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.like(view.lastTurn, { outcome: 'finished', toolCalls: 2 });
  const sent = stub.requests[1].body.messages;
  const calls = sent.find((m: any) => m.role === 'assistant').tool_calls.map((c: any) => c.id);
  t.is(new Set(calls).size, 2);
  const results = sent.filter((m: any) => m.role === 'tool');
  t.deepEqual(
    results.map((m: any) => m.tool_call_id),
    calls,
  );
  t.regex(results[0].content, /first-call/);
  t.regex(results[1].content, /second-call/);
});
