import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { waitFor } from '../helpers/wait';

/**
 * Starts test/faults/host-worker.ts in a process of its own, so a test can SIGKILL it mid-activity. Resolves once
 * it polls (after its start-up sweep). `env` reaches the worker (e.g. ORCHARD_TEST_REAP_CANNOT_KILL).
 */
export function startHostWorker(
  t: ExecutionContext,
  hostId: string,
  worktreeRoot: string,
  env: Record<string, string> = {},
): Promise<ChildProcess & { output: () => string }> {
  // node itself, not the tsx launcher (which runs node as a child): SIGKILL must hit the worker process.
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'host-worker.ts'), hostId, worktreeRoot], {
    cwd: join(__dirname, '../..'),
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  let output = '';
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('ready')) resolve(Object.assign(child, { output: () => output }));
    });
    child.on('exit', (code) => reject(new Error(`host worker exited early with ${code}`)));
  });
}

export async function until(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  await waitFor(check, timeoutMs);
}
