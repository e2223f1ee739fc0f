import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { ORCHARD_BIN, runOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);
const DEMO = join(__dirname, '../../scenarios/demo.json');

/** Runs the real CLI with `stdin` as its standard input (asynchronously: this process's worker must keep working). */
function withStdin(args: string[], stdin: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(ORCHARD_BIN, args, { env: { ...process.env, ...workerEnv(shared()) }, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdin.end(stdin);
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

test('--version prints the version in package.json and exits 0', async (t) => {
  const { version } = JSON.parse(readFileSync(join(__dirname, '../../package.json'), 'utf8')) as { version: string };
  const run = await runOrchard(['--version']);
  t.is(run.code, 0, run.stderr);
  t.is(run.stdout.trim(), version);
});

test('a task of `-` is read from stdin, also one longer than the OS allows in one argument (200 KB)', async (t) => {
  const id = uniqueId('stdin');
  const created = await withStdin(
    ['session', 'create', '--id', id, '--title', 'stdin', '--repo', makeRepo(), '--scenario', DEMO, '--task', '-', '--json'],
    'Create NOTES.md please',
  );
  t.is(created.code, 0, created.stderr);
  t.is((JSON.parse(created.stdout) as { outcome: string }).outcome, 'created');

  const long = `Read this and do nothing: ${'x'.repeat(200 * 1024)}`;
  const sent = await withStdin(['session', 'send', id, '-', '--json'], long);
  t.is(sent.code, 0, sent.stderr);
  const { taskId } = JSON.parse(sent.stdout) as { taskId: string };
  // The session holds the whole text: its transcript's user message for that task is the 200 KB read from stdin.
  const { rows } = await shared().pool.query<{ task: string }>('SELECT task FROM session_tasks WHERE session_id = $1 AND task_id = $2', [id, taskId]);
  t.is(rows[0]?.task, long);

  const empty = await withStdin(['session', 'send', id, '-'], '');
  t.is(empty.code, 2);
  t.regex(empty.stderr, /^orchard: task_empty: /);

  // Over the limit (262,144 characters): refused before it reaches the session, which queues nothing.
  const before = await shared().client.status(id);
  const tooLarge = await withStdin(['session', 'send', id, '-'], 'y'.repeat(262_145));
  t.is(tooLarge.code, 2);
  t.regex(tooLarge.stderr, /^orchard: task_too_large: /);
  const after = await shared().client.status(id);
  t.is(
    Object.values(after.tasks ?? {}).reduce((a, b) => a + b, 0),
    Object.values(before.tasks ?? {}).reduce((a, b) => a + b, 0),
  );
});

test('session create --context - reads the handoff from stdin and stores it for the session; one over its cap is context_too_large and starts nothing', async (t) => {
  const id = uniqueId('handoff');
  const handoff = `Handoff from the last session: ${'the cache key includes the locale. '.repeat(100)}`;
  const created = await withStdin(
    [
      'session',
      'create',
      '--id',
      id,
      '--title',
      'handoff',
      '--repo',
      makeRepo(),
      '--scenario',
      DEMO,
      '--task',
      'Create NOTES.md please',
      '--context',
      '-',
      '--json',
    ],
    handoff,
  );
  t.is(created.code, 0, created.stderr);
  const { rows } = await shared().pool.query<{ handoff: string }>('SELECT handoff FROM session_starting_context WHERE session_id = $1', [id]);
  t.deepEqual(rows, [{ handoff }]);
  // The scripted model counts the session's own turns: the handoff before the task is not its turn 1.
  const settled = await shared().client.waitUntilSettled(id, { afterTurn: 1 });
  t.is(settled.lastTurn?.outcome, 'finished', JSON.stringify(settled.lastTurn));

  const refused = uniqueId('handoff');
  const tooLarge = await withStdin(['session', 'create', '--id', refused, '--title', 'big', '--repo', makeRepo(), '--context', '-'], 'z'.repeat(65_537));
  t.is(tooLarge.code, 2);
  t.regex(tooLarge.stderr, /^orchard: context_too_large: /);
  const err = await t.throwsAsync(shared().client.status(refused));
  t.is((err as { code?: string }).code, 'session_not_found', err?.message);

  const twice = await withStdin(['session', 'create', '--id', refused, '--title', 'x', '--repo', makeRepo(), '--task', '-', '--context', '-'], 'a');
  t.is(twice.code, 2);
  t.regex(twice.stderr, /^orchard: invalid_input: stdin can be read once/);
});

test('--json errors are one JSON object on stdout, {error: {code, message}}, with the same exit code', async (t) => {
  const run = await runOrchard(['session', 'status', uniqueId('nobody'), '--json'], workerEnv(shared()));
  t.is(run.code, 2, run.stderr);
  const answer = JSON.parse(run.stdout) as { error: { code: string; message: string } };
  t.is(answer.error.code, 'session_not_found');
  t.true(answer.error.message.length > 0);
  t.is(run.stderr, '');
});

test('a usage error is one line and a pointer to --help, not the whole help text', async (t) => {
  const run = await runOrchard(['session', 'create', '--title', 'no repo']);
  t.is(run.code, 2);
  const lines = run.stderr.trim().split('\n');
  t.true(lines.length <= 2, run.stderr);
  t.regex(run.stderr, /--repo/);
});

test('send --wait exits 3 when the turn that answered failed, 0 when it finished; the status is printed either way', async (t) => {
  const id = uniqueId('wait');
  // One scripted turn: the first task finishes, the second finds the scenario exhausted and its turn fails.
  const scenario = writeScenario({ name: 'one turn', turns: [{ steps: [{ content: 'done' }] }] });
  const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));
  t.is((await orchard(['session', 'create', '--id', id, '--title', 'wait', '--repo', makeRepo(), '--scenario', scenario])).code, 0);
  const finished = await orchard(['session', 'send', id, 'the first task', '--wait', '--json']);
  t.is(finished.code, 0, finished.stderr);
  t.is((JSON.parse(finished.stdout) as { lastTurn: { outcome: string } }).lastTurn.outcome, 'finished');

  const failed = await orchard(['session', 'send', id, 'a second task', '--wait', '--json']);
  t.is(failed.code, 3, failed.stdout + failed.stderr);
  const view = JSON.parse(failed.stdout) as { lastTurn: { outcome: string; error?: { code: string } } };
  t.is(view.lastTurn.outcome, 'failed');
  t.is(view.lastTurn.error?.code, 'scenario_exhausted');
});

test('team start --help gives --member one default, the members a team gets without it', async (t) => {
  const run = await runOrchard(['team', 'start', '--help']);
  t.is(run.code, 0, run.stderr);
  const member = run.stdout.slice(run.stdout.indexOf('--member'), run.stdout.indexOf('--host'));
  t.is(member.match(/default/g)?.length, 1, member);
  t.regex(member.replace(/\s+/g, ' '), /\(default: planner:Planner implementer:Implementer reviewer:Reviewer tester:Tester\)/);
});
