import test, { type ExecutionContext } from 'ava';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { prepareSandboxDirs, sandboxAvailable } from '../../activities/bash/sandbox';
import { runOrchard, type CliRun } from '../helpers/cli-process';
import {
  attacks,
  benign,
  fill,
  fixture,
  lostObjects,
  newMarker,
  OUTSIDE,
  outsideMarkers,
  removeFixtures,
  removeOutsideMarkers,
  sharedObjects,
  snapshot,
  verifiedInAllowance,
  type CommandResult,
  type Fixture,
} from '../helpers/confinement-fixtures';
import { gitIn as git } from '../helpers/git';

/**
 * The effect suites of issue 10 through the real CLI: every attack of the shared table runs through
 * `bin/orchard exec --branch orchard/c1/work --worktree <child> -- '<attack>'` — the guard, the sandbox,
 * verification and the ref backstop, exactly as an isolated child's bash tool runs it — in the layout of
 * test/helpers/confinement-fixtures.ts (outside /tmp, as a worker's state dir is). Nothing outside the child's
 * allowance may change, whichever layer stops it:
 * - exit 3, refused by the guard (the command never ran);
 * - exit 4, verification found a change: then the change is in what the sandbox lets the child write but
 *   verification protects (its `.git` file, admin dir, own symbolic refs, alternates), and it is shown on disk;
 * - otherwise the command's own status, with nothing changed: the sandbox blocked it.
 * Each attack runs twice: as typed, and hidden in a script (`bash x.sh`, the file written by the test), which the
 * guard cannot read, so the script forms must all be stopped by the sandbox or verification.
 *
 * bwrap is required, as in test/unit/sandbox.test.ts: ORCHARD_TEST_NO_SANDBOX=<why> skips saying so; anywhere
 * else a missing sandbox fails every test.
 */

const noSandbox = process.env.ORCHARD_TEST_NO_SANDBOX;
let probeProblem: string | undefined;

test.before(async () => {
  if (noSandbox) return;
  const probe = await sandboxAvailable();
  if (!probe.ok) probeProblem = probe.reason;
});

/** Each `orchard exec` starts node with tsx (seconds of CPU): at most this many fixtures and processes at once. */
const SLOTS = 3;
let free = SLOTS;
const waiting: Array<() => void> = [];
async function inSlot<T>(fn: () => Promise<T>): Promise<T> {
  if (free > 0) free -= 1;
  else await new Promise<void>((resolve) => waiting.push(resolve));
  try {
    return await fn();
  } finally {
    const next = waiting.shift();
    if (next) next();
    else free += 1;
  }
}

type Layer = 'guard' | 'sandbox' | 'verification' | 'NOT stopped';
type Form = 'plain' | 'script';
const outcomes: Array<{ name: string; form: Form; layer: Layer; code: number }> = [];
const startedAt = Date.now();

test.after.always((t) => {
  removeFixtures();
  if (outcomes.length === 0) return;
  const count = (form: Form, layer: Layer) => outcomes.filter((o) => o.form === form && o.layer === layer).length;
  const layers: Layer[] = ['guard', 'sandbox', 'verification', 'NOT stopped'];
  const line = (['plain', 'script'] as const).map((form) => `${form}: ${layers.map((layer) => `${layer} ${count(form, layer)}`).join(', ')}`).join('; ');
  const summary = `orchard exec, ${outcomes.length} attack runs (${attacks.length} attacks × 2 forms) in ${Math.round((Date.now() - startedAt) / 1000)} s — ${line}`;
  t.log(summary);
  console.log(summary);
  for (const o of outcomes.filter((x) => x.layer !== 'guard').sort((a, b) => a.name.localeCompare(b.name) || a.form.localeCompare(b.form))) {
    console.log(`  ${o.layer.padEnd(12)} exit ${String(o.code).padEnd(3)} ${o.form.padEnd(6)} ${o.name}`);
  }
});

/** Registers `title` so that a missing sandbox fails it loudly, or skips it where CI said it could not install bwrap. */
function execTest(title: string, body: (t: ExecutionContext) => Promise<void>, options: { knownGap?: string } = {}) {
  if (noSandbox) {
    test.skip(`${title} — skipped: ${noSandbox}`, () => undefined);
    return;
  }
  if (options.knownGap) title = `known gap: ${title} (${options.knownGap})`;
  (options.knownGap ? test.failing : test)(title, async (t) => {
    if (probeProblem) {
      t.fail(`the sandbox is unavailable: ${probeProblem}. ` + 'Install bubblewrap (apt-get install bubblewrap), or set ORCHARD_TEST_NO_SANDBOX=<why> to skip');
      return;
    }
    await inSlot(() => body(t));
  });
}
if (noSandbox) console.log(`orchard exec confinement tests skipped: ${noSandbox}`);

/** `orchard exec` as a user (or the lead) types it, for the fixture's child; the environment is this process's. */
function orchardExec(f: Fixture, command: string, options: { json?: boolean } = {}): Promise<CliRun> {
  const args = ['exec', '--branch', f.layout.branch, '--worktree', f.child, ...(options.json ? ['--json'] : []), '--', command];
  return runOrchard(args, {}, { cwd: f.child, timeoutMs: 110_000 });
}

interface ExecReport {
  command: string;
  branch: string;
  worktree: string;
  confinement: string;
  decision: 'allow' | 'deny';
  refusal?: { code: string; message: string };
  status?: number;
  signal?: string | null;
  timedOut?: boolean;
  changes?: Array<{ kind: string; path: string; change: string; before?: string; after?: string }>;
  stdout?: string;
  stderr?: string;
}

function parseReport(t: ExecutionContext, run: CliRun): ExecReport {
  try {
    return JSON.parse(run.stdout) as ExecReport;
  } catch {
    t.fail(`orchard exec --json printed no JSON (exit ${run.code});\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`);
    throw new Error('no JSON');
  }
}

/**
 * Commits of other refs the own branch gained or dropped from `from` to `to` (empty for a rewind), computed here with
 * plain git and not with Orchard's own check: a move that is not reported must leave this empty.
 */
function sharedCommitsMoved(f: Fixture, from: string, to: string): string[] {
  if (from === to || git(f.main, 'merge-base', from, to) === to) return [];
  const others = ['--exclude=orchard/c1/*', '--branches', '--exclude=*/orchard/c1/*', '--remotes', '--tags'];
  const list = (...args: string[]) =>
    git(f.main, 'rev-list', ...args)
      .split('\n')
      .filter(Boolean);
  const shared = (a: string, b: string) => {
    const own = new Set(list(a, `^${b}`, '--not', ...others));
    return list(a, `^${b}`).filter((c) => !own.has(c));
  };
  return [...shared(to, from), ...shared(from, to)];
}

/** The child's HEAD as its admin dir holds it (not through its `.git` file, which an attack may have rewritten). */
const ownHead = (f: Fixture) => readFileSync(path.join(f.admin, 'HEAD'), 'utf8').trim();

const lastLines = (text: string | undefined) => (text ?? '').trim().split('\n').slice(-2).join(' | ');

for (const [name, command] of attacks) {
  for (const form of ['plain', 'script'] as const) {
    execTest(`attack (${form}): ${name} changes nothing outside the allowance`, async (t) => {
      const f = await fixture(OUTSIDE, { backstop: true });
      const marker = newMarker();
      const text = fill(f, command, marker);
      // The script is written by the test, not through exec: the guard sees only `bash x.sh`.
      if (form === 'script') writeFileSync(path.join(f.child, 'x.sh'), `${text}\n`);
      const before = snapshot(f);
      const objectsBefore = sharedObjects(f);
      const ownBefore = verifiedInAllowance(f);
      const tipBefore = git(f.main, 'rev-parse', 'orchard/c1/work');
      const run = await orchardExec(f, form === 'script' ? 'bash x.sh' : text, { json: true });
      const after = snapshot(f);
      const objectsLost = lostObjects(objectsBefore, sharedObjects(f));
      const ownAfter = verifiedInAllowance(f);
      const leaked = outsideMarkers(marker).filter((p) => existsSync(p));
      removeOutsideMarkers(marker);
      const report = parseReport(t, run);

      const changedOutside = !isDeepStrictEqual(after, before) || leaked.length > 0 || objectsLost.length > 0;
      const layer: Layer = changedOutside ? 'NOT stopped' : run.code === 3 ? 'guard' : run.code === 4 ? 'verification' : 'sandbox';
      outcomes.push({ name, form, layer, code: run.code });
      const said = report.decision === 'deny' ? `${report.refusal?.code}: ${lastLines(report.refusal?.message.split('\n')[0])}` : lastLines(report.stderr);
      t.log(`${layer} (exit ${run.code}, confinement ${report.confinement}): ${said}`);

      t.deepEqual(after.git, before.git);
      t.deepEqual(after.files, before.files);
      t.deepEqual(objectsLost, [], 'shared objects removed or changed');
      t.deepEqual(leaked, [], 'files created outside every fixture');
      if (run.code === 3) {
        t.is(report.decision, 'deny');
        t.is(report.refusal?.code, 'guard_refused', 'refused, but not by the guard');
        t.deepEqual(ownAfter, ownBefore);
        t.is(form, 'plain', 'the guard cannot read a script: `bash x.sh` must not be what it refuses');
      } else if (run.code === 4) {
        t.is(report.decision, 'allow');
        t.true((report.changes ?? []).length > 0);
        t.log(`verification reported: ${(report.changes ?? []).map((c) => `${c.change} ${c.kind} ${c.path}`).join('; ')}`);
        // What it found lies in what the sandbox lets the child write: it is there on disk — or it is the child's own
        // branch moved off its own history (held, not undone), or its HEAD, which Orchard put back.
        const repaired = (report.changes ?? []).some((c) => c.kind === 'history' || (c.kind === 'head' && /put back by Orchard/.test(c.after ?? '')));
        if (!repaired) t.notDeepEqual(ownAfter, ownBefore, 'exit 4, but nothing verification protects inside the allowance changed');
        t.is(ownHead(f), 'ref: refs/heads/orchard/c1/work', 'the own HEAD is on its branch after the command');
      } else {
        t.is(report.decision, 'allow');
        t.is(ownHead(f), 'ref: refs/heads/orchard/c1/work', 'the own HEAD stayed on its branch');
        t.deepEqual(sharedCommitsMoved(f, tipBefore, git(f.main, 'rev-parse', 'orchard/c1/work')), [], 'the own branch left its own history unreported');
        t.is(report.status, run.code, "exec exits with the command's status");
        t.deepEqual(report.changes, []);
        t.deepEqual(ownAfter, ownBefore, 'changed what verification protects, yet exec did not exit 4');
      }
    });
  }
}

for (const [name, c] of benign) {
  execTest(
    `benign: ${name}`,
    async (t) => {
      const f = await fixture(OUTSIDE, { backstop: true });
      c.setup?.(f);
      // The host's part of exec's preparation, done before every command (a setup's pack-refs deletes ref dirs).
      await prepareSandboxDirs(f.layout);
      const exec = async (command: string): Promise<CommandResult> => {
        const run = await orchardExec(f, command);
        return { status: run.code, stdout: run.stdout, stderr: run.stderr };
      };
      const before = snapshot(f);
      const objectsBefore = sharedObjects(f);
      const ownBefore = verifiedInAllowance(f);
      const r = await exec(c.command);
      if (c.guardPolicy) {
        // Refused by the guard's policy before anything ran: exit 3, the reason, and (below) no change.
        t.is(r.status, 3, r.stderr);
        t.regex(r.stderr, new RegExp(`\\(${c.guardPolicy}\\)`));
      } else {
        await c.check(t, f, r, exec);
      }
      const after = snapshot(f);
      // Setups may create a clone; the shared state itself must not change.
      t.deepEqual(after.git, before.git);
      t.deepEqual(after.files, before.files);
      t.deepEqual(lostObjects(objectsBefore, sharedObjects(f)), [], 'shared objects removed or changed');
      t.deepEqual(verifiedInAllowance(f), ownBefore);
    },
    { knownGap: c.knownGap },
  );
}

execTest('the own HEAD is read-only in the kernel: writes, renames and removals fail, a commit still works', async (t) => {
  const f = await fixture(OUTSIDE, { backstop: true });
  // A script, so the guard cannot read it: only the sandbox stands between it and HEAD.
  writeFileSync(
    path.join(f.child, 'x.sh'),
    [
      `echo "ref: refs/heads/main" > ${f.admin}/HEAD || echo write-failed`,
      `echo "ref: refs/heads/main" > ${f.admin}/H && mv -f ${f.admin}/H ${f.admin}/HEAD || echo rename-failed`,
      `rm -f ${f.admin}/HEAD || echo remove-failed`,
      'git symbolic-ref HEAD refs/heads/main || echo symref-failed',
      'echo more >> c1.txt && git commit --quiet -am "still on the branch" && echo committed',
    ].join('\n') + '\n',
  );
  const run = await orchardExec(f, 'bash x.sh', { json: true });
  t.is(run.code, 0, run.stderr);
  const report = parseReport(t, run);
  t.deepEqual(report.changes, [], 'nothing for verification to report or put back: the kernel stopped every write');
  t.is(report.stdout, 'write-failed\nrename-failed\nremove-failed\nsymref-failed\ncommitted\n');
  t.regex(report.stderr ?? '', /Read-only file system/);
  t.regex(report.stderr ?? '', /Device or resource busy/);
  t.is(ownHead(f), 'ref: refs/heads/orchard/c1/work');
  t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'still on the branch');
});

execTest('--json of a command the guard refuses: decision deny with the refusal, nothing run', async (t) => {
  const f = await fixture(OUTSIDE, { backstop: true });
  const run = await orchardExec(f, 'touch ran.txt && git tag pwn', { json: true });
  t.is(run.code, 3, run.stderr);
  const report = parseReport(t, run);
  t.like(report, { command: 'touch ran.txt && git tag pwn', branch: 'orchard/c1/work', worktree: f.child, confinement: 'sandbox', decision: 'deny' });
  t.is(report.refusal?.code, 'guard_refused');
  t.regex(report.refusal?.message ?? '', /git tag/);
  t.is(report.status, undefined);
  t.is(report.changes, undefined);
  t.false(existsSync(path.join(f.child, 'ran.txt')), 'a refused command does not run at all');
  t.throws(() => git(f.main, 'rev-parse', '--verify', '--quiet', 'refs/tags/pwn'));
});

execTest('--json of a command verification catches: exit 4 and the exact change', async (t) => {
  const f = await fixture(OUTSIDE, { backstop: true });
  // A symbolic ref in the own ref directory: the sandbox lets it be written, verification protects it.
  writeFileSync(path.join(f.child, 'x.sh'), 'git symbolic-ref refs/heads/orchard/c1/alias refs/heads/main && echo made\n');
  const run = await orchardExec(f, 'bash x.sh', { json: true });
  t.is(run.code, 4, run.stderr);
  const report = parseReport(t, run);
  t.like(report, { command: 'bash x.sh', confinement: 'sandbox', decision: 'allow', status: 0, timedOut: false, stdout: 'made\n' });
  t.deepEqual(
    report.changes?.map((c) => ({ kind: c.kind, path: c.path, change: c.change })),
    [{ kind: 'ref', path: 'refs/heads/orchard/c1/alias', change: 'created' }],
  );
  t.is(git(f.main, 'symbolic-ref', 'refs/heads/orchard/c1/alias'), 'refs/heads/main');
});

execTest('--json of an allowed command: its status, output and no changes; a failing one passes its status on', async (t) => {
  const f = await fixture(OUTSIDE, { backstop: true });
  const run = await orchardExec(f, 'echo hi > a.txt && git add a.txt && git commit --quiet -m a && echo done', { json: true });
  t.is(run.code, 0, run.stderr);
  const report = parseReport(t, run);
  t.like(report, { confinement: 'sandbox', decision: 'allow', status: 0, signal: null, timedOut: false, changes: [], stdout: 'done\n', stderr: '' });
  t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'a');
  const failing = await orchardExec(f, 'echo oops >&2; exit 7', { json: true });
  t.is(failing.code, 7);
  t.like(parseReport(t, failing), { decision: 'allow', status: 7, changes: [], stderr: 'oops\n' });
});
