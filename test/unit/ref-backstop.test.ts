import test from 'ava';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import {
  CHAINED_HOOK,
  installRefBackstop,
  ISOLATED_BRANCH_ENV,
  isolatedBranch,
  markWorktreeIsolated,
  REF_BACKSTOP_HOOK,
  unmarkWorktree,
} from '../../activities/git/backstop';

import { GIT_TEST_ENV, gitIn } from '../helpers/git';
const git = gitIn;

/** The value of `ref`, or '' when it does not exist. */
function rev(cwd: string, ref: string): string {
  const r = spawnSync('git', ['rev-parse', '--verify', '--quiet', ref], { cwd, env: GIT_TEST_ENV, encoding: 'utf8' });
  return r.stdout.trim();
}

/** Runs `body` as a script file in `cwd` (`bash ./script.sh`), the way a build script would run git. */
function script(cwd: string, body: string, env: NodeJS.ProcessEnv = {}) {
  const file = path.join(cwd, 'evil.sh');
  writeFileSync(file, `set -e\n${body}\n`);
  const r = spawnSync('bash', ['./evil.sh'], { cwd, env: { ...GIT_TEST_ENV, ...env }, encoding: 'utf8' });
  rmSync(file, { force: true });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/**
 * A repository on `main` (plus branch `other`) with a bare remote, the backstop installed, an isolated child
 * worktree on `orchard/c1` one commit ahead, and an ordinary member worktree on `orchard/m1`.
 */
async function fixture(options: { install?: boolean } = {}) {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-backstop-'));
  created.push(base);
  const remote = path.join(base, 'remote.git');
  const repo = path.join(base, 'repo');
  const child = path.join(base, 'worktrees', 'c1');
  const member = path.join(base, 'worktrees', 'm1');
  git(base, 'init', '--quiet', '--bare', remote);
  git(base, 'init', '--quiet', '-b', 'main', repo);
  writeFileSync(path.join(repo, 'README.md'), '# demo\n');
  git(repo, 'add', '.');
  git(repo, 'commit', '--quiet', '-m', 'initial');
  git(repo, 'branch', 'other');
  git(repo, 'remote', 'add', 'origin', remote);
  const install = options.install === false ? undefined : await installRefBackstop(repo);
  git(repo, 'worktree', 'add', '--quiet', '-b', 'orchard/c1', child);
  git(repo, 'worktree', 'add', '--quiet', '-b', 'orchard/m1', member);
  await markWorktreeIsolated(child, 'orchard/c1');
  writeFileSync(path.join(child, 'work.txt'), 'child work\n');
  git(child, 'add', 'work.txt');
  git(child, 'commit', '--quiet', '-m', 'child work');
  return { base, remote, repo, child, member, install };
}

const SHARED = ['refs/heads/main', 'refs/heads/other', 'refs/heads/orchard/m1', 'refs/stash', 'refs/tags/x'];

function snapshot(repo: string, refs = SHARED): Record<string, string> {
  return Object.fromEntries(refs.map((r) => [r, rev(repo, r)]));
}

const refusedFromScript: Array<[string, string]> = [
  ['branch -f of another branch', 'git branch -f other HEAD'],
  ['update-ref of the main checkout’s branch', 'git update-ref refs/heads/main HEAD'],
  ['deleting another branch', 'git update-ref -d refs/heads/other'],
  ['a stash (refs/stash is shared)', 'echo dirty >> README.md\ngit stash'],
  ['a tag', 'git tag x'],
  ['the main worktree’s HEAD by name', 'git update-ref main-worktree/HEAD HEAD'],
  ['another linked worktree’s HEAD by name', 'git update-ref worktrees/m1/HEAD HEAD'],
  ['a new branch', 'git branch newbranch'],
  ['checkout -b of a new branch', 'git checkout -b newbranch'],
  ['update-ref --stdin', 'echo "update refs/heads/other $(git rev-parse HEAD)" | git update-ref --stdin'],
  ['fetch into another branch', 'git fetch . HEAD:other'],
  ['push into another branch of the same repository', 'git push . HEAD:other'],
  ['notes', 'git notes add -m note HEAD'],
];

for (const [name, body] of refusedFromScript) {
  test(`a script in an isolated child cannot move shared refs: ${name}`, async (t) => {
    const { repo, child } = await fixture();
    const before = snapshot(repo);
    const result = script(child, body);
    t.not(result.status, 0, result.stderr);
    t.regex(result.stderr, /orchard: refused to update/);
    t.deepEqual(snapshot(repo), before);
    t.is(rev(repo, 'refs/heads/newbranch'), '');
    t.is(rev(repo, 'refs/notes/commits'), '');
    t.is(git(repo, 'symbolic-ref', 'HEAD'), 'refs/heads/main');
    t.is(git(path.join(path.dirname(child), 'm1'), 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/m1');
  });
}

test('a refused stash leaves the child’s changes in its working tree', async (t) => {
  const { child } = await fixture();
  const result = script(child, 'echo dirty >> README.md\ngit stash');
  t.not(result.status, 0);
  t.is(readFileSync(path.join(child, 'README.md'), 'utf8'), '# demo\ndirty\n');
});

test('stash pop in an isolated child cannot drop the main checkout’s stash entry', async (t) => {
  const { repo, child } = await fixture();
  writeFileSync(path.join(repo, 'README.md'), '# demo\nmain wip\n');
  git(repo, 'stash', '--quiet');
  const stash = rev(repo, 'refs/stash');
  const result = script(child, 'git stash pop');
  t.not(result.status, 0);
  t.is(rev(repo, 'refs/stash'), stash);
  t.is(git(repo, 'stash', 'list').split('\n').length, 1);
});

test('a script in an isolated child still commits, moves and pushes its own branch', async (t) => {
  const { repo, child, remote } = await fixture();
  const before = snapshot(repo);
  const result = script(
    child,
    [
      'echo more >> work.txt',
      'git commit --quiet -am more',
      'git update-ref refs/heads/orchard/c1 HEAD~1',
      'git reset --quiet --hard HEAD@{1}',
      'git update-ref refs/worktree/scratch HEAD',
      'git push --quiet origin HEAD',
    ].join('\n'),
  );
  t.is(result.status, 0, result.stderr);
  const head = rev(child, 'HEAD');
  t.is(git(child, 'log', '-1', '--format=%s'), 'more');
  t.is(rev(repo, 'refs/heads/orchard/c1'), head);
  t.is(rev(repo, 'refs/remotes/origin/orchard/c1'), head);
  t.is(rev(remote, 'refs/heads/orchard/c1'), head);
  t.deepEqual(snapshot(repo), before);
});

test('git itself, not the backstop, refuses branch -f of the branch checked out in the child', async (t) => {
  const { child } = await fixture();
  const result = script(child, 'git branch -f orchard/c1 HEAD~0');
  t.not(result.status, 0);
  t.notRegex(result.stderr, /orchard: refused/);
  t.regex(result.stderr, /cannot force update the branch 'orchard\/c1'/);
});

test('the main worktree and an unmarked worktree are not restricted', async (t) => {
  const { repo, member } = await fixture();
  writeFileSync(path.join(repo, 'main.txt'), 'main\n');
  t.is(script(repo, 'git add main.txt\ngit commit --quiet -m main\ngit branch -f other HEAD').status, 0);
  t.is(rev(repo, 'refs/heads/other'), rev(repo, 'refs/heads/main'));
  const result = script(member, 'git commit --quiet --allow-empty -m m\ngit branch -f other HEAD\ngit tag x');
  t.is(result.status, 0, result.stderr);
  t.is(rev(repo, 'refs/heads/other'), rev(member, 'HEAD'));
  t.is(rev(repo, 'refs/tags/x'), rev(member, 'HEAD'));
});

test('unmarking a worktree lifts the restriction; marking is checked', async (t) => {
  const { repo, child } = await fixture();
  t.is(await isolatedBranch(child), 'orchard/c1');
  t.is(await isolatedBranch(repo), undefined);
  await unmarkWorktree(child);
  await unmarkWorktree(child);
  t.is(await isolatedBranch(child), undefined);
  t.is(script(child, 'git branch -f other HEAD').status, 0);
  t.is(rev(repo, 'refs/heads/other'), rev(child, 'HEAD'));
  await t.throwsAsync(markWorktreeIsolated(repo, 'main'), { message: /main worktree/ });
  await t.throwsAsync(markWorktreeIsolated(child, 'bad..name'), { message: /not a valid branch name/ });
  await unmarkWorktree(path.join(repo, 'no-such-worktree'));
});

test('installing twice is idempotent, and an older version of our hook is replaced', async (t) => {
  const { repo, install } = await fixture();
  const hookPath = path.join(repo, '.git', 'hooks', 'reference-transaction');
  t.deepEqual(install, { hookPath, installed: true, chained: undefined });
  t.deepEqual(await installRefBackstop(repo), { hookPath, installed: false, chained: undefined });
  t.is(readFileSync(hookPath, 'utf8'), REF_BACKSTOP_HOOK);
  t.is(statSync(hookPath).mode & 0o777, 0o755);
  writeFileSync(hookPath, '#!/bin/sh\n# orchard-ref-backstop v0\nexit 0\n');
  t.deepEqual(await installRefBackstop(repo), { hookPath, installed: true, chained: undefined });
  t.is(readFileSync(hookPath, 'utf8'), REF_BACKSTOP_HOOK);
  t.false(existsSync(path.join(repo, '.git', 'hooks', CHAINED_HOOK)));
});

test('a foreign reference-transaction hook is chained and keeps seeing every transaction', async (t) => {
  const { repo, child, member } = await fixture();
  const hooks = path.join(repo, '.git', 'hooks');
  const hookPath = path.join(hooks, 'reference-transaction');
  const log = path.join(repo, '..', 'foreign.log');
  const foreign = `#!/bin/sh\n{ echo "state $1"; cat; } >> '${log}'\n`;
  writeFileSync(hookPath, foreign);
  chmodSync(hookPath, 0o755);
  const chained = path.join(hooks, CHAINED_HOOK);
  t.deepEqual(await installRefBackstop(repo), { hookPath, installed: true, chained });
  t.deepEqual(await installRefBackstop(repo), { hookPath, installed: false, chained });
  t.is(readFileSync(chained, 'utf8'), foreign);

  git(repo, 'commit', '--quiet', '--allow-empty', '-m', 'main');
  git(member, 'commit', '--quiet', '--allow-empty', '-m', 'member');
  git(child, 'commit', '--quiet', '--allow-empty', '-m', 'child');
  const main = rev(repo, 'HEAD');
  const text = readFileSync(log, 'utf8');
  t.regex(text, new RegExp(`state prepared\\n[0-9a-f]{40} ${main} HEAD\\n[0-9a-f]{40} ${main} refs/heads/main\\n`));
  t.regex(text, new RegExp(`state committed\\n[0-9a-f]{40} ${rev(member, 'HEAD')} HEAD\\n`));
  t.regex(text, new RegExp(`state prepared\\n[0-9a-f]{40} ${rev(child, 'HEAD')} HEAD\\n`));

  // A refused transaction never reaches the foreign hook as prepared; git reports it aborted.
  writeFileSync(log, '');
  t.not(script(child, 'git branch -f other HEAD').status, 0);
  t.is(
    readFileSync(log, 'utf8')
      .match(/^state \w+/gm)
      ?.join(','),
    'state aborted',
  );

  // The foreign hook's own refusal still counts.
  writeFileSync(chained, '#!/bin/sh\necho "foreign says no" >&2\nexit 1\n');
  const result = script(member, 'git branch -f other HEAD');
  t.not(result.status, 0);
  t.regex(result.stderr, /foreign says no/);
});

test('installs racing in one repository never chain our own hook; ref updates still finish', async (t) => {
  for (let round = 0; round < 5; round++) {
    const { repo } = await fixture({ install: false });
    const hooks = path.join(repo, '.git', 'hooks');
    const installs = await Promise.all(Array.from({ length: 12 }, () => installRefBackstop(repo)));
    t.is(installs.filter((i) => i.installed).length, 1, JSON.stringify(installs));
    t.false(existsSync(path.join(hooks, CHAINED_HOOK)));
    t.is(readFileSync(path.join(hooks, 'reference-transaction'), 'utf8'), REF_BACKSTOP_HOOK);
    const branch = spawnSync('git', ['branch', `raced-${round}`], { cwd: repo, env: GIT_TEST_ENV, encoding: 'utf8', timeout: 10_000 });
    t.is(branch.status, 0, branch.stderr);
  }
});

test('a chained hook that is our own (a broken earlier install) is not run, and the install removes it', async (t) => {
  const { repo } = await fixture();
  const hooks = path.join(repo, '.git', 'hooks');
  const chained = path.join(hooks, CHAINED_HOOK);
  writeFileSync(chained, REF_BACKSTOP_HOOK, { mode: 0o755 });
  // Ours running itself as its chained hook would never end; git is cut at 10 s here.
  const branch = spawnSync('git', ['branch', 'looped'], { cwd: repo, env: GIT_TEST_ENV, encoding: 'utf8', timeout: 10_000 });
  t.is(branch.signal, null);
  t.is(branch.status, 0, branch.stderr);
  t.deepEqual(await installRefBackstop(repo), { hookPath: path.join(hooks, 'reference-transaction'), installed: false, chained: undefined });
  t.false(existsSync(chained));
});

test('the install refuses when a foreign hook and a chained one both exist', async (t) => {
  const { repo } = await fixture({ install: false });
  const hooks = path.join(repo, '.git', 'hooks');
  writeFileSync(path.join(hooks, 'reference-transaction'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  writeFileSync(path.join(hooks, CHAINED_HOOK), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  await t.throwsAsync(installRefBackstop(repo), { message: /refusing to overwrite either/ });
  t.is(readFileSync(path.join(hooks, 'reference-transaction'), 'utf8'), '#!/bin/sh\nexit 0\n');
});

test('core.hooksPath: an absolute one is used, a relative or disabled one is refused', async (t) => {
  const { base, repo, child } = await fixture({ install: false });
  const shared = path.join(base, 'shared-hooks');
  git(repo, 'config', 'core.hooksPath', shared);
  const install = await installRefBackstop(repo);
  t.is(install.hookPath, path.join(shared, 'reference-transaction'));
  t.not(script(child, 'git branch -f other HEAD').status, 0);

  git(repo, 'config', 'core.hooksPath', '.husky');
  await t.throwsAsync(installRefBackstop(repo), { message: /core\.hooksPath to "\.husky"/ });
  git(repo, 'config', 'core.hooksPath', '/dev/null');
  await t.throwsAsync(installRefBackstop(repo), { message: /hooks of .* are off/ });
  await t.throwsAsync(installRefBackstop(path.join(base, 'nowhere')), { message: /not a git repository/ });
});

test(`${ISOLATED_BRANCH_ENV} holds a script to the child's branch even after it leaves its worktree`, async (t) => {
  const { repo, child } = await fixture();
  const env = { [ISOLATED_BRANCH_ENV]: 'orchard/c1' };
  const before = rev(repo, 'refs/heads/other');
  const redirected = [
    'c=$(git rev-parse HEAD); cd ../../repo && git branch -f other "$c"',
    'git -C ../../repo update-ref refs/heads/other "$(git rev-parse HEAD)"',
  ];
  for (const body of redirected) {
    const result = script(child, body, env);
    t.not(result.status, 0, body);
    t.regex(result.stderr, /orchard: refused to update refs\/heads\/other/);
  }
  t.is(rev(repo, 'refs/heads/other'), before);
  t.is(script(child, 'git commit --quiet --allow-empty -m ok', env).status, 0);
  // Without it, the marker is all there is: redirected git is not stopped (docs/backstop.md).
  t.is(script(child, redirected[1]).status, 0);
  t.is(rev(repo, 'refs/heads/other'), rev(child, 'HEAD'));
});

test('known gaps (docs/backstop.md): these still move shared state from an isolated child', async (t) => {
  const { repo, child } = await fixture();
  // Hooks turned off for one command.
  t.is(script(child, 'git -c core.hooksPath=/dev/null branch -f other HEAD').status, 0);
  t.is(rev(repo, 'refs/heads/other'), rev(child, 'HEAD'));
  // symbolic-ref is not a ref transaction on git 2.39 (the next commit on that branch is refused, though).
  t.is(script(child, 'git symbolic-ref main-worktree/HEAD refs/heads/other').status, 0);
  t.is(git(repo, 'symbolic-ref', 'HEAD'), 'refs/heads/other');
  git(repo, 'symbolic-ref', 'HEAD', 'refs/heads/main');
  t.is(script(child, 'git symbolic-ref HEAD refs/heads/main').status, 0);
  t.not(script(child, 'git commit --quiet --allow-empty -m onto-main').status, 0);
  git(child, 'symbolic-ref', 'HEAD', 'refs/heads/orchard/c1');
  // Reflog rewrites: dropping one of several stash entries moves refs/stash without a transaction.
  for (const line of ['one', 'two']) {
    writeFileSync(path.join(repo, 'README.md'), `# demo\n${line}\n`);
    git(repo, 'stash', '--quiet');
  }
  const stash = rev(repo, 'refs/stash');
  t.is(script(child, 'git stash drop --quiet').status, 0);
  t.not(rev(repo, 'refs/stash'), stash);
  // Plain file writes into the common dir.
  const main = rev(repo, 'refs/heads/main');
  t.is(script(child, `git rev-parse HEAD > ${path.join(repo, '.git', 'refs', 'heads', 'main')}`).status, 0);
  t.not(rev(repo, 'refs/heads/main'), main);
});
