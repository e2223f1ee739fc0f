import { resolve } from 'node:path';
import type { Pool } from 'pg';
import { isErrorCode, orchardFailure } from '../workflows/errors';
import type { ModelSpec } from '../workflows/messages';
import { prepareWorktree } from './git/worktree';
import { loadScenario } from './model/scenario';
import { ScriptedProvider } from './model/scripted';
import { modelStep, type ModelStepInput } from './model/step';
import type { ModelProvider } from './model/types';
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
}

/** Activities bound to the disk that holds a worktree. They run on `orchard-host-<hostId>`. */
export function createHostActivities(deps: HostActivityDeps) {
  const maxOutputBytes = deps.maxOutputBytes ?? 64 * 1024;
  return {
    async prepareWorktree(input: PrepareWorktreeInput) {
      try {
        const prepared = await prepareWorktree({ ...input, worktreeRoot: deps.worktreeRoot });
        return { ...prepared, host: deps.hostId };
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        const message = err instanceof Error ? err.message : String(err);
        throw orchardFailure(isErrorCode(code) ? code : 'worktree_create_failed', message);
      }
    },
    async executeTool(input: ExecuteToolInput) {
      return executeTool({ pool: deps.pool, hostId: deps.hostId, maxOutputBytes }, input);
    },
  };
}

export type SharedActivities = ReturnType<typeof createSharedActivities>;
export type HostActivities = ReturnType<typeof createHostActivities>;
