import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { DEFAULT_MAX_COMMANDS } from '../activities/bash/command-slots';
import { DEFAULT_TASK_QUEUE } from '../contract/task-queues';

/**
 * The checkout bin/orchard runs from: relative state paths resolve against it, whatever the caller's cwd. The
 * nearest directory above this module with a package.json, so it is the same from the sources (`worker/`) and
 * from the compiled CLI (`dist/worker/`).
 */
export const PROJECT_ROOT = packageRoot(__dirname);

function packageRoot(from: string): string {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    if (fs.existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${from}: Orchard runs from its checkout`);
  }
}

/**
 * What a worker process reads from its environment (the README's table), Temporal's connection settings aside:
 * those come from client/connection.ts.
 */
export interface WorkerConfig {
  /** Shared queue: workflows, model calls and store activities. */
  taskQueue: string;
  /**
   * This host's id; its worktree activities run on `orchard-host-<hostId>`. ORCHARD_HOST_ID, else generated once
   * and kept in `<stateDir>/host-id`: stable across restarts, and not the (pod) hostname, which changes.
   */
  hostId: string;
  /** Where this host creates worktrees. */
  worktreeRoot: string;
  /** PostgreSQL; undefined means embedded PGlite. */
  databaseUrl?: string;
  /** The project's state directory (dev server db, PGlite data, worktrees by default). */
  stateDir: string;
  /** At most this many commands (bash tool calls) run at once on this host. */
  maxConcurrentCommands: number;
  /**
   * ORCHARD_MAX_ACTIVITIES: at most this many activities run at once in each of the worker's two workers (a running
   * command holds one for as long as it runs); the SDK's default (100) when unset.
   */
  maxConcurrentActivities?: number;
  /**
   * ORCHARD_STORE_CONNECTIONS: the worker's PostgreSQL connections (its pool's size); 8 when unset. A host that runs
   * many commands or handoffs at once needs more: every running command checks its lease, every board write holds one.
   */
  storeConnections?: number;
  /**
   * On SIGTERM/SIGINT the worker stops polling and running activities get this long to finish (a build, a test
   * run); then the SDK cancels them, and a tool call cut short is reported to the model as `unknown`.
   */
  shutdownGraceSeconds: number;
  /**
   * ORCHARD_METRICS_PORT: where the worker serves `GET /metrics` (Orchard's metrics) and `GET /metrics/temporal` (the
   * Temporal SDK's); unset, no metrics endpoint. ORCHARD_METRICS_HOST: the address it binds (all interfaces when unset).
   */
  metrics?: { port: number; host?: string };
}

/** Long enough for a typical build or test run to finish during a deploy. */
export const DEFAULT_SHUTDOWN_GRACE_SECONDS = 600;

/** A variable that cannot be used as given; the message says which and what it must be. */
export class ConfigError extends Error {
  readonly code = 'invalid_input';
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** ORCHARD_MAX_COMMANDS: a positive integer, 4 when unset; anything else stops the worker at start. */
export function maxCommandsFromEnv(raw: string | undefined): number {
  return positiveIntegerFromEnv('ORCHARD_MAX_COMMANDS', raw) ?? DEFAULT_MAX_COMMANDS;
}

/** A positive integer, or undefined when unset (the default applies); anything else stops the worker at start. */
function positiveIntegerFromEnv(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw.trim() === '') return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new ConfigError(`${name} must be a positive integer, got "${raw}"`);
  return n;
}

/** Host ids become task-queue names: keep them to a safe alphabet. */
function sanitizeHostId(raw: string): string {
  const cleaned = raw.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '');
  return cleaned.slice(0, 63) || 'host';
}

export function workerConfigFromEnv(env: NodeJS.ProcessEnv = process.env, cwd = PROJECT_ROOT): WorkerConfig {
  const stateDir = resolve(cwd, env.ORCHARD_STATE_DIR ?? '.orchard');
  return {
    // The shared task queue the client starts workflows on and the worker polls.
    taskQueue: env.ORCHARD_TASK_QUEUE || DEFAULT_TASK_QUEUE,
    hostId: env.ORCHARD_HOST_ID ? sanitizeHostId(env.ORCHARD_HOST_ID) : persistedHostId(stateDir),
    worktreeRoot: resolve(cwd, env.ORCHARD_WORKTREE_ROOT ?? join(stateDir, 'worktrees')),
    databaseUrl: env.DATABASE_URL || undefined,
    stateDir,
    maxConcurrentCommands: maxCommandsFromEnv(env.ORCHARD_MAX_COMMANDS),
    maxConcurrentActivities: positiveIntegerFromEnv('ORCHARD_MAX_ACTIVITIES', env.ORCHARD_MAX_ACTIVITIES),
    storeConnections: positiveIntegerFromEnv('ORCHARD_STORE_CONNECTIONS', env.ORCHARD_STORE_CONNECTIONS),
    shutdownGraceSeconds: nonNegativeSeconds(env, 'ORCHARD_SHUTDOWN_GRACE_SECONDS', DEFAULT_SHUTDOWN_GRACE_SECONDS),
    metrics: metricsFromEnv(env),
  };
}

function metricsFromEnv(env: NodeJS.ProcessEnv): WorkerConfig['metrics'] {
  const raw = env.ORCHARD_METRICS_PORT?.trim();
  if (!raw) return undefined;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new ConfigError(`ORCHARD_METRICS_PORT must be a TCP port (1 to 65535), got ${JSON.stringify(raw)}`);
  }
  const host = env.ORCHARD_METRICS_HOST?.trim();
  return { port, ...(host ? { host } : {}) };
}

function nonNegativeSeconds(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name]?.trim();
  if (!raw) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) {
    throw new ConfigError(`${name} must be a number of seconds (0 or more), got ${JSON.stringify(raw)}`);
  }
  return value;
}

const HOST_ID_FILE = 'host-id';

/**
 * The host id kept in `<stateDir>/host-id`, generated on first use. Created with link(2), which fails when the
 * file exists: of two workers starting at once on a fresh state dir, both end with the one id that was written.
 */
export function persistedHostId(stateDir: string): string {
  const file = join(stateDir, HOST_ID_FILE);
  const existing = readHostIdFile(file);
  if (existing) return existing;
  fs.mkdirSync(stateDir, { recursive: true });
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  fs.writeFileSync(tmp, `host-${randomBytes(6).toString('hex')}\n`);
  try {
    fs.linkSync(tmp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  const written = readHostIdFile(file);
  if (!written) throw new ConfigError(`${file} does not hold a host id: remove it, or set ORCHARD_HOST_ID`);
  return written;
}

function readHostIdFile(file: string): string | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const id = text.trim();
  if (!id) return undefined;
  if (sanitizeHostId(id) !== id) throw new ConfigError(`${file} holds ${JSON.stringify(id.slice(0, 80))}, which is no host id: fix or remove it`);
  return id;
}
