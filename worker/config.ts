import { hostname } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * What a worker process reads from its environment (the README's table), Temporal's connection settings aside:
 * those come from worker/temporal-connection.ts.
 */
export interface WorkerConfig {
  /** Shared queue: workflows, model calls and store activities. */
  taskQueue: string;
  /** This host's id; its worktree activities run on `orchard-host-<hostId>`. */
  hostId: string;
  /** Where this host creates worktrees. */
  worktreeRoot: string;
  /** PostgreSQL; undefined means embedded PGlite. */
  databaseUrl?: string;
  /** The project's state directory (dev server db, PGlite data, worktrees by default). */
  stateDir: string;
}

export const DEFAULT_TASK_QUEUE = 'orchard';

/** Host ids become task-queue names: keep them to a safe alphabet. */
export function sanitizeHostId(raw: string): string {
  const cleaned = raw.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '');
  return cleaned.slice(0, 63) || 'host';
}

export function workerConfigFromEnv(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): WorkerConfig {
  const stateDir = resolve(cwd, env.ORCHARD_STATE_DIR ?? '.orchard');
  return {
    taskQueue: env.ORCHARD_TASK_QUEUE || DEFAULT_TASK_QUEUE,
    hostId: sanitizeHostId(env.ORCHARD_HOST_ID || hostname()),
    worktreeRoot: resolve(cwd, env.ORCHARD_WORKTREE_ROOT ?? join(stateDir, 'worktrees')),
    databaseUrl: env.DATABASE_URL || undefined,
    stateDir,
  };
}
