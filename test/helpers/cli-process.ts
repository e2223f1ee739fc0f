import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testStackEnv } from './orchard';

export const ORCHARD_BIN = join(__dirname, '../../bin/orchard');
const runFile = promisify(execFile);

type Teardown = { teardown(fn: () => unknown): void };

export interface OrchardProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** Everything printed so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout has a line matching `pattern`; rejects if the process exits first. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Resolves when the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Like `exited`, but a process still running after `timeoutMs` is killed and the wait fails (no hung test). */
  exit(timeoutMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Environment for an `orchard` process against the test run's Temporal and database, with a state dir of its own
 * and none of the parent's model settings (each test says which model it wants).
 */
export function orchardEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const stack = testStackEnv();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TEMPORAL_ADDRESS: stack.temporalAddress,
    TEMPORAL_NAMESPACE: stack.namespace,
    DATABASE_URL: stack.databaseUrl,
    ORCHARD_STATE_DIR: mkdtempSync(join(tmpdir(), 'orchard-state-')),
    ORCHARD_LOG_LEVEL: 'error',
  };
  for (const key of ['ORCHARD_MODEL_URL', 'ORCHARD_MODEL', 'ORCHARD_MODEL_API_KEY', 'ORCHARD_SCENARIO', 'ORCHARD_HOST_ID']) delete env[key];
  return { ...env, ...extra };
}

/** Starts `bin/orchard <args>` as a supervisor would; SIGKILLs it when the test ends if it still runs. */
export function spawnOrchard(t: Teardown, args: string[], env: NodeJS.ProcessEnv): OrchardProcess {
  const child = spawn(ORCHARD_BIN, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    for (const w of [...waiters]) if (w.pattern.test(out)) w.resolve();
  });
  child.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return {
    child,
    pid: child.pid!,
    stdout: () => out,
    stderr: () => err,
    exited,
    exit: async (timeoutMs = 60_000) => {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          child.kill('SIGKILL');
          reject(new Error(`orchard ${args.join(' ')} still ran after ${timeoutMs} ms;\nstdout:\n${out}\nstderr:\n${err}`));
        }, timeoutMs);
      });
      try {
        return await Promise.race([exited, timedOut]);
      } finally {
        clearTimeout(timer);
      }
    },
    waitFor: (pattern, timeoutMs = 90_000) =>
      new Promise<void>((resolve, reject) => {
        if (pattern.test(out)) return resolve();
        const timer = setTimeout(() => reject(new Error(`no ${pattern} within ${timeoutMs} ms;\nstdout:\n${out}\nstderr:\n${err}`)), timeoutMs);
        waiters.push({
          pattern,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
        void exited.then(({ code, signal }) =>
          reject(new Error(`orchard ${args.join(' ')} exited (${signal ?? code}) before ${pattern};\nstdout:\n${out}\nstderr:\n${err}`)),
        );
      }),
  };
}

/** Pids of live processes whose command line contains `needle` (zombies have an empty one). */
export function processesWithCommandLine(needle: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ').includes(needle)) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

export async function until(check: () => boolean, timeoutMs: number, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The outcome of one run of the real CLI. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `bin/orchard` to completion with `env` on top of this process's environment (a key set to undefined is
 * removed), and returns its exit code and output instead of throwing on a non-zero exit.
 */
export async function runOrchard(args: string[], env: NodeJS.ProcessEnv = {}, options: { cwd?: string; timeoutMs?: number } = {}): Promise<CliRun> {
  const full: NodeJS.ProcessEnv = { ...process.env, ...env };
  for (const [key, value] of Object.entries(env)) if (value === undefined) delete full[key];
  try {
    const { stdout, stderr } = await runFile(ORCHARD_BIN, args, { env: full, cwd: options.cwd, timeout: options.timeoutMs ?? 120_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** The environment that points the CLI at the test run's dev server and a test worker's queue and host. */
export function workerEnv(worker: { taskQueue: string; hostId: string }): NodeJS.ProcessEnv {
  return { TEMPORAL_ADDRESS: testStackEnv().temporalAddress, ORCHARD_TASK_QUEUE: worker.taskQueue, ORCHARD_HOST_ID: worker.hostId };
}
