import { join, resolve } from 'node:path';
import type { Pool } from 'pg';
import { isErrorCode, orchardFailure } from '../workflows/errors';
import type { ModelSpec } from '../workflows/messages';
import { installRefBackstop, markWorktreeIsolated } from './git/backstop';
import { prepareWorktree } from './git/worktree';
import { loadScenario } from './model/scenario';
import { ScriptedProvider } from './model/scripted';
import { modelStep, type ModelStepInput } from './model/step';
import type { ModelProvider } from './model/types';
import { CommandSlots, DEFAULT_MAX_COMMANDS } from './bash/command-slots';
import { reapWorktree, type ReapOptions } from './bash/reaper';
import { acquireLease, releaseLease, type HolderLiveness, type Lease } from './store/leases';
import { appendEntry } from './store/transcript';
import { executeTool, type ExecuteToolInput } from './tools/execute';

export interface SharedActivityDeps {
  pool: Pool;
  /** The provider for `{ provider: 'default' }` sessions; undefined when none is configured. */
  defaultProvider?: ModelProvider;
}

export interface HostActivityDeps {
  pool: Pool;
  hostId: string;
  /** Where this host creates session worktrees. */
  worktreeRoot: string;
  /** Bytes of a command's stdout/stderr (and of a file read) that a tool result keeps. */
  maxOutputBytes?: number;
  /** Whether a lease holder's workflow execution chain is still running (asked of Temporal). */
  holderLiveness: (holder: string) => Promise<HolderLiveness>;
  /** At most this many commands (bash tool calls) run at once on this host (ORCHARD_MAX_COMMANDS). */
  maxConcurrentCommands?: number;
  /** How recorded processes of dead workers are torn down (tests inject a signal sender that cannot kill). */
  reap?: ReapOptions;
}

export interface RecordTaskInput {
  sessionId: string;
  turn: number;
  taskId: string;
  task: string;
}

/** Activities that need no particular host: the model and the store. They run on the shared task queue. */
export function createSharedActivities(deps: SharedActivityDeps) {
  const resolveProvider = async (spec: ModelSpec): Promise<ModelProvider> => {
    if (spec.provider === 'scripted') return new ScriptedProvider(await loadScenario(resolve(spec.scenario)));
    if (!deps.defaultProvider) {
      throw orchardFailure('model_request_rejected', 'this worker has no default model: set ORCHARD_MODEL_URL');
    }
    return deps.defaultProvider;
  };
  return {
    /** The task becomes the user message that opens the turn. */
    async recordTask(input: RecordTaskInput): Promise<void> {
      await appendEntry(
        deps.pool,
        { sessionId: input.sessionId, turn: input.turn, step: 0, ordinal: 0 },
        { role: 'user', content: input.task },
        input.taskId,
      );
    },
    async modelStep(input: ModelStepInput) {
      return modelStep(deps.pool, resolveProvider, input);
    },
  };
}

export interface PrepareWorktreeInput {
  sessionId: string;
  repo: string;
  baseRef?: string;
  /** The session's execution chain (`session/<id>@<firstRunId>`), which takes the worktree's lease. */
  holder: string;
  /** An isolated child may only move its own branch: the worktree is marked for the ref backstop hook. */
  isolated?: boolean;
}

/** Leases are keyed by host and path: two hosts may use the same path for different worktrees. */
export const leaseKey = (hostId: string, worktree: string): string => `${hostId}:${worktree}`;

/** Activities bound to the disk that holds a worktree. They run on `orchard-host-<hostId>`. */
export function createHostActivities(deps: HostActivityDeps) {
  const maxOutputBytes = deps.maxOutputBytes ?? 64 * 1024;
  const commandSlots = new CommandSlots(deps.maxConcurrentCommands ?? DEFAULT_MAX_COMMANDS);
  return {
    /**
     * Takes the worktree's lease, then creates (or re-enters) the worktree. A live holder is never joined by a
     * second agent (`worktree_held`); a holder that cannot be proven gone is refused (`worktree_liveness_unknown`).
     */
    async prepareWorktree(input: PrepareWorktreeInput) {
      const path = join(resolve(deps.worktreeRoot), input.sessionId);
      const outcome = await acquireLease(
        deps.pool,
        { worktree: leaseKey(deps.hostId, path), host: deps.hostId, holder: input.holder },
        {
          holderLiveness: deps.holderLiveness,
          // The holder is closed, so whatever it started is an orphan: reap it by identity (a reused pid is a
          // stranger, never a reason to refuse) and take over only if nothing of any generation is left alive.
          aliveProcesses: async (worktree) => (await reapWorktree(deps.pool, deps.hostId, worktree, deps.reap)).remaining,
        },
      );
      if (outcome.kind === 'bound') {
        throw orchardFailure(
          'worktree_held',
          `worktree ${path} is held by the live session ${outcome.holder}: no second agent on one worktree; ` +
            `route the work to it with \`session send <that session id> <task>\``,
          { holder: outcome.holder },
        );
      }
      if (outcome.kind === 'unknown') {
        throw orchardFailure('worktree_liveness_unknown', `worktree ${path} is held by ${outcome.holder} and ${outcome.reason}`, {
          holder: outcome.holder,
        });
      }
      try {
        const prepared = await prepareWorktree({ ...input, worktreeRoot: deps.worktreeRoot });
        if (input.isolated) {
          // The git-level backstop behind the bash guard: scripts the guard cannot see still cannot move other refs.
          await installRefBackstop(input.repo);
          await markWorktreeIsolated(prepared.worktree, prepared.branch);
        }
        return { ...prepared, host: deps.hostId, lease: outcome.lease, leaseOutcome: outcome.kind };
      } catch (err) {
        await releaseLease(deps.pool, outcome.lease);
        const code = (err as { code?: unknown }).code;
        const message = err instanceof Error ? err.message : String(err);
        throw orchardFailure(isErrorCode(code) ? code : 'worktree_create_failed', message);
      }
    },
    /** Release-if-current, when the session closes: a stale holder's release changes nothing. */
    async releaseWorktree(lease: Lease): Promise<boolean> {
      return releaseLease(deps.pool, lease);
    },
    async executeTool(input: ExecuteToolInput) {
      return executeTool({ pool: deps.pool, hostId: deps.hostId, maxOutputBytes, commandSlots, reap: deps.reap }, input);
    },
  };
}

export type SharedActivities = ReturnType<typeof createSharedActivities>;
export type HostActivities = ReturnType<typeof createHostActivities>;
