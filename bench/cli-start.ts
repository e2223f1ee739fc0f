import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildCli } from '../scripts/build';

/**
 * How long `bin/orchard` takes from spawn to exit for `--help` and for a guard dry run (what an agent's tool call
 * or a supervisor's start pays before any work), beside `node -e 0`, the floor no node CLI gets under. Builds
 * dist/ first so it never times a stale or missing CLI. Figures are reported, never asserted.
 */
const RUNS = Number(process.env.BENCH_CLI_RUNS ?? 20);
const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'orchard');

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** Wall time of `runs` runs of `file args` (after one unmeasured run that warms the disk cache), sorted. */
function time(file: string, args: string[], runs: number): number[] {
  const samples: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const t0 = process.hrtime.bigint();
    const r = spawnSync(file, args, { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.status !== 0) throw new Error(`${path.basename(file)} ${args.join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
    if (i > 0) samples.push(ms);
  }
  return samples.sort((a, b) => a - b);
}

/** A repository with a session worktree on orchard/s1/work, for `orchard exec` (removed by the caller). */
function execFixture(): { base: string; worktree: string } {
  const base = mkdtempSync(path.join(os.tmpdir(), 'orchard-bench-exec-'));
  const git = (cwd: string, ...args: string[]) =>
    execFileSync('git', args, {
      cwd,
      stdio: 'ignore',
      env: {
        ...process.env,
        GIT_CONFIG_GLOBAL: '/dev/null',
        GIT_AUTHOR_NAME: 'b',
        GIT_AUTHOR_EMAIL: 'b@b',
        GIT_COMMITTER_NAME: 'b',
        GIT_COMMITTER_EMAIL: 'b@b',
      },
    });
  const repo = path.join(base, 'repo');
  mkdirSync(repo);
  git(repo, 'init', '-q', '-b', 'main');
  git(repo, 'commit', '-q', '--allow-empty', '-m', 'init');
  const worktree = path.join(base, 'worktrees', 's1');
  git(repo, 'worktree', 'add', '-q', '-b', 'orchard/s1/work', worktree);
  return { base, worktree };
}

export async function benchCliStart(runs = RUNS): Promise<string[]> {
  const build = await buildCli(root);
  const fixture = execFixture();
  const cases: [string, string, string[]][] = [
    ['node -e 0', process.execPath, ['-e', '0']],
    ['orchard --help', bin, ['--help']],
    ['orchard guard (git status)', bin, ['guard', '--branch', 'orchard/s1/work', '--worktree', os.tmpdir(), '--', 'git status']],
    // All three layers: the sandbox probe, the guard, the backstop, a confined `true`, verification.
    ['orchard exec (true)', bin, ['exec', '--branch', 'orchard/s1/work', '--worktree', fixture.worktree, '--', 'true']],
  ];
  const lines = [`CLI start (spawn to exit, ${runs} runs each; dist/ built in ${build.ms} ms):`];
  for (const [name, file, args] of cases) {
    const s = time(file, args, runs);
    const f = (x: number) => `${x.toFixed(0)} ms`.padStart(8);
    lines.push(`  ${name.padEnd(28)} p50 ${f(percentile(s, 50))}  p95 ${f(percentile(s, 95))}  max ${f(s[s.length - 1])}`);
  }
  rmSync(fixture.base, { recursive: true, force: true });
  return lines;
}

if (require.main === module) {
  benchCliStart().then(
    (lines) => console.log(lines.join('\n')),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
