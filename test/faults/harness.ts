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

/**
 * Starts test/faults/shared-worker.ts (a shared-queue worker: workflows, model calls, store, dispatch) in a process of
 * its own, optionally under bubblewrap with `hide` covered by empty tmpfs mounts, so that process cannot see what a
 * host's disk holds there. Resolves once it polls; its `probe` line (ORCHARD_TEST_PROBE_PATH in `env`) is in
 * `output()`. The whole process group (bwrap and the worker) is killed at teardown.
 */
export function startSharedWorker(
  t: ExecutionContext,
  options: { taskQueue: string; hostId: string; worktreeRoot: string; modelUrl: string; hide?: string[]; env?: Record<string, string> },
): Promise<ChildProcess & { output: () => string }> {
  const script = join(__dirname, 'shared-worker.ts');
  const node = [process.execPath, '--import', 'tsx', script, options.taskQueue, options.hostId, options.worktreeRoot, options.modelUrl];
  const hide = options.hide ?? [];
  const [command, ...args] =
    hide.length === 0 ? node : ['bwrap', '--dev-bind', '/', '/', ...hide.flatMap((dir) => ['--tmpfs', dir]), '--die-with-parent', '--', ...node];
  // A process group of its own: teardown kills bwrap and the worker under it together.
  const child = spawn(command, args, {
    cwd: join(__dirname, '../..'),
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
    detached: true,
  });
  t.teardown(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  });
  let output = '';
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
  };
  child.stderr!.on('data', collect);
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      collect(chunk);
      if (/^ready$/m.test(output)) resolve(Object.assign(child, { output: () => output }));
    });
    child.on('exit', (code, signal) => reject(new Error(`shared worker exited early with ${code ?? signal}: ${output}`)));
  });
}
