import test from 'ava';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { sessionHomeDir } from '../../activities/bash/env';
import { gitCommit, gitDiff, gitStatus } from '../../activities/git/repo-tools';
import { parseWorktreeList, prepareWorktree } from '../../activities/git/worktree';
import { WorkspaceError } from '../../activities/workspace/paths';
import { sessionIdProblem } from '../../contract/ids';

import { gitIn } from '../helpers/git';
const git = gitIn;

const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/** A repository on `main` with one commit, and a directory for worktrees. */
function fixture() {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-git-'));
  created.push(base);
  const repo = path.join(base, 'repo');
  mkdirSync(repo);
  git(repo, 'init', '--quiet', '-b', 'main');
  writeFileSync(path.join(repo, 'README.md'), '# demo\n');
  writeFileSync(path.join(repo, 'keep.txt'), 'keep\n');
  git(repo, 'add', '.');
  git(repo, 'commit', '--quiet', '-m', 'initial');
  return { base, repo, worktreeRoot: path.join(base, 'worktrees'), head: git(repo, 'rev-parse', 'HEAD') };
}

test('session ids are validated as safe branch and directory names', (t) => {
  for (const ok of ['abc', 'A1', 'task-42_b.c', 'x'.repeat(64)]) t.is(sessionIdProblem(ok), undefined, ok);
  for (const bad of ['', '-x', '.x', 'a/b', 'a..b', 'a.', 'a.lock', 'x'.repeat(65), 'a b', 'a\0b', 'ü', 42]) {
    t.truthy(sessionIdProblem(bad), String(bad));
  }
});

test('prepareWorktree creates the branch and the worktree, and a second call is idempotent', async (t) => {
  const { repo, worktreeRoot, head } = fixture();
  const first = await prepareWorktree({ repo, sessionId: 's1', worktreeRoot });
  const expected = { worktree: path.join(worktreeRoot, 's1'), branch: 'orchard/s1/work', baseCommit: head, created: true };
  t.deepEqual(first, expected);
  t.is(git(first.worktree, 'symbolic-ref', '--short', 'HEAD'), 'orchard/s1/work');
  t.is(git(repo, 'rev-parse', 'refs/heads/orchard/s1/work'), head);
  t.true(statSync(sessionHomeDir(first.worktree, 's1')).isDirectory());

  const second = await prepareWorktree({ repo, sessionId: 's1', worktreeRoot });
  t.deepEqual(second, { ...first, created: false });

  // Still the base after the session committed on its branch.
  writeFileSync(path.join(first.worktree, 'new.txt'), 'x\n');
  await gitCommit(first.worktree, { message: 'work' });
  const third = await prepareWorktree({ repo, sessionId: 's1', worktreeRoot });
  t.is(third.baseCommit, head);
  t.false(third.created);
});

test('a session from before the confined layout (on orchard/<id>) is moved to orchard/<id>/work with its worktree, commits and reflog', async (t) => {
  const { repo, worktreeRoot, head } = fixture();
  const worktree = path.join(worktreeRoot, 'old');
  git(repo, 'worktree', 'add', '--quiet', '-b', 'orchard/old', worktree);
  writeFileSync(path.join(worktree, 'work.txt'), 'w\n');
  git(worktree, 'add', 'work.txt');
  git(worktree, 'commit', '--quiet', '-m', 'old work');
  const tip = git(repo, 'rev-parse', 'refs/heads/orchard/old');
  const prepared = await prepareWorktree({ repo, sessionId: 'old', worktreeRoot });
  t.deepEqual(prepared, { worktree, branch: 'orchard/old/work', baseCommit: head, created: false });
  t.is(git(worktree, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/old/work');
  t.is(git(repo, 'rev-parse', 'refs/heads/orchard/old/work'), tip);
  t.throws(() => git(repo, 'rev-parse', '--verify', '--quiet', 'refs/heads/orchard/old'));
  t.is(git(repo, 'reflog', 'show', '--format=%H', 'orchard/old/work').split('\n')[0], tip);
  // Again: nothing left to move, the same answer.
  t.deepEqual(await prepareWorktree({ repo, sessionId: 'old', worktreeRoot }), prepared);
});

test('an existing branch without a worktree is checked out again', async (t) => {
  const { repo, worktreeRoot, head } = fixture();
  const first = await prepareWorktree({ repo, sessionId: 's2', worktreeRoot });
  writeFileSync(path.join(first.worktree, 'work.txt'), 'work\n');
  const commit = await gitCommit(first.worktree, { message: 'session work' });
  // The worktree directory disappears (host cleanup, crash during removal): the branch keeps the work.
  rmSync(first.worktree, { recursive: true, force: true });
  const again = await prepareWorktree({ repo, sessionId: 's2', worktreeRoot });
  t.true(again.created);
  t.is(again.baseCommit, head);
  t.is(git(again.worktree, 'rev-parse', 'HEAD'), commit.commit);
  t.true(existsSync(path.join(again.worktree, 'work.txt')));
});

test('a base ref is honoured and bad refs are refused', async (t) => {
  const { repo, worktreeRoot, head } = fixture();
  writeFileSync(path.join(repo, 'second.txt'), '2\n');
  git(repo, 'add', '.');
  git(repo, 'commit', '--quiet', '-m', 'second');
  const prepared = await prepareWorktree({ repo, sessionId: 's3', worktreeRoot, baseRef: head });
  t.is(prepared.baseCommit, head);
  t.is(git(prepared.worktree, 'rev-parse', 'HEAD'), head);
  const bad = await t.throwsAsync(prepareWorktree({ repo, sessionId: 's4', worktreeRoot, baseRef: 'no-such-ref' }));
  t.is((bad as WorkspaceError).code, 'invalid_input');
  const option = await t.throwsAsync(prepareWorktree({ repo, sessionId: 's5', worktreeRoot, baseRef: '--orphan' }));
  t.is((option as WorkspaceError).code, 'invalid_input');
});

test('a directory that is not a repository is repository_not_found', async (t) => {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-norepo-'));
  created.push(base);
  const worktreeRoot = path.join(base, 'wt');
  const err = await t.throwsAsync(prepareWorktree({ repo: base, sessionId: 's1', worktreeRoot }));
  t.true(err instanceof WorkspaceError);
  t.is((err as WorkspaceError).code, 'repository_not_found');
  const missing = await t.throwsAsync(prepareWorktree({ repo: path.join(base, 'missing'), sessionId: 's1', worktreeRoot }));
  t.is((missing as WorkspaceError).code, 'repository_not_found');
});

test('an unsafe session id is refused before touching git', async (t) => {
  const { repo, worktreeRoot } = fixture();
  const err = await t.throwsAsync(prepareWorktree({ repo, sessionId: '../escape', worktreeRoot }));
  t.is((err as WorkspaceError).code, 'invalid_input');
  t.false(existsSync(worktreeRoot));
});

test('a path taken by another branch is worktree_create_failed', async (t) => {
  const { repo, worktreeRoot } = fixture();
  git(repo, 'branch', 'other');
  git(repo, 'worktree', 'add', '--quiet', path.join(worktreeRoot, 's6'), 'other');
  const err = await t.throwsAsync(prepareWorktree({ repo, sessionId: 's6', worktreeRoot }));
  t.is((err as WorkspaceError).code, 'worktree_create_failed');
});

test('status, diff and commit work in the worktree, on orchard/<id>, leaving main untouched', async (t) => {
  const { repo, worktreeRoot, head } = fixture();
  const { worktree, branch } = await prepareWorktree({ repo, sessionId: 'tools', worktreeRoot });

  t.regex(await gitStatus(worktree), /^On branch orchard\/tools\/work\nNothing to commit, working tree clean\.$/);
  t.regex(await gitDiff(worktree, { maxBytes: 1000 }), /^No changes against HEAD/);

  writeFileSync(path.join(worktree, 'README.md'), '# demo\nmore\n');
  writeFileSync(path.join(worktree, 'added.txt'), 'added\n');
  rmSync(path.join(worktree, 'keep.txt'));
  git(worktree, 'add', 'added.txt');
  const status = await gitStatus(worktree);
  t.true(status.includes('Staged (1):\n  new file: added.txt'), status);
  t.true(status.includes('Not staged (2):\n  modified: README.md\n  deleted: keep.txt'), status);

  const diff = await gitDiff(worktree, { maxBytes: 10_000 });
  t.true(diff.includes('+more'));
  t.true(diff.includes('+added'));
  const staged = await gitDiff(worktree, { staged: true, maxBytes: 10_000 });
  t.true(staged.includes('+added'));
  t.false(staged.includes('+more'));
  const one = await gitDiff(worktree, { path: 'README.md', maxBytes: 10_000 });
  t.true(one.includes('+more'));
  t.false(one.includes('added.txt'));

  const commit = await gitCommit(worktree, { message: 'session change', branch });
  t.true(commit.committed);
  t.is(commit.branch, 'orchard/tools/work');
  t.regex(commit.summary, /^\[orchard\/tools\/work [0-9a-f]{7,} session change\]\n/);
  t.true(commit.summary.includes('3 files changed'));
  t.is(git(repo, 'rev-parse', 'refs/heads/orchard/tools/work'), commit.commit);
  t.is(git(worktree, 'log', '-1', '--format=%an <%ae>'), 'Orchard agent <agent+tools@orchard.invalid>');
  t.regex(await gitStatus(worktree), /working tree clean/);

  // The main checkout: same branch, same commit, clean.
  t.is(git(repo, 'symbolic-ref', '--short', 'HEAD'), 'main');
  t.is(git(repo, 'rev-parse', 'main'), head);
  t.is(git(repo, 'status', '--porcelain'), '');

  const nothing = await gitCommit(worktree, { message: 'again' });
  t.false(nothing.committed);
  t.is(nothing.commit, commit.commit);
  t.regex(nothing.summary, /^Nothing to commit/);
});

test('commit with paths commits only those paths, and paths are checked', async (t) => {
  const { repo, worktreeRoot } = fixture();
  const { worktree } = await prepareWorktree({ repo, sessionId: 'paths', worktreeRoot });
  writeFileSync(path.join(worktree, 'a.txt'), 'a\n');
  writeFileSync(path.join(worktree, 'b.txt'), 'b\n');
  const commit = await gitCommit(worktree, { message: 'only a', paths: ['a.txt'] });
  t.true(commit.committed);
  t.is(git(worktree, 'show', '--name-only', '--format=', 'HEAD'), 'a.txt');
  t.true((await gitStatus(worktree)).includes('Untracked (1):\n  b.txt'));
  const outside = await t.throwsAsync(gitCommit(worktree, { message: 'x', paths: ['../repo/README.md'] }));
  t.is((outside as WorkspaceError).code, 'path_outside_worktree');
  const gitDir = await t.throwsAsync(gitCommit(worktree, { message: 'x', paths: ['.git'] }));
  t.is((gitDir as WorkspaceError).code, 'path_outside_worktree');
  const wrongBranch = await t.throwsAsync(gitCommit(worktree, { message: 'x', branch: 'orchard/someone-else' }));
  t.is((wrongBranch as WorkspaceError).code, 'git_command_failed');
  const empty = await t.throwsAsync(gitCommit(worktree, { message: '  ' }));
  t.is((empty as WorkspaceError).code, 'tool_args_invalid');
});

test('commit runs no repository hooks', async (t) => {
  const { repo, worktreeRoot } = fixture();
  const { worktree } = await prepareWorktree({ repo, sessionId: 'hooks', worktreeRoot });
  // A hooks path inside the worktree is something the agent can write (husky-style).
  git(repo, 'config', 'core.hooksPath', '.hooks');
  const marker = path.join(worktreeRoot, 'hook-ran');
  mkdirSync(path.join(worktree, '.hooks'));
  writeFileSync(path.join(worktree, '.hooks', 'pre-commit'), `#!/bin/sh\ntouch ${marker}\nexit 1\n`, { mode: 0o755 });
  writeFileSync(path.join(worktree, 'f.txt'), 'f\n');
  const commit = await gitCommit(worktree, { message: 'no hooks' });
  t.true(commit.committed);
  t.false(existsSync(marker));
});

test('a detached HEAD refuses the commit and commits nothing; a git that fails is reported as its failure, not as a detached HEAD', async (t) => {
  const { repo, worktreeRoot } = fixture();
  const { worktree } = await prepareWorktree({ repo, sessionId: 'detach', worktreeRoot });
  const head = git(worktree, 'rev-parse', 'HEAD');
  const branch = git(worktree, 'symbolic-ref', '--short', 'HEAD');
  git(worktree, 'checkout', '--quiet', '--detach');
  writeFileSync(path.join(worktree, 'f.txt'), 'f\n');
  const detached = await t.throwsAsync(gitCommit(worktree, { message: 'x' }));
  t.is((detached as WorkspaceError).code, 'git_command_failed');
  t.regex((detached as Error).message, /detached/);
  t.is(git(worktree, 'rev-parse', 'HEAD'), head);
  t.is(git(worktree, 'status', '--porcelain'), '?? f.txt');

  // The worktree's admin dir is gone: symbolic-ref fails, which is not a detached HEAD.
  git(worktree, 'checkout', '--quiet', branch);
  rmSync(path.join(repo, '.git', 'worktrees', 'detach'), { recursive: true, force: true });
  const broken = await t.throwsAsync(gitCommit(worktree, { message: 'x' }));
  t.is((broken as WorkspaceError).code, 'git_command_failed');
  t.notRegex((broken as Error).message, /detached/);
  t.regex((broken as Error).message, /symbolic-ref exited with 128/);
});

test('a long diff is bounded with a truncation marker', async (t) => {
  const { repo, worktreeRoot } = fixture();
  const { worktree } = await prepareWorktree({ repo, sessionId: 'bigdiff', worktreeRoot });
  writeFileSync(path.join(worktree, 'README.md'), Array.from({ length: 5000 }, (_, i) => `line ${i}\n`).join(''));
  const diff = await gitDiff(worktree, { maxBytes: 2000 });
  t.true(diff.startsWith('diff --git a/README.md b/README.md'));
  t.regex(diff, /\[… \d+ bytes truncated …\]/);
  t.true(diff.endsWith('+line 4999\n'));
  t.true(Buffer.byteLength(diff) < 2200);
});

test('parseWorktreeList reads porcelain -z output', (t) => {
  const out =
    'worktree /r\0HEAD abc\0branch refs/heads/main\0\0' +
    'worktree /w/s 1\0HEAD def\0detached\0\0' +
    'worktree /w/gone\0HEAD 123\0branch refs/heads/orchard/gone\0' +
    'prunable gitdir file points to non-existent location\0\0';
  t.deepEqual(parseWorktreeList(out), [
    { path: '/r', head: 'abc', branch: 'refs/heads/main', bare: false, prunable: false },
    { path: '/w/s 1', head: 'def', bare: false, prunable: false },
    { path: '/w/gone', head: '123', branch: 'refs/heads/orchard/gone', bare: false, prunable: true },
  ]);
});
