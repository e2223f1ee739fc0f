import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { DEFAULT_MAX_COMMANDS } from '../activities/bash/command-slots';

/** Everything a worker process reads from its environment, in one place (the README's table). */
export interface WorkerConfig {
  /** Temporal frontend; undefined means "boot the embedded dev server". */
  temporalAddress?: string;
  namespace: string;
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
  /** At most this many commands (bash tool calls) run at once on this host. */
  maxConcurrentCommands: number;
}

export const DEFAULT_TASK_QUEUE = 'orchard';

/** ORCHARD_MAX_COMMANDS: a positive integer, 4 when unset; anything else stops the worker at start. */
export function maxCommandsFromEnv(raw: string | undefined): number {
  if (raw === undefined || raw.trim() === '') return DEFAULT_MAX_COMMANDS;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`ORCHARD_MAX_COMMANDS must be a positive integer, got "${raw}"`);
  return n;
}

/** Host ids become task-queue names: keep them to a safe alphabet. */
export function sanitizeHostId(raw: string): string {
  const cleaned = raw.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '');
  return cleaned.slice(0, 63) || 'host';
}

export function workerConfigFromEnv(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): WorkerConfig {
  const stateDir = resolve(cwd, env.ORCHARD_STATE_DIR ?? '.orchard');
  return {
    temporalAddress: env.TEMPORAL_ADDRESS || undefined,
    namespace: env.TEMPORAL_NAMESPACE || 'default',
    taskQueue: env.ORCHARD_TASK_QUEUE || DEFAULT_TASK_QUEUE,
    hostId: sanitizeHostId(env.ORCHARD_HOST_ID || hostname()),
    worktreeRoot: resolve(cwd, env.ORCHARD_WORKTREE_ROOT ?? join(stateDir, 'worktrees')),
    databaseUrl: env.DATABASE_URL || undefined,
    stateDir,
    maxConcurrentCommands: maxCommandsFromEnv(env.ORCHARD_MAX_COMMANDS),
  };
}
