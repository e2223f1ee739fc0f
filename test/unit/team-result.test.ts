import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { buildResult, memberHead, moveProtectedBranch, planMerge, setBranch, TeamGitRefusal } from '../../activities/git/team-result';
import { gitIn as git } from '../helpers/git';

/** Real repositories: `main` with one commit, and member branches each adding (or changing) files. */
function repo(): string {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-team-result-'));
  git(dir, 'init', '-q', '-b', 'main');
  writeFileSync(join(dir, 'README.md'), '# fixture\n');
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'initial');
  return dir;
}

/** A branch from `from` with one commit writing `files`; returns its head. */
function branch(dir: string, name: string, files: Record<string, string>, from = 'main'): string {
  const wt = mkdtempSync(join(tmpdir(), 'orchard-team-result-wt-'));
  git(dir, 'worktree', 'add', '-q', '-b', name, wt, from);
  for (const [path, content] of Object.entries(files)) writeFileSync(join(wt, path), content);
  git(wt, 'add', '-A');
  git(wt, 'commit', '-q', '-m', `${name}: ${Object.keys(files).join(', ')}`);
  return git(wt, 'rev-parse', 'HEAD');
}

const refs = (dir: string) => git(dir, 'for-each-ref', '--format=%(refname) %(objectname)');
const tree = (dir: string, rev: string) => git(dir, 'ls-tree', '-r', '--name-only', rev).split('\n').sort();
const refusal = async (t: import('ava').ExecutionContext, p: Promise<unknown>, code: TeamGitRefusal['code']) => {
  const err = await t.throwsAsync(p);
  t.true(err instanceof TeamGitRefusal, String(err));
  t.is((err as TeamGitRefusal).code, code, err?.message);
  return err as TeamGitRefusal;
};

test('the result integrates every evidence commit onto the protected branch (fast-forward, then a merge) and moves no ref', async (t) => {
  const dir = repo();
  const a = branch(dir, 'orchard/t-implementer', { 'impl.js': 'impl\n' });
  const b = branch(dir, 'orchard/t-tester', { 'impl.test.js': 'test\n' });
  const main = git(dir, 'rev-parse', 'main');
  t.is(await memberHead(dir, 'orchard/t-implementer'), a);
  t.is(await memberHead(dir, 'orchard/no-such'), undefined);
  const before = refs(dir);
  const built = await buildResult(dir, {
    protectedBranch: 'main',
    teamId: 't',
    evidence: [
      { taskId: 'implement', outputId: 'o1', commitSha: a },
      { taskId: 'test', outputId: 'o2', commitSha: b },
      { taskId: 'again', outputId: 'o3', commitSha: a },
      { taskId: 'review', outputId: 'o4', commitSha: main },
      { taskId: 'plan', outputId: 'o5' },
    ],
  });
  t.is(built.base, main);
  t.deepEqual(
    built.steps.map((s) => [s.taskId, s.how]),
    [
      ['implement', 'fast_forward'],
      ['test', 'merged'],
      ['again', 'contained'],
      ['review', 'contained'],
      ['plan', 'no_commit'],
    ],
  );
  t.deepEqual(tree(dir, built.head), ['README.md', 'impl.js', 'impl.test.js']);
  t.deepEqual(git(dir, 'rev-list', '--parents', '-n', '1', built.head).split(' ').slice(1), [a, b]);
  t.is(refs(dir), before, 'objects only: no ref moved');
  // Pointing the result branch at it, twice, is one branch at one commit.
  await setBranch(dir, 'orchard/team/t/result', built.head);
  await setBranch(dir, 'orchard/team/t/result', built.head);
  t.is(git(dir, 'rev-parse', 'orchard/team/t/result'), built.head);
  t.is(git(dir, 'rev-parse', 'main'), main);
});

test('evidence that conflicts refuses the result with merge_conflict, naming the task and the path; nothing moves', async (t) => {
  const dir = repo();
  const a = branch(dir, 'orchard/t-a', { 'shared.txt': 'from a\n' });
  const b = branch(dir, 'orchard/t-b', { 'shared.txt': 'from b\n' });
  const before = refs(dir);
  const err = await refusal(
    t,
    buildResult(dir, {
      protectedBranch: 'main',
      teamId: 't',
      evidence: [
        { taskId: 'ta', outputId: 'o1', commitSha: a },
        { taskId: 'tb', outputId: 'o2', commitSha: b },
      ],
    }),
    'merge_conflict',
  );
  t.regex(err.message, /task tb's commit .* in shared\.txt$/);
  t.is(refs(dir), before);
  await refusal(t, buildResult(dir, { protectedBranch: 'trunk', teamId: 't', evidence: [] }), 'branch_not_found');
  await refusal(t, buildResult(join(dir, 'nope'), { protectedBranch: 'main', teamId: 't', evidence: [] }), 'repository_not_found');
});

test('merging into the checked-out protected branch fast-forwards it and its checkout; a repeat is already done', async (t) => {
  const dir = repo();
  const result = branch(dir, 'orchard/team/t/result', { 'impl.js': 'impl\n' });
  const main = git(dir, 'rev-parse', 'main');
  const plan = await planMerge(dir, { protectedBranch: 'main', resultHead: result, message: 'm' });
  t.deepEqual(plan, { before: main, after: result, mode: 'fast_forward' });
  t.is(await moveProtectedBranch(dir, 'main', plan), 'moved');
  t.is(git(dir, 'rev-parse', 'main'), result);
  t.is(readFileSync(join(dir, 'impl.js'), 'utf8'), 'impl\n', 'the checkout follows the branch');
  t.is(git(dir, 'status', '--porcelain'), '');
  t.is(await moveProtectedBranch(dir, 'main', plan), 'already');
  t.deepEqual(await planMerge(dir, { protectedBranch: 'main', resultHead: result, message: 'm' }), {
    before: result,
    after: result,
    mode: 'already_contained',
  });
  t.is(git(dir, 'rev-parse', 'main'), result);
});

test('a checkout with uncommitted changes (or untracked files in the way) is refused checkout_dirty and keeps everything', async (t) => {
  const dir = repo();
  const result = branch(dir, 'orchard/team/t/result', { 'impl.js': 'impl\n' });
  const main = git(dir, 'rev-parse', 'main');
  const plan = await planMerge(dir, { protectedBranch: 'main', resultHead: result, message: 'm' });
  writeFileSync(join(dir, 'README.md'), '# edited, not committed\n');
  await refusal(t, moveProtectedBranch(dir, 'main', plan), 'checkout_dirty');
  t.is(git(dir, 'rev-parse', 'main'), main);
  t.is(readFileSync(join(dir, 'README.md'), 'utf8'), '# edited, not committed\n');
  git(dir, 'checkout', '--', 'README.md');
  writeFileSync(join(dir, 'impl.js'), 'mine, untracked\n');
  await refusal(t, moveProtectedBranch(dir, 'main', plan), 'checkout_dirty');
  t.is(git(dir, 'rev-parse', 'main'), main);
  t.is(readFileSync(join(dir, 'impl.js'), 'utf8'), 'mine, untracked\n');
});

test('a protected branch that moved since certification gets one merge commit; not checked out, it moves by compare-and-swap', async (t) => {
  const dir = repo();
  const result = branch(dir, 'orchard/team/t/result', { 'impl.js': 'impl\n' });
  writeFileSync(join(dir, 'CHANGELOG.md'), 'user work\n');
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'user work on main');
  const moved = git(dir, 'rev-parse', 'main');
  git(dir, 'checkout', '-q', '-b', 'elsewhere');
  const plan = await planMerge(dir, { protectedBranch: 'main', resultHead: result, message: 'orchard team merge t' });
  t.is(plan.mode, 'merge_commit');
  t.is(plan.before, moved);
  t.is(git(dir, 'rev-parse', 'main'), moved, 'planning moves nothing');
  // Someone commits on main after the plan: the move is stale and changes nothing.
  const wt = mkdtempSync(join(tmpdir(), 'orchard-team-result-wt-'));
  git(dir, 'worktree', 'add', '-q', wt, 'main');
  git(wt, 'commit', '-q', '--allow-empty', '-m', 'racing commit');
  const raced = git(dir, 'rev-parse', 'main');
  git(dir, 'worktree', 'remove', wt);
  t.is(await moveProtectedBranch(dir, 'main', plan), 'stale');
  t.is(git(dir, 'rev-parse', 'main'), raced);
  const again = await planMerge(dir, { protectedBranch: 'main', resultHead: result, message: 'orchard team merge t' });
  t.is(await moveProtectedBranch(dir, 'main', again), 'moved');
  t.is(git(dir, 'rev-parse', 'main'), again.after);
  t.deepEqual(git(dir, 'rev-list', '--parents', '-n', '1', 'main').split(' ').slice(1), [raced, result]);
  t.deepEqual(tree(dir, 'main'), ['CHANGELOG.md', 'README.md', 'impl.js']);
  t.is(git(dir, 'rev-parse', '--abbrev-ref', 'HEAD'), 'elsewhere', 'the checkout on another branch is left alone');
  t.false(existsSync(join(dir, 'impl.js')));
});

test('a result that conflicts with the moved protected branch is refused merge_conflict at planning', async (t) => {
  const dir = repo();
  const result = branch(dir, 'orchard/team/t/result', { 'README.md': '# theirs\n' });
  writeFileSync(join(dir, 'README.md'), '# ours\n');
  git(dir, 'commit', '-q', '-am', 'ours');
  const main = git(dir, 'rev-parse', 'main');
  const err = await refusal(t, planMerge(dir, { protectedBranch: 'main', resultHead: result, message: 'm' }), 'merge_conflict');
  t.regex(err.message, /README\.md$/);
  t.is(git(dir, 'rev-parse', 'main'), main);
});

test('setBranch waits for a ref another git process holds locked, instead of failing at once', async (t) => {
  const dir = repo();
  const head = git(dir, 'rev-parse', 'main');
  const lock = join(dir, '.git', 'refs', 'heads', 'held.lock');
  writeFileSync(lock, '');
  const released = new Promise<void>((resolve) =>
    setTimeout(() => {
      rmSync(lock);
      resolve();
    }, 3000),
  );
  await setBranch(dir, 'held', head);
  await released;
  t.is(git(dir, 'rev-parse', 'refs/heads/held'), head);
});

test('setBranch removes a lock left by a killed writer (older than any git here may run) and updates the branch', async (t) => {
  const dir = repo();
  const head = git(dir, 'rev-parse', 'main');
  const lock = join(dir, '.git', 'refs', 'heads', 'stale.lock');
  writeFileSync(lock, '');
  const old = new Date(Date.now() - 10 * 60_000);
  utimesSync(lock, old, old);
  await setBranch(dir, 'stale', head);
  t.is(git(dir, 'rev-parse', 'refs/heads/stale'), head);
  t.false(existsSync(lock));
});
