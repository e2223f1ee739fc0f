import test from 'ava';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { isolatedLayout, resolveConfinement, sessionTmpDir } from '../../activities/bash/confinement';
import { prepareIsolated } from '../../activities/bash/isolated';
import { runBash } from '../../activities/bash/runner';
import { gitIn as git } from '../helpers/git';

/** How a host decides its confinement (docs/confinement.md, "Fail closed"), and whose repository a layout trusts. */

const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/** A repository with one commit on main and the worktree of session s1 on `orchard/s1/work`, removed after the suite. */
function repositoryWithWorktree(prefix: string): { base: string; repo: string; worktree: string } {
  const base = mkdtempSync(path.join(tmpdir(), prefix));
  created.push(base);
  const repo = path.join(base, 'repo');
  mkdirSync(repo);
  git(repo, 'init', '-q', '-b', 'main');
  git(repo, 'commit', '-q', '--allow-empty', '-m', 'init');
  const worktree = path.join(base, 'worktrees', 's1');
  git(repo, 'worktree', 'add', '-q', '-b', 'orchard/s1/work', worktree);
  return { base, repo, worktree };
}

test('ORCHARD_SANDBOX: off runs with the guard alone, a bad value stops the worker, the default probes bubblewrap', async (t) => {
  t.deepEqual(await resolveConfinement({ ORCHARD_SANDBOX: 'off' }), { mode: 'off', reason: 'ORCHARD_SANDBOX=off: isolated children run with the guard alone' });
  await t.throwsAsync(resolveConfinement({ ORCHARD_SANDBOX: 'maybe' }), { message: /ORCHARD_SANDBOX must be "on" or "off"/ });
  const probed = await resolveConfinement({});
  if (process.env.ORCHARD_TEST_NO_SANDBOX) {
    t.not(probed.mode, 'sandbox');
    return;
  }
  t.is(probed.mode, 'sandbox', 'reason' in probed ? probed.reason : '');
  // A bwrap that is missing or is not a sandbox: sandbox.test.ts ("the probe says why …") covers sandboxAvailable.
});

test('a layout believes the worktree’s .git only when it names an admin dir that points back; a repository faked inside the worktree is refused', async (t) => {
  const { base, repo, worktree } = repositoryWithWorktree('orchard-layout-');
  const layout = await isolatedLayout({ worktree, branch: 'orchard/s1/work', sessionId: 's1' });
  t.is(layout.commonDir, path.join(repo, '.git'));
  t.is(layout.adminDir, path.join(repo, '.git', 'worktrees', 's1'));
  t.is(layout.tmpDir, sessionTmpDir(worktree, 's1'));

  // A fake repository inside the worktree whose admin dir points back at it: refused (it overlaps the worktree).
  git(worktree, 'init', '-q', '--bare', 'fake');
  const fake = path.join(worktree, 'fake', 'worktrees', 's1');
  mkdirSync(fake, { recursive: true });
  writeFileSync(path.join(fake, 'gitdir'), `${path.join(worktree, '.git')}\n`);
  writeFileSync(path.join(worktree, '.git'), `gitdir: ${fake}\n`);
  await t.throwsAsync(isolatedLayout({ worktree, branch: 'orchard/s1/work', sessionId: 's1' }), { message: /overlaps/ });
  // Another worktree's admin dir does not point back at this one: refused.
  const sibling = path.join(base, 'worktrees', 's2');
  git(repo, 'worktree', 'add', '-q', '-b', 'orchard/s2/work', sibling);
  writeFileSync(path.join(worktree, '.git'), `gitdir: ${path.join(repo, '.git', 'worktrees', 's2')}\n`);
  await t.throwsAsync(isolatedLayout({ worktree, branch: 'orchard/s1/work', sessionId: 's1' }), { message: /is not a linked worktree/ });
});

test("a bare remote on this disk takes a push of the child's own branch, and nothing else", async (t) => {
  const confinement = await resolveConfinement({});
  if (confinement.mode !== 'sandbox') return t.fail(`this machine cannot confine: ${'reason' in confinement ? confinement.reason : ''}`);
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-remote-'));
  created.push(base);
  const repo = path.join(base, 'repo');
  const remote = path.join(base, 'remote.git');
  mkdirSync(repo);
  git(base, 'init', '-q', '--bare', remote);
  git(repo, 'init', '-q', '-b', 'main');
  git(repo, 'commit', '-q', '--allow-empty', '-m', 'init');
  git(repo, 'remote', 'add', 'origin', remote);
  git(repo, 'push', '-q', 'origin', 'main');
  const worktree = path.join(base, 'worktrees', 's1');
  git(repo, 'worktree', 'add', '-q', '-b', 'orchard/s1/work', worktree);
  git(worktree, 'commit', '-q', '--allow-empty', '-m', 'own');
  const own = git(worktree, 'rev-parse', 'HEAD');
  const main = git(remote, 'rev-parse', 'refs/heads/main');
  const command = 'git push -q origin HEAD; echo "own $?"; git push -q origin HEAD:main; echo "main $?"; git push -q origin HEAD:refs/tags/t; echo "tag $?"';
  const prepared = await prepareIsolated({ command, worktree, branch: 'orchard/s1/work', sessionId: 's1', confinement });
  const result = await runBash({ command, argv: prepared.argv, cwd: worktree, env: prepared.env, timeoutMs: 30_000, maxOutputBytes: 10_000 });
  t.regex(result.stdout, /own 0/);
  t.regex(result.stdout, /main [1-9]/);
  t.regex(result.stdout, /tag [1-9]/);
  t.is(git(remote, 'rev-parse', 'refs/heads/orchard/s1/work'), own);
  t.is(git(remote, 'rev-parse', 'refs/heads/main'), main);
  t.deepEqual(git(remote, 'tag', '--list'), '');
});

/** The pids of `pid`'s children, from every thread's `children` file; [] once it is gone. */
function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) => readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
  } catch {
    return [];
  }
}

test("a confined command's sandbox is built while its group is recorded, and none of the command runs when the record fails", async (t) => {
  const confinement = await resolveConfinement({});
  if (confinement.mode !== 'sandbox') return t.fail(`this machine cannot confine: ${'reason' in confinement ? confinement.reason : ''}`);
  const { worktree } = repositoryWithWorktree('orchard-gate-');
  const ownMounts = readlinkSync('/proc/self/ns/mnt');
  /** While the record is written: the sandbox's process (bwrap's child, in a mount namespace of its own) already exists. */
  const sandboxBuilt = async (pgid: number): Promise<boolean> => {
    for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 5))) {
      for (const pid of childrenOf(pgid)) {
        const mounts = (() => {
          try {
            return readlinkSync(`/proc/${pid}/ns/mnt`);
          } catch {
            return ownMounts;
          }
        })();
        if (mounts !== ownMounts) return true;
      }
    }
    return false;
  };
  const run = async (file: string, record: (built: boolean) => void) => {
    const command = `touch ${file}`;
    const prepared = await prepareIsolated({ command, worktree, branch: 'orchard/s1/work', sessionId: 's1', confinement });
    return runBash({
      command,
      argv: prepared.argv,
      cwd: worktree,
      env: prepared.env,
      timeoutMs: 30_000,
      maxOutputBytes: 10_000,
      onSpawn: async (info) => record(await sandboxBuilt(info.pgid)),
    });
  };

  const ran = path.join(worktree, 'ran');
  let built = false;
  const ok = await run(ran, (b) => void (built = b));
  t.true(built, 'the namespace existed before the gate opened');
  t.is(ok.exitCode, 0, ok.stderr);
  t.true(existsSync(ran));

  // The store that records the group is away: the sandbox was built, the command's own code never ran.
  const refused = path.join(worktree, 'refused');
  const failed = await run(refused, (b) => {
    built = b;
    throw new Error('database unavailable');
  });
  t.true(built);
  t.true(failed.notStarted);
  t.regex(failed.notStartedReason ?? '', /database unavailable/);
  t.false(existsSync(refused));
  t.deepEqual(failed.remaining, []);
});
