import test, { type ExecutionContext } from 'ava';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { resolveConfinement, type Confinement } from '../../activities/bash/confinement';
import { verifyResult, type VerifierDeps } from '../../activities/git/verify-result';
import { OrchardError } from '../../contract/errors';
import {
  attacks,
  everything,
  fill,
  fixture,
  newMarker,
  outsideMarkers,
  removeFixtures,
  removeOutsideMarkers,
  snapshot,
  type Fixture,
} from '../helpers/confinement-fixtures';
import { gitIn as git } from '../helpers/git';

/**
 * A team's verify command (activities/git/verify-result.ts) runs the agents' code: judged by effect like a child's
 * command. Every attack of the sandbox's table, run as a verify command against the fixture's main checkout, must
 * leave the whole fixture as it was — the main checkout, every worktree, the shared repository, the remote — since
 * the verification's allowance is only its own scratch tree. Needs bubblewrap, like test/unit/sandbox.test.ts.
 */

const noSandbox = process.env.ORCHARD_TEST_NO_SANDBOX;
let confinement: Confinement | undefined;
const scratchRoots: string[] = [];

test.before(async () => {
  if (!noSandbox) confinement = await resolveConfinement({ ORCHARD_SANDBOX: 'on' });
});
test.after.always(() => {
  removeFixtures();
  scratchRoots.forEach((dir) => rmSync(dir, { recursive: true, force: true }));
});

function deps(): VerifierDeps {
  const worktreeRoot = mkdtempSync(path.join(tmpdir(), 'orchard-verify-root-'));
  scratchRoots.push(worktreeRoot);
  return { worktreeRoot, confinement };
}

function sandboxTest(title: string, body: (t: ExecutionContext) => Promise<void>) {
  if (noSandbox) {
    test.skip(`${title} — skipped: ${noSandbox}`, () => undefined);
    return;
  }
  test.serial(title, async (t) => {
    if (confinement?.mode !== 'sandbox') {
      t.fail(`the sandbox is unavailable: ${confinement?.mode === 'unavailable' ? confinement.reason : 'not resolved'}`);
      return;
    }
    await body(t);
  });
}

const verify = (d: VerifierDeps, f: Pick<Fixture, 'main'>, command: string, timeoutMs = 30_000) =>
  verifyResult(d, { repo: f.main, head: git(f.main, 'rev-parse', 'main'), branch: 'orchard/team/t/result', command, timeoutMs, scratchId: newMarker() });

for (const [name, command] of attacks) {
  sandboxTest(`verify attack: ${name} changes nothing of the repository, its worktrees or the host`, async (t) => {
    const f = await fixture();
    const d = deps();
    const marker = newMarker();
    const before = { files: everything(f), git: snapshot(f).git };
    const run = await verify(d, f, fill(f, command, marker));
    t.log(`exit ${run.exitCode}: ${run.stderr.trim().split('\n').slice(-2).join(' | ')}`);
    t.true(run.confined);
    t.deepEqual(snapshot(f).git, before.git);
    t.deepEqual(everything(f), before.files);
    for (const p of outsideMarkers(marker)) t.false(existsSync(p), p);
    removeOutsideMarkers(marker);
    // The scratch checkout is gone afterwards.
    t.deepEqual(readdirSync(path.join(d.worktreeRoot, '.verify')), []);
  });
}

sandboxTest('the command runs on a clean checkout of the result tree, and what it prints is digested', async (t) => {
  const f = await fixture();
  const head = git(f.main, 'rev-parse', 'main');
  // The main checkout has uncommitted work the result must not see.
  writeFileSync(path.join(f.main, 'README.md'), '# demo\nuncommitted\n');
  const marker = newMarker();
  const run = await verify(
    deps(),
    f,
    `git rev-parse HEAD; git status --porcelain | wc -l; cat README.md; echo to-stderr >&2; touch made-here && echo ok > /tmp/${marker}`,
  );
  t.is(run.exitCode, 0, run.stderr);
  t.deepEqual(run.stdout.split('\n').slice(0, 3), [head, '0', '# demo']);
  t.is(run.stderr, 'to-stderr\n');
  t.is(run.resultHead, head);
  t.is(run.tree, git(f.main, 'rev-parse', 'main^{tree}'));
  t.is(run.outputDigest, `sha256:${createHash('sha256').update(`${run.stdout}\0${run.stderr}`).digest('hex')}`);
  // It wrote in its own scratch tree and private /tmp: neither is the repository's or the host's.
  t.false(existsSync(path.join(f.main, 'made-here')));
  t.false(existsSync(`/tmp/${marker}`));
});

sandboxTest('a command that fails, or runs past its timeout, does not pass', async (t) => {
  const f = await fixture();
  const failed = await verify(deps(), f, 'echo nope; exit 3');
  t.is(failed.exitCode, 3);
  t.is(failed.stdout, 'nope\n');
  const slow = await verify(deps(), f, 'sleep 30', 1000);
  t.true(slow.timedOut);
  t.not(slow.exitCode, 0);
  t.true(slow.durationMs < 20_000, `${slow.durationMs} ms`);
});

test('a host that cannot confine commands refuses to verify (sandbox_unavailable) and runs nothing', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'orchard-verify-root-'));
  scratchRoots.push(root);
  const marker = path.join(root, 'ran');
  const err = await t.throwsAsync(
    verifyResult(
      { worktreeRoot: root, confinement: { mode: 'unavailable', reason: 'no bwrap here' } },
      { repo: root, head: 'HEAD', branch: 'b', command: `touch ${marker}`, timeoutMs: 1000, scratchId: 'x' },
    ),
  );
  t.true(err instanceof OrchardError);
  t.is((err as OrchardError).code, 'sandbox_unavailable');
  t.false(existsSync(marker));
});
