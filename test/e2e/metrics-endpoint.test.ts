import { freePort } from '../../worker/dev-server';
import test from 'ava';
import { orchardEnv, spawnOrchard } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

/**
 * Issue 21, deliverable 7, as an operator runs it: `orchard worker --metrics-port` serves Orchard's metrics at
 * /metrics and the Temporal SDK's (exported by the worker's runtime) at /metrics/temporal. The worker here is a
 * host-only process; a session on its host has a bash call refused by the guard, which that process counts.
 */
test('orchard worker --metrics-port serves /metrics (counting what its activities refused) and the SDK metrics at /metrics/temporal', async (t) => {
  const hostId = uniqueId('metrics-host');
  const port = await freePort('127.0.0.1');
  const env = orchardEnv({ ORCHARD_HOST_ID: hostId, ...(process.env.ORCHARD_TEST_NO_SANDBOX ? { ORCHARD_SANDBOX: 'off' } : {}) });
  const worker = spawnOrchard(t, ['worker', '--host-only', '--metrics-port', String(port)], env);
  await worker.waitFor(/worker for /);
  t.regex(worker.stdout(), new RegExp(`metrics: http://localhost:${port}/metrics`));

  const before = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  t.regex(before, /^# TYPE orchard_tool_refusals_total counter$/m);
  t.notRegex(before, /^orchard_tool_refusals_total\{/m, 'nothing refused yet');

  const sessionId = uniqueId('metrics-session');
  const scenario = writeScenario({
    name: 'refused',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'git checkout main' } }] }, { content: 'refused' }] }],
  });
  await shared().client.createSession({
    sessionId,
    title: 'm',
    repo: makeRepo(),
    host: hostId,
    isolated: true,
    model: { provider: 'scripted', scenario },
    task: 'switch',
  });
  const view = await shared().client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 60_000 });
  t.is(view.lastTurn?.outcome, 'finished');

  const after = await fetch(`http://127.0.0.1:${port}/metrics`);
  t.is(after.status, 200);
  t.regex(await after.text(), /^orchard_tool_refusals_total\{role="session",reason="switches_branch"\} 1$/m);

  const sdk = await fetch(`http://127.0.0.1:${port}/metrics/temporal`);
  t.is(sdk.status, 200);
  // The host queue's activity ran on this worker: the SDK counted it.
  t.regex(await sdk.text(), /^temporal_activity_execution_latency\w*\{.*activity_type="executeTool"/m);
  t.is((await fetch(`http://127.0.0.1:${port}/nothing`)).status, 404);
});
