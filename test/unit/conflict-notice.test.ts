import test from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import {
  conflictNotice,
  mightHaveConflicts,
  noticeForBash,
  OWNER_PLACEHOLDER,
  probeConflict,
  strategyOptionIntent,
  type ConflictState,
} from '../../activities/bash/conflict-notice';

import { GIT_TEST_ENV, gitIn } from '../helpers/git';
const git = gitIn;

/** Runs `command` with bash in `cwd`, as the bash tool does. */
function bash(cwd: string, command: string) {
  const r = spawnSync('bash', ['-c', command], { cwd, env: GIT_TEST_ENV, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function commitFile(cwd: string, file: string, text: string, message: string): string {
  writeFileSync(path.join(cwd, file), text);
  git(cwd, 'add', file);
  git(cwd, 'commit', '--quiet', '-m', message);
  return git(cwd, 'rev-parse', 'HEAD');
}

/**
 * Serial: the fixtures and commands run synchronously (spawnSync), which blocks this file's event loop; a probe's
 * execFile of a concurrent test then meets its 10 s timer only after the block and is reported as timed out even
 * when git had finished (seen under load: the notice went missing in 2–3 tests a run).
 */
const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/**
 * A repository on `main` and a session worktree `s1` on `orchard/s1` (a linked worktree, as sessions have).
 * `feat` and `orchard/s1` both rewrite f.txt (they conflict); `clean` only adds g.txt.
 */
function fixture() {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-conflict-'));
  created.push(base);
  const repo = path.join(base, 'repo');
  const wt = path.join(base, 'worktrees', 's1');
  git(base, 'init', '--quiet', '-b', 'main', repo);
  commitFile(repo, 'f.txt', 'base\n', 'initial');
  git(repo, 'checkout', '--quiet', '-b', 'feat');
  const feat = commitFile(repo, 'f.txt', 'feat\n', 'feat rewrites f');
  git(repo, 'checkout', '--quiet', '-b', 'clean', 'main');
  commitFile(repo, 'g.txt', 'g\n', 'clean adds g');
  git(repo, 'checkout', '--quiet', 'main');
  git(repo, 'worktree', 'add', '--quiet', '-b', 'orchard/s1', wt);
  commitFile(wt, 'f.txt', 'session\n', 'session rewrites f');
  return { base, repo, wt, feat };
}

async function after(wt: string, command: string) {
  const result = bash(wt, command);
  return { result, notice: await noticeForBash({ worktree: wt, branch: 'orchard/s1', command, result }) };
}

test.serial('a conflicted merge in a linked worktree is annotated; after --abort nothing is', async (t) => {
  const { wt } = fixture();
  const { result, notice } = await after(wt, 'git merge feat');
  t.not(result.status, 0);
  t.is(notice.before, undefined);
  const text = notice.after ?? '';
  t.regex(text, /A merge stopped on conflicts in this worktree \(branch orchard\/s1\); 1 unmerged path:\n {2}f\.txt\n/);
  t.regex(text, /Ownership rule: a conflict belongs to the session that owns the branch\. Your branch is orchard\/s1;/);
  t.true(text.includes('`git merge --abort`'));
  t.true(text.includes(`session send ${OWNER_PLACEHOLDER} "<task:`));
  t.true(text.includes('`git commit`'));
  t.deepEqual(await probeConflict(wt), { operation: 'merge', abort: 'git merge --abort', unmerged: ['f.txt'] });

  const aborted = await after(wt, 'git merge --abort');
  t.is(aborted.result.status, 0);
  t.deepEqual(aborted.notice, {});
  t.is(await probeConflict(wt), undefined);
});

test.serial('a clean merge, and a --no-commit merge with a clean index, are not annotated', async (t) => {
  const { repo, wt } = fixture();
  const noCommit = await after(wt, 'git merge --no-commit --no-ff clean');
  t.is(noCommit.result.status, 0, noCommit.result.stderr);
  // MERGE_HEAD is there (in the worktree's admin dir), but nothing is unmerged.
  t.true(existsSync(path.join(repo, '.git', 'worktrees', 's1', 'MERGE_HEAD')));
  t.deepEqual(noCommit.notice, {});
  git(wt, 'merge', '--abort');
  const clean = await after(wt, 'git merge clean');
  t.is(clean.result.status, 0);
  t.deepEqual(clean.notice, {});
});

test.serial('output that merely prints CONFLICT is probed but not annotated', async (t) => {
  const { wt } = fixture();
  t.true(mightHaveConflicts('echo CONFLICT', { stdout: 'CONFLICT\n', stderr: '' }));
  t.deepEqual((await after(wt, 'echo CONFLICT')).notice, {});
});

test.serial('a conflicted rebase names git rebase --abort (both backends)', async (t) => {
  const { wt } = fixture();
  const { result, notice } = await after(wt, 'git rebase feat');
  t.not(result.status, 0);
  t.true((notice.after ?? '').includes('`git rebase --abort`'));
  t.true((notice.after ?? '').includes('`git rebase --continue`'));
  t.is((await probeConflict(wt))?.operation, 'rebase');
  git(wt, 'rebase', '--abort');
  await after(wt, 'git rebase --apply feat');
  t.deepEqual(await probeConflict(wt), { operation: 'rebase', abort: 'git rebase --abort', unmerged: ['f.txt'] });
});

test.serial('a rebase -r stopped on a merge has MERGE_HEAD too, and the rebase wins', async (t) => {
  const { repo, wt } = fixture();
  // orchard/s1 gets a merge of feat that was resolved by hand; main moves on, so the rebase redoes that merge.
  bash(wt, 'git merge feat');
  commitFile(wt, 'f.txt', 'resolved\n', 'merge feat');
  commitFile(repo, 'h.txt', 'h\n', 'main adds h');
  const { notice } = await after(wt, 'git rebase -r main');
  t.true(existsSync(path.join(repo, '.git', 'worktrees', 's1', 'MERGE_HEAD')));
  t.true(existsSync(path.join(repo, '.git', 'worktrees', 's1', 'rebase-merge')));
  t.is((await probeConflict(wt))?.abort, 'git rebase --abort');
  t.true((notice.after ?? '').includes('A rebase stopped'));
});

test.serial('git am -3, cherry-pick and revert conflicts name their own abort', async (t) => {
  const { base, wt, feat } = fixture();
  git(wt, 'format-patch', '--quiet', '-1', feat, '-o', path.join(base, 'patches'));
  const am = await after(wt, `git am -3 ${path.join(base, 'patches')}/*.patch`);
  t.true((am.notice.after ?? '').includes('`git am --abort`'));
  t.deepEqual(await probeConflict(wt), { operation: 'am', abort: 'git am --abort', unmerged: ['f.txt'] });
  git(wt, 'am', '--abort');

  const pick = await after(wt, 'git cherry-pick feat');
  t.true((pick.notice.after ?? '').includes('`git cherry-pick --abort`'));
  t.is((await probeConflict(wt))?.operation, 'cherry-pick');
  git(wt, 'cherry-pick', '--abort');

  const first = git(wt, 'rev-parse', 'HEAD');
  commitFile(wt, 'f.txt', 'session again\n', 'session rewrites f again');
  const revert = await after(wt, `git revert --no-edit ${first}`);
  t.true((revert.notice.after ?? '').includes('`git revert --abort`'));
  t.deepEqual(await probeConflict(wt), { operation: 'revert', abort: 'git revert --abort', unmerged: ['f.txt'] });
});

test.serial('a script that merges quietly is annotated once a later command shows the conflict', async (t) => {
  const { wt } = fixture();
  writeFileSync(path.join(wt, 'sync.sh'), 'git merge -q feat >/dev/null 2>&1\n');
  const quiet = await after(wt, 'bash ./sync.sh');
  t.deepEqual(quiet.notice, {});
  const status = await after(wt, 'git status');
  t.true((status.notice.after ?? '').includes('`git merge --abort`'));
});

test.serial('unmerged entries without an operation (stash pop) are not annotated', async (t) => {
  const { wt } = fixture();
  writeFileSync(path.join(wt, 'f.txt'), 'stashed\n');
  git(wt, 'stash', '--quiet');
  commitFile(wt, 'f.txt', 'moved on\n', 'move on');
  const pop = await after(wt, 'git stash pop');
  t.not(pop.result.status, 0);
  t.not(git(wt, 'ls-files', '--unmerged'), '');
  t.deepEqual(pop.notice, {});
});

test.serial('probeConflict outside a repository finds nothing', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'orchard-conflict-none-'));
  created.push(dir);
  t.is(await probeConflict(dir), undefined);
  t.is(await probeConflict(path.join(dir, 'missing')), undefined);
});

test.serial('the hint', (t) => {
  const quiet = { stdout: '', stderr: '' };
  for (const command of [
    'git merge x',
    'git pull',
    'git rebase -i main',
    'git cherry-pick a',
    'git am x.patch',
    'git stash pop',
    'git apply --3way p',
    'git checkout -m other',
    'git switch --merge b',
    'git revert HEAD',
  ]) {
    t.true(mightHaveConflicts(command, quiet), command);
  }
  for (const command of ['ls', 'npm test', 'git status', 'git checkout other', 'git commit -m wip']) {
    t.false(mightHaveConflicts(command, quiet), command);
  }
  t.true(mightHaveConflicts('./sync.sh', { stdout: 'CONFLICT (content): Merge conflict in f\n', stderr: '' }));
  t.true(mightHaveConflicts('git status', { stdout: 'You have unmerged paths.\n', stderr: '' }));
});

test.serial('strategy options that decide conflicts are seen before the command runs', (t) => {
  const decides: Array<[string, string]> = [
    ['git merge -X theirs feat', '`-X theirs`'],
    ['git merge -Xours feat', '`-Xours`'],
    ['git merge --strategy-option=theirs feat', '`--strategy-option=theirs`'],
    ['git merge --strategy-option ours feat', '`--strategy-option ours`'],
    ['git merge --strategy-opt=ours feat', '`--strategy-opt=ours`'],
    ['git rebase -X theirs main', '`-X theirs`'],
    ['git cherry-pick -Xtheirs abc', '`-Xtheirs`'],
    ['git revert -X ours abc', '`-X ours`'],
    ['git pull --no-edit -X theirs origin main', '`-X theirs`'],
    ['git merge -s ours feat', '`-s ours`'],
    ['git merge --strategy=ours feat', '`--strategy=ours`'],
    ['git -C sub -c core.x=1 merge -nXours feat', '`-nXours`'],
    ['cd x && /usr/bin/git merge -X theirs feat', '`-X theirs`'],
    ['echo $(git merge -X theirs feat)', '`-X theirs`'],
    [`bash -c 'git merge -X theirs feat'`, '`-X theirs`'],
    // Word level: a commit message that spells one out counts too (a notice costs nothing).
    ['echo "git merge -X theirs"', '`-X theirs`'],
  ];
  for (const [command, flag] of decides) {
    const text = strategyOptionIntent(command, { branch: 'orchard/s1' });
    t.truthy(text, command);
    t.true(text?.includes(flag), `${command}: ${text}`);
    t.true(text?.includes('Ownership rule'), command);
    t.true(text?.includes(`session send ${OWNER_PLACEHOLDER}`), command);
  }
  t.true(strategyOptionIntent('git rebase -X theirs main')?.includes('`git rebase --abort`'));
  t.true(strategyOptionIntent('git merge -X theirs feat')?.includes('`git merge --abort`'));
  for (const command of [
    "git log --grep='-X ours'",
    'git merge -X patience feat',
    'git merge -X ignore-space-change feat',
    'git merge -s recursive feat',
    'git merge feat',
    'git checkout --theirs f.txt',
    'git diff -X theirs',
    'echo -X theirs',
  ]) {
    t.is(strategyOptionIntent(command), undefined, command);
  }
});

test.serial('a clean -X theirs merge gets the before notice only', async (t) => {
  const { wt } = fixture();
  const { result, notice } = await after(wt, 'git merge -X theirs feat');
  t.is(result.status, 0, result.stderr);
  t.is(git(wt, 'show', 'HEAD:f.txt'), 'feat');
  t.truthy(notice.before);
  t.true(notice.before?.includes('Your branch is orchard/s1;'));
  t.is(notice.after, undefined);
});

test.serial('the notice is bounded and never invents an owner', (t) => {
  const state: ConflictState = {
    operation: 'merge',
    abort: 'git merge --abort',
    unmerged: Array.from({ length: 100 }, (_, i) => `dir/${'x'.repeat(i === 0 ? 5000 : 10)}-${i}.txt`),
  };
  const text = conflictNotice(state, { branch: 'orchard/s1' });
  t.true(text.length < 6000, String(text.length));
  t.true(text.includes('100 unmerged paths'));
  t.true(text.includes('… and 80 more'));
  t.false(text.includes('x'.repeat(300)));
  t.is(text.match(/session send (\S+)/)?.[1], OWNER_PLACEHOLDER);
});
