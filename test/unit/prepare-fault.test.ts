import { chmodSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createHostActivities } from '../../activities';
import { makeRepo, testPool, uniqueId } from '../helpers/orchard';

/**
 * A host's prepareWorktree with `git` on PATH replaced by a script (`shim(realGit, dir)` gives its body; it runs the
 * real git for anything it does not stand in for), in a fresh repository. The tests that use it run serially: PATH is
 * the process's.
 */
async function preparingWithGit(t: ExecutionContext, shim: (realGit: string, dir: string) => string) {
  const pool = await testPool(t);
  const bin = mkdtempSync(join(tmpdir(), 'orchard-git-shim-'));
  const realGit = (process.env.PATH ?? '')
    .split(':')
    .map((d) => join(d, 'git'))
    .find((p) => existsSync(p))!;
  writeFileSync(join(bin, 'git'), shim(realGit, bin));
  chmodSync(join(bin, 'git'), 0o755);
  const repo = makeRepo();
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-git-shim-wt-'));
  const hostId = uniqueId('git-shim-host');
  const acts = createHostActivities({ pool, hostId, worktreeRoot, holderLiveness: async () => 'closed' });
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  t.teardown(() => void (process.env.PATH = path));
  const sessionId = uniqueId('s');
  const prepare = () => new MockActivityEnvironment().run(acts.prepareWorktree, { sessionId, repo, holder: 'h' }) as Promise<{ worktree: string }>;
  return { pool, hostId, worktreeRoot, sessionId, prepare };
}

/**
 * A git that answers nothing where a commit id was asked for (seen on a loaded machine, at 10 handoffs at once: a
 * member's session failed for good with `worktree_create_failed`, "answered "", not a commit id") is a fault: the
 * worktree preparation fails retryably — Temporal asks again — and leaves nothing behind, not a typed refusal that
 * fails the session.
 */
test.serial('a git that answers nothing for HEAD fails the preparation retryably, not as a refusal, and leaves no lease', async (t) => {
  // rev-parse of HEAD's commit succeeds with no output; everything else is the real git.
  const { pool, hostId, worktreeRoot, sessionId, prepare } = await preparingWithGit(
    t,
    (realGit) => `#!/bin/sh\nfor a in "$@"; do [ "$a" = 'HEAD^{commit}' ] && exit 0; done\nexec ${realGit} "$@"\n`,
  );
  const err = await t.throwsAsync(prepare());
  t.false(err instanceof ApplicationFailure && err.nonRetryable, `a fault, not a refusal: ${String(err)}`);
  t.regex(String(err?.message), /not a commit id/);
  t.false(existsSync(join(worktreeRoot, sessionId)));
  const { rows } = await pool.query(`SELECT state FROM worktree_leases WHERE host = $1`, [hostId]);
  t.true(rows.every((r) => r.state !== 'held'));
});

/**
 * Another worktree of the same repository being added at the same moment: git scans every worktree's admin dir and
 * dies on one that is half-written ("failed to read .git/worktrees/<other>/commondir: Success", seen at 100 sessions
 * prepared at once: the member's task failed for good with `worktree_create_failed`). A fault, retried; the next
 * attempt creates the worktree.
 */
test.serial("git dying on a sibling's half-written worktree admin dir fails the preparation retryably, and the retry creates the worktree", async (t) => {
  // The first `worktree add` dies as git does when a sibling's admin dir has no commondir yet.
  const { worktreeRoot, sessionId, prepare } = await preparingWithGit(
    t,
    (realGit, dir) =>
      `#!/bin/sh\nfor a in "$@"; do if [ "$a" = add ] && [ ! -e ${dir}/failed-once ]; then : > ${dir}/failed-once; ` +
      `echo "fatal: failed to read .git/worktrees/sibling/commondir: Success" >&2; exit 128; fi; done\nexec ${realGit} "$@"\n`,
  );
  const err = await t.throwsAsync(prepare());
  t.false(err instanceof ApplicationFailure && err.nonRetryable, `a fault, not a refusal: ${String(err)}`);
  t.regex(String(err?.message), /commondir/);
  // Temporal's retry: the same input again.
  const prepared = await prepare();
  t.is(prepared.worktree, join(worktreeRoot, sessionId));
  t.true(existsSync(join(worktreeRoot, sessionId, '.git')));
});
