import { copyFileSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { orchardEnv, processesWithCommandLine, spawnOrchard, until } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);
const DEMO = join(__dirname, '../../scenarios/demo.json');

/** The demo scenario under a path of its own: a needle that only this test's processes carry on their command line. */
function uniqueScenario(): string {
  const path = join(mkdtempSync(join(tmpdir(), 'orchard-proc-')), 'scenario.json');
  copyFileSync(DEMO, path);
  return path;
}

test('orchard worker is one process: a SIGKILL of the pid the supervisor started leaves no worker running', async (t) => {
  const scenario = uniqueScenario();
  const env = orchardEnv({ ORCHARD_TASK_QUEUE: uniqueId('proc'), ORCHARD_HOST_ID: uniqueId('proc-host') });
  const worker = spawnOrchard(t, ['worker', '--scripted', scenario], env);
  await worker.waitFor(/worker for /);

  // The pid we started is node running the CLI itself, and the only process carrying this worker's arguments.
  const cmdline = readFileSync(`/proc/${worker.pid}/cmdline`, 'utf8').split('\0');
  t.true(
    cmdline.some((arg) => arg.endsWith('dist/cli/cli.js')),
    cmdline.join(' '),
  );
  t.deepEqual(processesWithCommandLine(scenario), [worker.pid]);

  worker.child.kill('SIGKILL');
  t.is((await worker.exit()).signal, 'SIGKILL');
  await new Promise((r) => setTimeout(r, 500));
  t.deepEqual(processesWithCommandLine(scenario), [], 'no orchard worker process survives the SIGKILL');
});

/** A host-only worker process for `hostId` and a session whose one bash call runs `command` on it. */
async function sessionOnWorkerProcess(t: import('ava').ExecutionContext, graceSeconds: number, command: string) {
  const hostId = uniqueId('deploy-host');
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-deploy-'));
  const env = orchardEnv({ ORCHARD_HOST_ID: hostId, ORCHARD_WORKTREE_ROOT: worktreeRoot, ORCHARD_SHUTDOWN_GRACE_SECONDS: String(graceSeconds) });
  const worker = spawnOrchard(t, ['worker', '--host-only'], env);
  await worker.waitFor(/worker for /);
  const scenario = writeScenario({
    name: 'deploy',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command } }] }, { content: 'after the deploy' }] }],
  });
  const sessionId = uniqueId('deploy');
  await shared().client.createSession({
    sessionId,
    title: 'deploy',
    repo: makeRepo(),
    host: hostId,
    model: { provider: 'scripted', scenario },
    task: 'build it',
  });
  const runsLog = join(worktreeRoot, sessionId, 'runs.log');
  await until(() => existsSync(runsLog), 60_000, 'the command started');
  return { worker, sessionId, runsLog };
}

test('SIGTERM: the worker stops polling, lets a running command finish within the grace period, then exits 0', async (t) => {
  const { worker, sessionId, runsLog } = await sessionOnWorkerProcess(t, 60, 'echo started >> runs.log; sleep 3; echo finished >> runs.log');
  const signalled = Date.now();
  worker.child.kill('SIGTERM');
  const exit = await worker.exit();
  t.is(exit.code, 0, worker.stderr());
  // It waited for the command (which had most of its 3 s left) instead of cutting it short.
  t.true(Date.now() - signalled >= 1500, `exited ${Date.now() - signalled} ms after SIGTERM`);
  t.deepEqual(readFileSync(runsLog, 'utf8').trim().split('\n'), ['started', 'finished']);
  t.regex(worker.stdout(), /SIGTERM: no new work is taken; running activities have 60s to finish/);
  t.regex(worker.stdout(), /stopped/);

  // The command's result was recorded: the turn goes on (its model step runs on the shared queue) and finishes.
  const view = await shared().client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 60_000 });
  t.is(view.lastTurn?.outcome, 'finished');
  const dispatch = await shared().pool.query(`SELECT state FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
  t.deepEqual(dispatch.rows, [{ state: 'settled' }]);
});

test('SIGTERM: a command longer than the grace period is cancelled when it expires, and the worker exits', async (t) => {
  const seconds = 300 + Math.floor(Math.random() * 600);
  const { worker, runsLog } = await sessionOnWorkerProcess(t, 2, `echo started >> runs.log; sleep ${seconds}; echo finished >> runs.log`);
  const signalled = Date.now();
  worker.child.kill('SIGTERM');
  const exit = await worker.exit();
  const elapsed = Date.now() - signalled;
  t.is(exit.code, 0, worker.stderr());
  t.true(elapsed >= 1900, `waited out the 2 s grace period (exited after ${elapsed} ms)`);
  t.true(elapsed < 30_000, `did not wait for the ${seconds} s command (exited after ${elapsed} ms)`);
  t.deepEqual(readFileSync(runsLog, 'utf8').trim().split('\n'), ['started']);
  t.deepEqual(processesWithCommandLine(`sleep ${seconds}`), [], 'the cancelled command was torn down');
});

test('orchard worker without a model configuration refuses to start and says how to configure one', async (t) => {
  const worker = spawnOrchard(t, ['worker'], orchardEnv());
  const exit = await worker.exit();
  t.is(exit.code, 2);
  const lines = worker.stderr().trim().split('\n');
  t.is(lines.length, 1, worker.stderr());
  t.regex(lines[0], /^orchard: model_not_configured: .*ORCHARD_MODEL_URL.*ORCHARD_MODEL.*--scripted <scenario\.json>/);

  const half = spawnOrchard(t, ['worker'], orchardEnv({ ORCHARD_MODEL_URL: 'http://127.0.0.1:9/v1' }));
  t.is((await half.exit()).code, 2);
  t.regex(half.stderr().trim(), /^orchard: invalid_input: ORCHARD_MODEL must name the model/);
});
