import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfinement } from '../activities/bash/confinement';
import { buildCommandEnv } from '../activities/bash/env';
import { decideCommand, loadBashParser } from '../activities/bash/guard';
import { admitIsolated, prepareIsolated, settleIsolated, verifyIsolated } from '../activities/bash/isolated';
import { fullScanCount, SHARED_SCAN_INTERVAL_MS } from '../activities/bash/process-tree';
import { runBash } from '../activities/bash/runner';
import { spawnCommand, startSpawner } from '../activities/bash/spawner';
import { confinedSessionBranch } from '../activities/bash/sandbox';
import { installRefBackstop, markWorktreeIsolated } from '../activities/git/backstop';
import { BRANCH, CORPUS_ENTRIES, WORKTREE } from '../test/unit/guard-corpus';
import { knob, type Report } from './report';
import { benchVerify } from './verify';

/**
 * What one bash tool call pays for Orchard: the guard's decision beside `bash -n -c` (the cheapest thing a call
 * does anyway); a confined command's whole added cost (guard, sandbox, verification, backstop — the same pieces in
 * the same order as the bash tool, activities/tools/run-tool.ts) beside bare `bash -c true` and `git status`; the
 * shared /proc scanner; and verification on a small and a large repository.
 */
export async function benchCommands(report: Report): Promise<void> {
  await guardFigures(report);
  await confinedFigures(report);
  await spawnFigures(report);
  await processScanFigures(report);
  await benchVerify(report);
}

const ms = (ns: bigint) => Number(ns) / 1e6;

/** The guard over its corpus (warm parser, many rounds) beside spawning `bash -n -c` for the same commands. */
async function guardFigures(report: Report): Promise<void> {
  const rounds = knob('GUARD_ROUNDS', 40);
  const bashRounds = knob('BASH_ROUNDS', 2);
  const context = { branch: BRANCH, worktree: WORKTREE, isolated: true };
  // NUL cannot be passed in argv, so those commands are left out of both measurements.
  const commands = CORPUS_ENTRIES.map((e) => e.command).filter((c) => !c.includes('\0'));
  const loadStart = process.hrtime.bigint();
  const parser = await loadBashParser();
  const loadMs = ms(process.hrtime.bigint() - loadStart);
  for (let round = 0; round < 3; round++) for (const c of commands) decideCommand(parser, c, context); // warm-up
  const guard: number[] = [];
  for (let round = 0; round < rounds; round++) {
    for (const c of commands) {
      const t0 = process.hrtime.bigint();
      decideCommand(parser, c, context);
      guard.push(ms(process.hrtime.bigint() - t0));
    }
  }
  const bash: number[] = [];
  for (let round = 0; round < bashRounds; round++) {
    for (const c of commands) {
      const t0 = process.hrtime.bigint();
      spawnSync('bash', ['-n', '-c', c], { stdio: 'ignore' });
      bash.push(ms(process.hrtime.bigint() - t0));
    }
  }
  const note = `${commands.length} corpus commands`;
  const baseline = report.samples('commands', 'spawn `bash -n -c` (same commands)', bash, 'ms', { note });
  report.against(report.samples('commands', "guard's decision (decideCommand, warm parser)", guard, 'ms', { note }), baseline);
  report.add({ section: 'commands', name: "guard's parser load (once per worker)", unit: 'ms', value: loadMs });
}

/**
 * A confined command end to end, in a real repository whose worktree is set up as an isolated child's (the ref
 * backstop installed, the worktree marked): admit (guard) → prepare (layout, sandbox argv, snapshot) → run (bwrap)
 * → verify (snapshot, compare) → settle, beside the same command spawned bare. Runs alternate, so a load change hits
 * both. The backstop is the repository's reference-transaction hook: it runs inside git only when a ref moves.
 */
async function confinedFigures(report: Report): Promise<void> {
  const rounds = knob('SANDBOX_ROUNDS', 40);
  startSpawner(); // commands start as a worker's do (activities/bash/spawner.ts)
  const confinement = await resolveConfinement();
  if (confinement.mode !== 'sandbox') {
    report.skip('commands', `a confined command's cost: the sandbox is ${confinement.mode} here (${confinement.reason})`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'orchard-bench-confined-'));
  try {
    const sessionId = 'bench';
    const branch = confinedSessionBranch(sessionId);
    const repo = join(dir, 'repo');
    const worktree = join(dir, 'worktrees', sessionId);
    const gitEnv = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' };
    const git = (cwd: string, ...args: string[]) => spawnSync('git', args, { cwd, env: gitEnv, stdio: 'ignore' });
    mkdirSync(repo);
    git(repo, 'init', '--quiet', '-b', 'main');
    git(repo, '-c', 'user.name=b', '-c', 'user.email=b@x', 'commit', '--quiet', '--allow-empty', '-m', 'initial');
    git(repo, 'worktree', 'add', '--quiet', '-b', branch, worktree);
    await installRefBackstop(worktree);
    await markWorktreeIsolated(worktree, branch);
    const env = buildCommandEnv({ worktree, sessionId, branch });
    const bare = (command: string) =>
      new Promise<number>((resolve, reject) => {
        const t0 = process.hrtime.bigint();
        // Started as the runner's are (by the spawner), so the difference is the runner's and the sandbox's alone.
        const child = spawnCommand({ file: 'bash', args: ['-c', command], cwd: worktree, env, detached: false, stdio: ['ignore'] });
        child.on('error', reject);
        child.on('exit', () => resolve(ms(process.hrtime.bigint() - t0)));
      });
    const confined = async (command: string) => {
      const t0 = process.hrtime.bigint();
      const admission = await admitIsolated({ command, worktree, branch, confinement });
      if (!admission.admitted) throw new Error(`bench: ${command} was refused: ${admission.message}`);
      const t1 = process.hrtime.bigint();
      const prepared = await prepareIsolated({ command, worktree, branch, sessionId, confinement, decision: admission.decision });
      const t2 = process.hrtime.bigint();
      const result = await runBash({ command, argv: prepared.argv, cwd: worktree, env: prepared.env, timeoutMs: 30_000, maxOutputBytes: 64 * 1024 });
      if (result.exitCode !== 0) throw new Error(`bench: confined ${command} exited ${result.exitCode ?? result.signal}: ${result.stderr}`);
      const t3 = process.hrtime.bigint();
      const changes = await verifyIsolated(prepared);
      if (changes.length > 0) throw new Error(`bench: confined ${command} changed ${changes[0].path}`);
      await settleIsolated(prepared);
      const t4 = process.hrtime.bigint();
      return { total: ms(t4 - t0), guard: ms(t1 - t0), prepare: ms(t2 - t1), run: ms(t3 - t2), verify: ms(t4 - t3) };
    };
    const runner = async (command: string) => {
      const t0 = process.hrtime.bigint();
      await runBash({ command, cwd: worktree, env, timeoutMs: 30_000, maxOutputBytes: 64 * 1024 });
      return ms(process.hrtime.bigint() - t0);
    };
    for (const [label, command] of [
      ['`bash -c true`', 'true'],
      ['`git status`', 'git status --short'],
    ] as const) {
      const samples = {
        bare: [] as number[],
        runner: [] as number[],
        total: [] as number[],
        guard: [] as number[],
        prepare: [] as number[],
        run: [] as number[],
        verify: [] as number[],
      };
      for (let i = 0; i < rounds + 3; i++) {
        const b = await bare(command);
        const r = await runner(command);
        const c = await confined(command);
        if (i < 3) continue; // the first runs warm caches
        samples.bare.push(b);
        samples.runner.push(r);
        for (const key of ['total', 'guard', 'prepare', 'run', 'verify'] as const) samples[key].push(c[key]);
      }
      const base = report.samples('commands', `${label} bare (spawn to exit)`, samples.bare);
      report.against(report.samples('commands', `${label} through the runner, unconfined (process group recorded and reaped)`, samples.runner), base);
      const whole = report.against(report.samples('commands', `${label} confined, whole (guard, sandbox, verification, backstop)`, samples.total), base);
      report.add({ section: 'commands', name: `${label} confined: added cost at p50`, unit: 'ms', value: whole.value - base.value, note: 'confined − bare' });
      report.samples('commands', `${label} confined: guard (admit)`, samples.guard);
      report.samples('commands', `${label} confined: prepare (layout, sandbox argv, snapshot)`, samples.prepare);
      report.samples('commands', `${label} confined: run under bwrap`, samples.run);
      report.samples('commands', `${label} confined: verify and settle`, samples.verify);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * What starting a command costs a worker of a worker's size: `bash -c true` through the runner from a process holding
 * BENCH_SPAWN_BALLAST_MB of touched memory, through the spawner beside a direct start (fork of the whole process on its
 * event loop), each in a process of its own (bench/spawn-ballast.ts): the run's time and the longest stall of the event
 * loop during it.
 */
async function spawnFigures(report: Report): Promise<void> {
  const ballast = knob('SPAWN_BALLAST_MB', 500);
  const measure = (spawner: boolean) =>
    new Promise<{ total: number[]; stall: number[]; rssMb: number }>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'spawn-ballast.ts')], {
        env: { ...process.env, BENCH_SPAWN_BALLAST_MB: String(ballast), ...(spawner ? {} : { ORCHARD_SPAWNER: 'off' }) },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop() ?? '{}')) : reject(new Error(`spawn-ballast exited ${code}`))));
    });
  const direct = await measure(false);
  const helped = await measure(true);
  const note = `a process of ${direct.rssMb} / ${helped.rssMb} MiB RSS`;
  const base = report.samples(
    'commands',
    '`bash -c true` through the runner from a worker-sized process, started directly (fork of the process)',
    direct.total,
    'ms',
    { note },
  );
  report.against(
    report.samples('commands', '`bash -c true` through the runner from a worker-sized process, started by the spawner', helped.total, 'ms', { note }),
    base,
  );
  const stalled = report.samples('commands', "longest event-loop stall during a command's run, started directly", direct.stall, 'ms', { note });
  report.against(report.samples('commands', "longest event-loop stall during a command's run, started by the spawner", helped.stall, 'ms', { note }), stalled);
}

/**
 * Full /proc scans per second while commands run: the worker's one shared scanner, against a scanner per command
 * (what every runner did before), at 1 and 8 concurrent commands.
 */
async function processScanFigures(report: Report): Promise<void> {
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
    for (const count of [1, 8]) {
      const shared = await scansPerSecond(count, false);
      const each = await scansPerSecond(count, true);
      const note = `interval ${SHARED_SCAN_INTERVAL_MS} ms`;
      const base = report.add({
        section: 'commands',
        name: `/proc scans while ${count} command(s) run: a scanner per command`,
        unit: 'per_s',
        value: each,
        note,
      });
      report.against(
        report.add({ section: 'commands', name: `/proc scans while ${count} command(s) run: the shared scanner`, unit: 'per_s', value: shared, note }),
        base,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
