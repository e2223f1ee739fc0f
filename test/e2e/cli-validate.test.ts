import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { runOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId } from '../helpers/orchard';

const shared = sharedOrchard(test);
const DEMO = join(__dirname, '../../scenarios/demo.json');

/** Runs the real CLI against the test run's dev server and this file's worker (its host is this machine's). */
const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));

/** True when Temporal has any execution with this workflow id (running or closed). */
async function exists(workflowId: string): Promise<boolean> {
  return shared()
    .temporal.workflow.getHandle(workflowId)
    .describe()
    .then(
      () => true,
      () => false,
    );
}

const emptyDir = () => mkdtempSync(join(tmpdir(), 'orchard-not-a-repo-'));
const repoWithoutCommit = () => {
  const dir = emptyDir();
  execFileSync('git', ['init', '-q', '-b', 'main', dir]);
  return dir;
};

/** Each bad input of `session create` is one typed line naming the thing, exit 2, and no session exists after it. */
const badCreates: [string, () => string[], string, RegExp][] = [
  ['a repository that does not exist', () => ['--repo', join(emptyDir(), 'gone')], 'repository_not_found', /gone is not a directory/],
  ['a directory that is not a git repository', () => ['--repo', emptyDir()], 'repository_not_found', /is not a git repository/],
  ['a git repository with no commit', () => ['--repo', repoWithoutCommit()], 'repository_not_found', /no commit yet/],
  [
    'a base that names no commit',
    () => ['--repo', makeRepo(), '--base', 'no-such-branch'],
    'invalid_input',
    /base ref "no-such-branch" does not name a commit/,
  ],
  ['a scenario file that does not exist', () => ['--repo', makeRepo(), '--scenario', join(emptyDir(), 'missing.json')], 'scenario_invalid', /missing\.json/],
  ['a host no worker serves', () => ['--repo', makeRepo(), '--host', 'nowhere-host'], 'host_unavailable', /host nowhere-host/],
];

for (const [what, args, code, message] of badCreates) {
  test(`session create with ${what} is refused (${code}) before anything starts`, async (t) => {
    const id = uniqueId('refused');
    const run = await orchard(['session', 'create', '--id', id, '--title', 'refused', '--task', 'do it', ...args()]);
    t.is(run.code, 2, run.stdout + run.stderr);
    t.regex(run.stderr, new RegExp(`^orchard: ${code}: `), run.stderr);
    t.regex(run.stderr, message, run.stderr);
    t.false(await exists(`session/${id}`), 'no session workflow was started');
  });
}

test('session create with a good repository, base and scenario still starts (the checks refuse only what is wrong)', async (t) => {
  const id = uniqueId('accepted');
  const run = await orchard(['session', 'create', '--id', id, '--title', 'accepted', '--repo', makeRepo(), '--base', 'main', '--scenario', DEMO]);
  t.is(run.code, 0, run.stderr);
  t.true(await exists(`session/${id}`));
});

test('orchestrator start and team start refuse a non-git directory and a missing scripted file, and start nothing', async (t) => {
  const orchestratorId = uniqueId('refused-orch');
  const notGit = await orchard(['orchestrator', 'start', orchestratorId, '--repo', emptyDir()]);
  t.is(notGit.code, 2, notGit.stderr);
  t.regex(notGit.stderr, /^orchard: repository_not_found: .*is not a git repository/);
  t.false(await exists(`orchestrator/${orchestratorId}`));

  const teamId = uniqueId('refused-team');
  const noScenario = await orchard(['team', 'start', teamId, '--repo', makeRepo(), '--goal', 'g', '--scripted', join(emptyDir(), 'team.json')]);
  t.is(noScenario.code, 2, noScenario.stderr);
  t.regex(noScenario.stderr, /^orchard: scenario_invalid: .*team\.json/);
  t.false(await exists(`team/${teamId}`));

  const elsewhere = await orchard(['team', 'start', teamId, '--repo', makeRepo(), '--goal', 'g', '--host', 'nowhere-host']);
  t.is(elsewhere.code, 2, elsewhere.stderr);
  t.regex(elsewhere.stderr, /^orchard: host_unavailable: no worker serves host nowhere-host/);
  t.false(await exists(`team/${teamId}`));
});

/** The same refusals for a repository on another host: the checks run there (a host-only worker of its own). */
for (const [what, args, code, message] of badCreates.filter(([what]) => what !== 'a host no worker serves')) {
  test(`session create on another host with ${what} is refused there (${code}) before anything starts`, async (t) => {
    const host = `${shared().hostId}-far`;
    await shared().startHost(host, { hostOnly: true });
    const id = uniqueId('refused-far');
    const run = await orchard(['session', 'create', '--id', id, '--title', 'refused', '--task', 'do it', '--host', host, ...args()]);
    t.is(run.code, 2, run.stdout + run.stderr);
    t.regex(run.stderr, new RegExp(`^orchard: ${code}: on host ${host}: `), run.stderr);
    t.regex(run.stderr, message, run.stderr);
    t.false(await exists(`session/${id}`), 'no session workflow was started');
  });
}

test('session create on another host with a good repository starts there', async (t) => {
  const host = `${shared().hostId}-far-ok`;
  await shared().startHost(host, { hostOnly: true });
  const id = uniqueId('accepted-far');
  const run = await orchard([
    'session',
    'create',
    '--id',
    id,
    '--title',
    'far',
    '--host',
    host,
    '--repo',
    makeRepo(),
    '--scenario',
    DEMO,
    '--task',
    'Create NOTES.md',
  ]);
  t.is(run.code, 0, run.stderr);
  const view = await shared().client.waitUntilSettled(id, { afterTurn: 1, timeoutMs: 60_000 });
  t.like(view, { host, lastTurn: { outcome: 'finished' } });
});
