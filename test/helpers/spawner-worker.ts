import { runBash } from '../../activities/bash/runner';
import { startSpawner } from '../../activities/bash/spawner';

/**
 * A stand-in worker for test/unit/spawner.test.ts: runs `argv` (a sandbox's, `--` before the command) through the
 * runner, so the spawner starts it, prints `running <pgid>` once it runs, and waits to be killed.
 */
startSpawner();
const argv = process.argv.slice(2);
void runBash({
  command: argv[argv.length - 1],
  argv,
  cwd: '/',
  env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  timeoutMs: 120_000,
  maxOutputBytes: 10_000,
  onSpawn: (info) => void setTimeout(() => console.log(`running ${info.pgid}`), 200),
});
