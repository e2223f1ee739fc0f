import { Client, Connection } from '@temporalio/client';
import test from 'ava';
import { freePort } from '../../worker/dev-server';
import { orchardEnv, spawnOrchard } from '../helpers/cli-process';
import { testStackEnv, uniqueId } from '../helpers/orchard';

/** Runs the real CLI to its end: exit code and stderr lines. */
async function orchard(t: import('ava').ExecutionContext, args: string[], env: NodeJS.ProcessEnv) {
  const run = spawnOrchard(t, args, env);
  const { code } = await run.exit();
  return { code, lines: run.stderr().trim().split('\n'), stderr: run.stderr() };
}

test('a Temporal that does not answer (closed port) is one temporal_unavailable line and exit 2', async (t) => {
  const port = await freePort('127.0.0.1');
  const r = await orchard(t, ['session', 'status', 'x'], orchardEnv({ TEMPORAL_ADDRESS: `127.0.0.1:${port}` }));
  t.is(r.code, 2);
  t.deepEqual(r.lines.length, 1, r.stderr);
  t.regex(r.lines[0], new RegExp(`^orchard: temporal_unavailable: cannot reach the Temporal server at 127\\.0\\.0\\.1:${port}: start it`));
});

test('a namespace that does not exist is namespace_not_found with the command that creates it', async (t) => {
  const namespace = uniqueId('ghost-ns');
  const r = await orchard(t, ['session', 'list'], orchardEnv({ TEMPORAL_NAMESPACE: namespace }));
  t.is(r.code, 2);
  t.deepEqual(r.lines.length, 1, r.stderr);
  t.regex(
    r.lines[0],
    new RegExp(`^orchard: namespace_not_found: namespace ${namespace} does not exist .*temporal operator namespace create --namespace ${namespace}`),
  );
});

test('a session whose task queue no worker polls is worker_unavailable, not a stack trace', async (t) => {
  const { temporalAddress, namespace } = testStackEnv();
  const connection = await Connection.connect({ address: temporalAddress });
  t.teardown(() => connection.close());
  const client = new Client({ connection, namespace });
  const taskQueue = uniqueId('no-worker');
  const sessionId = uniqueId('orphan');
  // A session workflow whose worker is gone: nobody polls its queue, so the status query cannot be answered.
  const handle = await client.workflow.start('childSession', { workflowId: `session/${sessionId}`, taskQueue, args: [] });
  t.teardown(() => handle.terminate('test over').catch(() => undefined));
  const r = await orchard(t, ['session', 'status', sessionId], orchardEnv({ ORCHARD_TASK_QUEUE: taskQueue }));
  t.is(r.code, 2);
  t.deepEqual(r.lines.length, 1, r.stderr);
  t.regex(r.lines[0], new RegExp(`^orchard: worker_unavailable: no worker answered on task queue ${taskQueue}: .*orchard worker`));
});

test('bad configuration is a typed line too: an unknown temporal.toml profile, a bad grace period', async (t) => {
  const profile = await orchard(t, ['session', 'list'], orchardEnv({ TEMPORAL_ADDRESS: '', TEMPORAL_PROFILE: 'nope' }));
  t.is(profile.code, 2);
  t.regex(profile.lines[0], /^orchard: temporal_config_invalid: .*profile nope/);
  t.is(profile.lines.length, 1, profile.stderr);

  const grace = await orchard(t, ['worker', '--host-only'], orchardEnv({ ORCHARD_SHUTDOWN_GRACE_SECONDS: 'soon' }));
  t.is(grace.code, 2);
  t.deepEqual(grace.lines, ['orchard: invalid_input: ORCHARD_SHUTDOWN_GRACE_SECONDS must be a number of seconds (0 or more), got "soon"']);
});
