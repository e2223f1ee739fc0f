import { execFileSync } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compareSnapshots, snapshotProtected, type VerifyLayout } from '../activities/bash/verify';
import { knob, type Report } from './report';

/**
 * Layer 3's cost per command (activities/bash/verify.ts): two snapshots (before and after) and one comparison, on a
 * small repository and on a large one (2,000 loose refs, 5,000 packed, 10 sibling worktrees). Figures for the
 * `commands` section; recorded, never asserted. The snapshot is synchronous, so its time is also the event loop's stall.
 * CPU time (user + system) is printed beside wall time: on a loaded machine it is the steadier figure.
 */

const ROUNDS = knob('VERIFY_ROUNDS', 30);
const WARMUP = 3;

const GIT_ENV: NodeJS.ProcessEnv = {
  PATH: process.env.PATH,
  HOME: tmpdir(),
  LC_ALL: 'C',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_AUTHOR_NAME: 'bench',
  GIT_AUTHOR_EMAIL: 'bench@example.invalid',
  GIT_COMMITTER_NAME: 'bench',
  GIT_COMMITTER_EMAIL: 'bench@example.invalid',
};

function git(cwd: string, args: string[], input?: string): string {
  return execFileSync('git', args, { cwd, env: GIT_ENV, input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] }).trim();
}

interface Shape {
  loose: number;
  packed: number;
  siblings: number;
}

/** A repository of `shape` with the child's worktree on `orchard/bench/work`; returns the child's layout. */
function buildRepository(dir: string, shape: Shape): VerifyLayout {
  const main = join(dir, 'repo');
  git(dir, ['init', '--quiet', '-b', 'main', main]);
  git(main, ['commit', '--quiet', '--allow-empty', '-m', 'initial']);
  const head = git(main, ['rev-parse', 'HEAD']);
  const create = (names: string[]) => git(main, ['update-ref', '--stdin'], names.map((n) => `create ${n} ${head}\n`).join(''));
  // Spread over directories as real repositories are (per-team branches, release tags).
  create(Array.from({ length: shape.packed }, (_, i) => `refs/tags/r${i % 50}/v${i}`));
  git(main, ['pack-refs', '--all']);
  create(Array.from({ length: shape.loose }, (_, i) => `refs/heads/team${i % 40}/b${i}`));
  for (let i = 0; i < shape.siblings; i++) git(main, ['worktree', 'add', '--quiet', '--detach', join(dir, 'worktrees', `sib${i}`)]);
  const worktree = join(dir, 'worktrees', 'bench');
  git(main, ['worktree', 'add', '--quiet', '-b', 'orchard/bench/work', worktree]);
  const commonDir = realpathSync(join(main, '.git'));
  return { commonDir, adminDir: join(commonDir, 'worktrees', 'bench'), worktree: realpathSync(worktree), branch: 'orchard/bench/work' };
}

/** Snapshot and per-command (two snapshots + compare) figures for each repository shape. */
export async function benchVerify(report: Report): Promise<void> {
  const shapes: Array<[string, Shape]> = [
    ['small repository', { loose: 3, packed: 3, siblings: 0 }],
    ['large repository (2,000 loose + 5,000 packed refs, 10 sibling worktrees)', { loose: 2000, packed: 5000, siblings: 10 }],
  ];
  for (const [name, shape] of shapes) {
    const dir = mkdtempSync(join(tmpdir(), 'orchard-bench-verify-'));
    try {
      const layout = buildRepository(dir, shape);
      const snapshots: number[] = [];
      const cpu: number[] = [];
      const commands: number[] = [];
      let entries = 0;
      let bytes = 0;
      for (let i = 0; i < WARMUP + ROUNDS; i++) {
        const t0 = process.hrtime.bigint();
        const usage = process.cpuUsage();
        const before = await snapshotProtected(layout);
        const used = process.cpuUsage(usage);
        const t1 = process.hrtime.bigint();
        const after = await snapshotProtected(layout);
        const changes = compareSnapshots(before, after);
        const t2 = process.hrtime.bigint();
        if (changes.length > 0) throw new Error(`benchVerify: an unchanged repository compared unequal: ${changes[0].path}`);
        if (i < WARMUP) continue;
        snapshots.push(Number(t1 - t0) / 1e6);
        cpu.push((used.user + used.system) / 1000);
        commands.push(Number(t2 - t0) / 1e6);
        entries = Object.keys(before.refs).length + Object.keys(before.files).length;
        bytes = JSON.stringify(before).length;
      }
      const note = `${entries} entries, ${(bytes / 1024).toFixed(0)} KiB as JSON`;
      report.samples('commands', `verification, ${name}: one snapshot`, snapshots, 'ms', { note });
      report.samples('commands', `verification, ${name}: one snapshot's CPU time`, cpu);
      report.samples('commands', `verification, ${name}: per command (2 snapshots + compare)`, commands);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
}
