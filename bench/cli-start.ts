import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sessionWorkflowId } from '../contract/messages';
import { resolveTemporalCli } from '../worker/temporal-cli';
import { buildCli } from '../scripts/build';
import { completion } from '../test/helpers/model-stub';
import { knob, type Report } from './report';
import { startBenchStack } from './stack';

/**
 * What one `orchard` command costs a person or a script, spawn to exit: `--help` and a guard dry run and `exec` (no
 * server) beside `node -e 0`, the floor no Node CLI gets under; `session status` and `session send` against a
 * running stack beside `temporal workflow query` of the same session (the Temporal CLI, a Go binary, asking the same
 * workflow). Builds dist/ first so it never times a stale or missing CLI. Figures are recorded, never asserted.
 */
const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'orchard');

/**
 * Wall time of `runs` runs of `file args` (after one unmeasured run that warms the disk cache). Spawned without
 * blocking: the worker that answers `session status` runs in this process.
 */
async function time(file: string, args: string[], runs: number, env?: Record<string, string>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const t0 = process.hrtime.bigint();
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe'], env: env ? { ...process.env, ...env } : process.env });
      let err = '';
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      child.on('error', reject);
      child.on('close', (status, signal) => resolve({ code: status ?? (signal ? -1 : null), stderr: err }));
    });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (code !== 0) throw new Error(`${path.basename(file)} ${args.join(' ')} exited ${code}: ${stderr}`);
    if (i > 0) samples.push(ms);
  }
  return samples;
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

export async function benchCliStart(report: Report): Promise<void> {
  const runs = knob('CLI_RUNS', 10);
  if (runs === 0) {
    report.skip('cli', 'BENCH_CLI_RUNS is 0');
    return;
  }
  const build = await buildCli(root);
  const note = `spawn to exit; dist/ built in ${build.ms} ms`;
  const node = report.samples('cli', 'node -e 0', await time(process.execPath, ['-e', '0'], runs), 'ms', { note: 'the floor of a Node CLI' });
  const fixture = execFixture();
  try {
    const local: [string, string[]][] = [
      ['orchard --help', ['--help']],
      ['orchard guard (git status)', ['guard', '--branch', 'orchard/s1/work', '--worktree', os.tmpdir(), '--', 'git status']],
      // All three layers: the sandbox probe, the guard, the backstop, a confined `true`, verification.
      ['orchard exec (true)', ['exec', '--branch', 'orchard/s1/work', '--worktree', fixture.worktree, '--', 'true']],
    ];
    for (const [name, args] of local) report.against(report.samples('cli', name, await time(bin, args, runs), 'ms', { note }), node);
  } finally {
    rmSync(fixture.base, { recursive: true, force: true });
  }

  const temporal = await resolveTemporalCli(() => undefined).catch(() => undefined);
  const bench = await startBenchStack(() => completion({ content: 'done' }));
  const sessionId = 'bench-cli';
  try {
    const { client } = bench.orchard;
    await client.createSession({ sessionId, title: 'cli bench', repo: bench.repo });
    await client.waitUntilSettled(sessionId, { intervalMs: 100 });
    const env = bench.cliEnv;
    const query = temporal
      ? report.samples(
          'cli',
          '`temporal workflow query` (the session status)',
          await time(
            temporal,
            [
              'workflow',
              'query',
              '--address',
              env.TEMPORAL_ADDRESS,
              '--namespace',
              env.TEMPORAL_NAMESPACE,
              '-w',
              sessionWorkflowId(sessionId),
              '--name',
              'status',
            ],
            runs,
          ),
          'ms',
          { note: 'the Temporal CLI asking the same workflow' },
        )
      : undefined;
    if (!query) report.skip('cli', 'the `temporal workflow query` baseline: no Temporal CLI found');
    const stacked = note.replace('spawn to exit', 'spawn to exit, against the running stack');
    const status = report.samples('cli', 'orchard session status <id>', await time(bin, ['session', 'status', sessionId], runs, env), 'ms', { note: stacked });
    // Each send queues a task (the stub model answers at once): `send` returns once the session's update answers.
    const send = report.samples('cli', 'orchard session send <id> <task>', await time(bin, ['session', 'send', sessionId, 'bench task'], runs, env), 'ms', {
      note: `${stacked}; returns when the task is queued`,
    });
    if (query) {
      report.against(status, query);
      report.against(send, query);
    }
  } finally {
    await bench.stop(() => bench.orchard.client.cancel(sessionId, 'bench done').catch(() => undefined));
  }
}
