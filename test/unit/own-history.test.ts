import test from 'ava';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { claimProblem, moveProblem, type OwnScope } from '../../activities/git/own-history';
import { gitIn as git } from '../helpers/git';

/**
 * The own-history check on a real repository: `main` with a commit after the child's base, a sibling session's
 * branch, a tag, and the child's branch `orchard/c1/work` three commits ahead of its base, one of them already
 * integrated into `main` in some cases.
 */

interface Repo {
  dir: string;
  scope: OwnScope;
  base: string;
  /** The child's commits, oldest first. */
  own: string[];
}

const dirs: string[] = [];
test.after.always(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function commit(dir: string, file: string, text: string): string {
  writeFileSync(path.join(dir, file), text);
  git(dir, 'add', file);
  git(dir, 'commit', '--quiet', '-m', `${file}: ${text.trim()}`);
  return git(dir, 'rev-parse', 'HEAD');
}

function repo(): Repo {
  const dir = mkdtempSync(path.join(tmpdir(), 'orchard-own-history-'));
  dirs.push(dir);
  const main = path.join(dir, 'repo');
  git(dir, 'init', '--quiet', '-b', 'main', main);
  git(main, 'config', 'user.email', 't@example.com');
  git(main, 'config', 'user.name', 't');
  commit(main, 'a.txt', 'a\n');
  const base = commit(main, 'b.txt', 'b\n');
  const child = path.join(dir, 'c1');
  git(main, 'worktree', 'add', '--quiet', '-b', 'orchard/c1/work', child, base);
  const sib = path.join(dir, 's1');
  git(main, 'worktree', 'add', '--quiet', '-b', 'orchard/s1/work', sib, base);
  commit(sib, 's.txt', 'sibling\n');
  const own = ['1', '2', '3'].map((n) => commit(child, 'c.txt', `${n}\n`));
  commit(main, 'm.txt', 'main moved\n');
  git(main, 'tag', 'v0', base);
  return { dir: main, scope: { worktree: child, branch: 'orchard/c1/work' }, base, own };
}

test('a rewind, and a move to commits of its own, stay on its own history', async (t) => {
  const r = repo();
  const [c1, , c3] = r.own;
  t.is(await moveProblem(r.scope, c3, c1), undefined, 'reset --hard HEAD~2');
  t.is(await moveProblem(r.scope, c1, c3), undefined, 'back to the dropped commits, which no other ref has');
  t.is(await moveProblem(r.scope, c3, r.base), undefined, 'a rewind to the base');
  // A squash: a new commit on c1 holding c2 and c3's change.
  const squashed = git(r.scope.worktree, 'commit-tree', '-p', c1, '-m', 'squashed', `${c3}^{tree}`);
  t.is(await moveProblem(r.scope, c3, squashed), undefined);
  t.is(await moveProblem(r.scope, c3, c3), undefined);
});

test('a move that brings in commits of other branches names them and where they are', async (t) => {
  const r = repo();
  const [, , c3] = r.own;
  const main = git(r.dir, 'rev-parse', 'main');
  const toMain = await moveProblem(r.scope, c3, main);
  t.regex(toMain ?? '', /brings 1 commit of other branches into orchard\/c1\/work: \w+ m\.txt: main moved; main has it/);
  const sibling = git(r.dir, 'rev-parse', 'orchard/s1/work');
  t.regex((await moveProblem(r.scope, c3, sibling)) ?? '', /orchard\/s1\/work has it/);
  // A merge of main: the merge commit is new, main's commit is shared.
  const merge = git(r.scope.worktree, 'commit-tree', '-p', c3, '-p', main, '-m', 'merge', `${c3}^{tree}`);
  t.regex((await moveProblem(r.scope, c3, merge)) ?? '', /brings 1 commit of other branches/);
});

test('rewriting commits the branch shares (below its base, or already integrated) is not its own history', async (t) => {
  const r = repo();
  const [, c2, c3] = r.own;
  // The orchestrator integrated c1 and c2 into a release branch.
  git(r.dir, 'branch', 'release', c2);
  const rewritten = git(r.scope.worktree, 'commit-tree', '-p', r.base, '-m', 'all in one', `${c3}^{tree}`);
  t.regex((await moveProblem(r.scope, c3, rewritten)) ?? '', /rewrites 2 commits that orchard\/c1\/work shares with other branches: .*release/);
  // Rewriting only c3, which no other ref has, is fine.
  const amended = git(r.scope.worktree, 'commit-tree', '-p', c2, '-m', 'c3 amended', `${c3}^{tree}`);
  t.is(await moveProblem(r.scope, c3, amended), undefined);
});

test('the own remote-tracking branch is the child’s own; a tag is shared', async (t) => {
  const r = repo();
  const [c1, , c3] = r.own;
  git(r.dir, 'update-ref', 'refs/remotes/origin/orchard/c1/work', c3);
  const squashed = git(r.scope.worktree, 'commit-tree', '-p', c1, '-m', 'squashed', `${c3}^{tree}`);
  t.is(await moveProblem(r.scope, c3, squashed), undefined, 'its pushed tracking ref does not make its commits shared');
  git(r.dir, 'tag', 'shipped', c3);
  t.regex((await moveProblem(r.scope, c3, squashed)) ?? '', /rewrites 2 commits .*shipped/);
});

test('claims: a reset or rebase within its own commits holds; onto another branch or below the base does not', async (t) => {
  const r = repo();
  const claim = (construct: string, c: { kind: 'move' | 'rewrite' | 'reattach'; target?: string; upstream?: string; onto?: string }) =>
    claimProblem(r.scope, { construct, ...c });
  t.is(await claim('git reset --soft HEAD~1', { kind: 'move', target: 'HEAD~1' }), undefined);
  t.is(await claim('git reset x.txt', { kind: 'move', target: 'x.txt' }), undefined, 'a path, not a commit: git unstages it');
  t.regex(
    (await claim('git reset --hard main', { kind: 'move', target: 'main' })) ?? '',
    /^`git reset --hard main` moves orchard\/c1\/work to main \(\w{12}\): it brings 1 commit/,
  );
  t.is(await claim('git rebase -i HEAD~3', { kind: 'rewrite', upstream: 'HEAD~3', onto: 'HEAD~3' }), undefined);
  t.is(await claim('git rebase --onto HEAD~3 HEAD~1', { kind: 'rewrite', upstream: 'HEAD~1', onto: 'HEAD~3' }), undefined);
  t.is(await claim('git rebase -i --keep-base main', { kind: 'rewrite', upstream: 'main' }), undefined, '--keep-base replays onto the merge base');
  t.regex(
    (await claim('git rebase main', { kind: 'rewrite', upstream: 'main', onto: 'main' })) ?? '',
    /replays orchard\/c1\/work onto main, bringing in 1 commit/,
  );
  t.regex(
    (await claim('git rebase -i HEAD~4', { kind: 'rewrite', upstream: 'HEAD~4', onto: 'HEAD~4' })) ?? '',
    /rewrites 1 commit that orchard\/c1\/work shares/,
  );
  t.is(await claim('git rebase --continue', { kind: 'rewrite' }), undefined, 'checked by its effect after the command');
  t.is(await claim('git checkout orchard/c1/work', { kind: 'reattach' }), undefined);
});

test('another session’s branch naming a commit still in its quarantine (unreadable here) neither fails the check nor counts', async (t) => {
  const r = repo();
  const [c1, , c3] = r.own;
  // What a sibling's verified-but-not-yet-moved commit looks like from here: a ref to an object this store lacks.
  const common = git(r.dir, 'rev-parse', '--path-format=absolute', '--git-common-dir');
  mkdirSync(path.join(common, 'refs', 'heads', 'orchard', 's9'), { recursive: true });
  writeFileSync(path.join(common, 'refs', 'heads', 'orchard', 's9', 'work'), `${'ab'.repeat(20)}\n`);
  const squashed = git(r.scope.worktree, 'commit-tree', '-p', c1, '-m', 'squashed', `${c3}^{tree}`);
  t.is(await moveProblem(r.scope, c3, squashed), undefined);
  t.regex((await moveProblem(r.scope, c3, git(r.dir, 'rev-parse', 'main'))) ?? '', /main has it/);
});
