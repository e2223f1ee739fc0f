import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { ORCHARD_BIN } from '../helpers/cli-process';

const run = promisify(execFile);
const ROOT = join(__dirname, '../..');

/** Runs the real, compiled `bin/orchard guard …` (npm test builds dist/ first). */
async function guard(args: string[], cwd = ROOT): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(ORCHARD_BIN, ['guard', ...args], { cwd, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const session = ['--branch', 'orchard/s1/work', '--worktree', '/work/wt/s1'];

test('an allowed command exits 0 and says allow', async (t) => {
  const r = await guard([...session, '--', 'git push origin HEAD']);
  t.is(r.code, 0, r.stderr);
  t.is(r.stdout.trim(), 'allow: git push origin HEAD');
});

test('a refused command exits 3 with the reason, why and what to do instead', async (t) => {
  const r = await guard([...session, '--', "bash -lc 'git merge main'"]);
  t.is(r.code, 3, r.stderr);
  t.regex(r.stdout, /^deny \(integration_policy\): git merge main$/m);
  t.regex(r.stdout, /^why: inside `bash -c`: /m);
  t.regex(r.stdout, /^instead: .*session send <orchestrator> "/m);
});

test('--json prints the decision as JSON', async (t) => {
  const denied = await guard([...session, '--json', '--', 'git push origin HEAD:main']);
  t.is(denied.code, 3, denied.stderr);
  const d = JSON.parse(denied.stdout);
  t.like(d, {
    decision: 'deny',
    allowed: false,
    reason: 'moves_other_ref',
    refused: 'git push origin HEAD:main',
    branch: 'orchard/s1/work',
    worktree: '/work/wt/s1',
  });
  t.true(typeof d.why === 'string' && typeof d.instead === 'string');

  const allowed = await guard([...session, '--json', '--', 'git status']);
  t.is(allowed.code, 0, allowed.stderr);
  t.deepEqual(JSON.parse(allowed.stdout), { decision: 'allow', command: 'git status', branch: 'orchard/s1/work', worktree: '/work/wt/s1', allowed: true });
});

test('the worktree defaults to the current directory', async (t) => {
  const inside = await guard(['--branch', 'orchard/s1/work', '--json', '--', 'git -C test status']);
  t.is(inside.code, 0, inside.stdout);
  t.is(JSON.parse(inside.stdout).worktree, ROOT);
  const outside = await guard(['--branch', 'orchard/s1/work', '--', 'git -C .. status']);
  t.is(outside.code, 3);
  t.regex(outside.stdout, /outside_worktree/);
});

test('bad usage exits 2', async (t) => {
  const noBranch = await guard(['--worktree', '/work/wt/s1', '--', 'git status']);
  t.is(noBranch.code, 2);
  t.regex(noBranch.stderr, /--branch/);
  t.is((await guard([...session])).code, 2, 'no command');
  t.is((await guard([...session, '--', '   '])).code, 2, 'an empty command');
  t.is((await guard([...session, '--frobnicate', '--', 'git status'])).code, 2, 'an unknown option');
});
