import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildCommandEnv } from '../activities/bash/env';
import { decideCommand, loadBashParser } from '../activities/bash/guard';
import { fullScanCount, SHARED_SCAN_INTERVAL_MS } from '../activities/bash/process-tree';
import { runBash } from '../activities/bash/runner';
import { buildSandboxArgv, confinedSessionBranch, prepareSandboxDirs, resolveSandboxLayout, sandboxAvailable } from '../activities/bash/sandbox';
import { BRANCH, CORPUS_ENTRIES, WORKTREE } from '../test/unit/guard-corpus';
import { benchHandoff } from './handoff';
import { benchVerify } from './verify';
import { benchCliStart } from './cli-start';
import { knob, percentile, Report } from './report';

/**
 * `npm run bench`: the guard's decision time over the corpus (warm parser, many rounds) against the cost of
 * spawning `bash -n -c <command>` for the same commands, the cheapest thing a bash tool call does anyway; /proc
 * scans; and the team handoff's latency on the embedded stack against its 5 s SLO (`BENCH_HANDOFFS=0` skips it).
 * Figures are printed, never asserted; compare the ratio within one run.
 */

const GUARD_ROUNDS = Number(process.env.BENCH_GUARD_ROUNDS ?? 40);
const BASH_ROUNDS = Number(process.env.BENCH_BASH_ROUNDS ?? 2);


const ms = (ns: bigint) => Number(ns) / 1e6;
const fmt = (x: number) => (x < 1 ? `${(x * 1000).toFixed(1)} µs` : `${x.toFixed(3)} ms`);

/**
 * The sections, in the order they run. `BENCH_ONLY=route,scale` runs those alone; `BENCH_SKIP=handoff` leaves some
 * out. Each adds its figures to the one report, written to bench/results.json at the end.
 */
const SECTIONS: Record<string, (report: Report) => Promise<void>> = {
  commands: benchCommands,
  cli: async () => {
    for (const line of await benchCliStart()) console.log(line);
  },
  handoff: async () => {
    if (knob('HANDOFFS', 5) > 0) await benchHandoff();
  },
};

async function main(): Promise<void> {
  const only = (process.env.BENCH_ONLY ?? '').split(',').filter(Boolean);
  const skip = (process.env.BENCH_SKIP ?? '').split(',').filter(Boolean);
  for (const name of [...only, ...skip]) if (!(name in SECTIONS)) throw new Error(`bench: no section ${name} (${Object.keys(SECTIONS).join(', ')})`);
  const report = await Report.open();
  for (const [name, section] of Object.entries(SECTIONS)) {
    if ((only.length > 0 && !only.includes(name)) || skip.includes(name)) continue;
    console.log(`\n== ${name}`);
    await section(report);
  }
  report.write();
}

async function benchCommands(_report: Report): Promise<void> {
  const started = process.hrtime.bigint();
  const context = { branch: BRANCH, worktree: WORKTREE, isolated: true };
  // NUL cannot be passed in argv, so those commands are left out of both measurements.
  const commands = CORPUS_ENTRIES.map((e) => e.command).filter((c) => !c.includes('\0'));

  const loadStart = process.hrtime.bigint();
  const parser = await loadBashParser();
  const loadMs = ms(process.hrtime.bigint() - loadStart);

  for (let round = 0; round < 3; round++) for (const c of commands) decideCommand(parser, c, context); // warm-up

  const guardSamples: number[] = [];
  let refused = 0;
  for (let round = 0; round < GUARD_ROUNDS; round++) {
    for (const c of commands) {
      const t0 = process.hrtime.bigint();
      const d = decideCommand(parser, c, context);
      guardSamples.push(ms(process.hrtime.bigint() - t0));
      if (round === 0 && !d.allowed) refused++;
    }
  }

  const bashSamples: number[] = [];
  for (let round = 0; round < BASH_ROUNDS; round++) {
    for (const c of commands) {
      const t0 = process.hrtime.bigint();
      spawnSync('bash', ['-n', '-c', c], { stdio: 'ignore' });
      bashSamples.push(ms(process.hrtime.bigint() - t0));
    }
  }

  guardSamples.sort((a, b) => a - b);
  bashSamples.sort((a, b) => a - b);
  const g50 = percentile(guardSamples, 50);
  const g99 = percentile(guardSamples, 99);
  const b50 = percentile(bashSamples, 50);
  const b99 = percentile(bashSamples, 99);
  const row = (name: string, n: number, p50: number, p99: number, max: number) =>
    `${name.padEnd(26)} ${String(n).padStart(7)}  p50 ${fmt(p50).padStart(10)}  p99 ${fmt(p99).padStart(10)}  max ${fmt(max).padStart(10)}`;

  console.log(`bash guard benchmark: ${commands.length} corpus commands (${refused} refused), parser load ${fmt(loadMs)}`);
  console.log(row('guard decideCommand', guardSamples.length, g50, g99, guardSamples[guardSamples.length - 1]));
  console.log(row('spawn bash -n -c', bashSamples.length, b50, b99, bashSamples[bashSamples.length - 1]));
  console.log(`ratio (guard / bash -n spawn): p50 ${(g50 / b50).toFixed(4)}  p99 ${(g99 / b99).toFixed(4)}`);
  console.log(`bash -n spawn is ${(b50 / g50).toFixed(0)}x the guard's p50 decision time; total ${fmt(ms(process.hrtime.bigint() - started))}`);
  await benchProcessScans();
  await benchSandbox();
  // Layer 3's cost per command: two snapshots of what an isolated child must not change, and their comparison.
  for (const line of await benchVerify()) console.log(line);
}

/**
 * Full /proc scans per second while commands run: the worker's one shared scanner, against a scanner per
 * command (what every runner did before), at 1 and 8 concurrent commands.
 */
async function benchProcessScans(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-bench-'));
  const env = buildCommandEnv({ worktree: dir, sessionId: 'bench', branch: 'orchard/bench' });
  const windowMs = 2000;
  const scansPerSecond = async (count: number, perCommand: boolean): Promise<number> => {
    let started = 0;
    const runs = Array.from({ length: count }, () =>
      runBash({
        command: 'sleep 3',
        cwd: dir,
        env,
        timeoutMs: 30_000,
        maxOutputBytes: 1024,
        snapshotMs: perCommand ? SHARED_SCAN_INTERVAL_MS : undefined,
        onSpawn: () => void started++,
      }),
    );
    while (started < count) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 300));
    const before = fullScanCount();
    await new Promise((r) => setTimeout(r, windowMs));
    const scans = fullScanCount() - before;
    await Promise.all(runs);
    return (scans * 1000) / windowMs;
  };
  try {
    const rows: string[] = [];
    for (const count of [1, 8]) {
      const shared = await scansPerSecond(count, false);
      const each = await scansPerSecond(count, true);
      rows.push(`${String(count).padStart(2)} command(s): shared scanner ${shared.toFixed(1)}/s, a scanner per command ${each.toFixed(1)}/s`);
    }
    console.log(`/proc full scans per second while commands run (interval ${SHARED_SCAN_INTERVAL_MS} ms):`);
    for (const row of rows) console.log(`  ${row}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const SANDBOX_ROUNDS = Number(process.env.BENCH_SANDBOX_ROUNDS ?? 40);

/**
 * The sandbox's cost per command (activities/bash/sandbox.ts): `bash -c true` and `git status` spawned bare and
 * through bwrap in a real worktree layout, stdin closed as the bash tool does. Printed, never asserted.
 */
async function benchSandbox(): Promise<void> {
  const probe = await sandboxAvailable();
  if (!probe.ok) {
    console.log(`sandbox per command: not measured, the sandbox is unavailable: ${probe.reason}`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'orchard-bench-sandbox-'));
  try {
    const repo = join(dir, 'repo');
    const worktree = join(dir, 'worktrees', 'bench');
    const branch = confinedSessionBranch('bench');
    const gitEnv = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' };
    const git = (cwd: string, ...args: string[]) => spawnSync('git', args, { cwd, env: gitEnv, stdio: 'ignore' });
    spawnSync('mkdir', ['-p', repo]);
    git(repo, 'init', '--quiet', '-b', 'main');
    git(repo, '-c', 'user.name=b', '-c', 'user.email=b@x', 'commit', '--quiet', '--allow-empty', '-m', 'initial');
    git(repo, 'worktree', 'add', '--quiet', '-b', branch, worktree);
    const layout = await resolveSandboxLayout({ commonDir: join(repo, '.git'), worktree, branch, tmpDir: join(dir, 'tmp') });
    await prepareSandboxDirs(layout);
    const env = buildCommandEnv({ worktree, sessionId: 'bench', branch });
    const measure = (argv: string[]): number[] => {
      const samples: number[] = [];
      for (let i = 0; i < SANDBOX_ROUNDS + 3; i++) {
        const t0 = process.hrtime.bigint();
        spawnSync(argv[0], argv.slice(1), { cwd: worktree, env, stdio: ['ignore', 'ignore', 'ignore'] });
        if (i >= 3) samples.push(ms(process.hrtime.bigint() - t0)); // the first runs warm caches
      }
      return samples.sort((a, b) => a - b);
    };
    console.log(`sandbox per command (${probe.version}, ${SANDBOX_ROUNDS} runs each, p50 / p99):`);
    for (const command of ['true', 'git status --short']) {
      const bare = measure(['bash', '-c', command]);
      const boxed = measure(buildSandboxArgv(layout, command));
      const [b50, b99, s50, s99] = [percentile(bare, 50), percentile(bare, 99), percentile(boxed, 50), percentile(boxed, 99)];
      console.log(
        `  ${`bash -c ${JSON.stringify(command)}`.padEnd(28)} bare ${fmt(b50)} / ${fmt(b99)}   bwrap ${fmt(s50)} / ${fmt(s99)}   ` +
          `cost +${fmt(s50 - b50)} at p50, ratio ${(s50 / b50).toFixed(2)}x`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
