import { join } from 'node:path';
import test from 'ava';
import { runOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId } from '../helpers/orchard';

const shared = sharedOrchard(test);
const DEMO = join(__dirname, '../../scenarios/demo.json');

/** Runs the real CLI against the test run's dev server and this file's worker. */
const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));

test('the CLI creates a session, sends it a second task and shows it in status and list', async (t) => {
  const id = uniqueId('cli');
  const repo = makeRepo();
  const created = await orchard([
    'session',
    'create',
    '--repo',
    repo,
    '--title',
    'cli demo',
    '--id',
    id,
    '--scenario',
    DEMO,
    '--task',
    'Create NOTES.md please',
  ]);
  t.is(created.code, 0, created.stderr);
  t.regex(created.stdout, new RegExp(`created session ${id}`));
  await shared().client.waitUntilSettled(id, { afterTurn: 1 });

  const sent = await orchard(['session', 'send', id, 'Add', 'a', 'CHANGELOG', 'entry', '--wait', '--json']);
  t.is(sent.code, 0, sent.stderr);
  const view = JSON.parse(sent.stdout);
  t.is(view.sessionId, id);
  t.is(view.turnsCompleted, 2);
  t.is(view.lastTurn.outcome, 'finished');

  const status = await orchard(['session', 'status', id]);
  t.is(status.code, 0);
  t.regex(status.stdout, /\| idle/);

  // Visibility is eventually consistent: the list shows the session once its search attributes are indexed.
  let listed = '';
  for (let i = 0; i < 50 && !listed.includes(id); i++) {
    listed = (await orchard(['session', 'list'])).stdout;
    if (!listed.includes(id)) await new Promise((r) => setTimeout(r, 200));
  }
  t.regex(listed, new RegExp(`${id} \\| cli demo \\| coder \\| idle`));
});

test('the CLI refuses a send to an unknown session with a typed error and exit code 2', async (t) => {
  const result = await orchard(['session', 'send', uniqueId('ghost'), 'hello']);
  t.is(result.code, 2);
  t.regex(result.stderr, /session_not_found/);
});

test('the CLI create is idempotent by --request-id and status shows every task with its terminal state', async (t) => {
  const id = uniqueId('cli-idem');
  const repo = makeRepo();
  const args = [
    'session',
    'create',
    '--repo',
    repo,
    '--title',
    'idempotent',
    '--id',
    id,
    '--scenario',
    DEMO,
    '--task',
    'Create NOTES.md please',
    '--request-id',
    'ticket-7',
  ];
  const [a, b] = [await orchard(args), await orchard(args)];
  t.is(a.code, 0, a.stderr);
  t.regex(a.stdout, new RegExp(`created session ${id}`));
  t.regex(b.stdout, new RegExp(`created session ${id}`), 'a retried create is answered as the create it repeats');
  await shared().client.waitUntilSettled(id, { afterTurn: 1 });
  const status = await orchard(['session', 'status', id]);
  t.regex(status.stdout, /tasks: 1 done, 0 failed, 0 cancelled, 0 queued/);
  const empty = await orchard(['session', 'create', '--repo', repo, '--title', 'x', '--id', uniqueId('cli-empty'), '--task', ' ']);
  t.is(empty.code, 2);
  t.regex(empty.stderr, /orchard: task_empty: create /);
});
