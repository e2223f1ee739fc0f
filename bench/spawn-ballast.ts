import { runBash } from '../activities/bash/runner';
import { startSpawner } from '../activities/bash/spawner';

/**
 * Run by bench/commands.ts in a process of its own: `bash -c true` through the runner, from a process that holds
 * BENCH_SPAWN_BALLAST_MB of touched memory (a worker's size), with the spawner or (ORCHARD_SPAWNER=off) without.
 * Prints one JSON line: the run's time, the longest stall of a 1 ms timer during each run, and the process's RSS.
 */
async function main(): Promise<void> {
  const ballast: Buffer[] = [];
  const mb = Number(process.env.BENCH_SPAWN_BALLAST_MB ?? 500);
  while (ballast.length < mb) ballast.push(Buffer.alloc(1 << 20, 1));
  startSpawner();
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  const runs = Number(process.env.BENCH_SPAWN_RUNS ?? 40);
  const total: number[] = [];
  const stall: number[] = [];
  for (let i = 0; i < runs + 3; i++) {
    let last = performance.now();
    let worst = 0;
    const timer = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last - 1);
      last = now;
    }, 1);
    const t0 = performance.now();
    await runBash({ command: 'true', cwd: '/tmp', env, timeoutMs: 30_000, maxOutputBytes: 1024 });
    const t1 = performance.now();
    clearInterval(timer);
    if (i < 3) continue; // the first runs warm caches (and wait for the spawner's start)
    total.push(t1 - t0);
    stall.push(worst);
  }
  console.log(JSON.stringify({ total, stall, rssMb: Math.round(process.memoryUsage().rss / 2 ** 20), ballast: ballast.length }));
  process.exit(0);
}

void main();
