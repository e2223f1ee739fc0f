/**
 * The public contract of Orchard's workflows: every signal, update and query, with its input and
 * result shapes. Services in any language use these names and JSON shapes; `client/` wraps them.
 * Validation lives here as `xxxProblem(input)` functions that the workflow validators and the client
 * both call, so both accept exactly the same values.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { ErrorCode } from './errors';
import { sessionIdProblem } from './session/ids';

export const SESSION_WORKFLOW_TYPE = 'childSession';
export const sessionWorkflowId = (sessionId: string): string => `session/${sessionId}`;
export const sessionIdFromWorkflowId = (workflowId: string): string | undefined =>
  workflowId.startsWith('session/') ? workflowId.slice('session/'.length) : undefined;

/** Activities that touch a worktree run on the queue of the host whose disk holds it. */
export const hostTaskQueue = (hostId: string): string => `orchard-host-${hostId}`;

/** A task longer than this belongs in a file in the repository, not in workflow history. */
export const MAX_TASK_CHARS = 32_000;

export type SessionStatus = 'progressing' | 'idle' | 'failed' | 'cancelled';

export type ModelSpec =
  /** The worker's configured provider (OpenAI-compatible when ORCHARD_MODEL_URL is set, else scripted). */
  | { readonly provider: 'default' }
  /** A scenario file readable by the worker: offline, deterministic runs and tests. */
  | { readonly provider: 'scripted'; readonly scenario: string };

export interface SessionLimits {
  /** Model calls per turn before the turn ends as `step_limit`. */
  readonly maxStepsPerTurn: number;
  /** Turns per workflow run before continue-as-new keeps history small. */
  readonly turnsPerRun: number;
  /** Upper bound for one bash command, in seconds. */
  readonly bashTimeoutSeconds: number;
  /**
   * How long a worktree activity may wait for its host's worker (scheduleToStart). Past it the turn
   * fails with `host_unavailable` instead of waiting forever for a host that is gone.
   */
  readonly hostWaitSeconds: number;
}

export const DEFAULT_LIMITS: SessionLimits = {
  maxStepsPerTurn: 24,
  turnsPerRun: 20,
  bashTimeoutSeconds: 300,
  hostWaitSeconds: 60,
};

export interface CreateSessionInput {
  /** Becomes the workflow id `session/<sessionId>`; letters, digits, `.`, `_`, `-`. */
  readonly sessionId: string;
  /** One line that the roster, the Web UI summary and `session list` show. */
  readonly title: string;
  /** Absolute path of the git repository on `host` that the worktree is cut from. */
  readonly repo: string;
  /** The host whose worker owns the worktree; its activities run on `orchard-host-<host>`. */
  readonly host: string;
  /** Where the session's branch starts; the repository's HEAD when absent. */
  readonly baseRef?: string;
  /** Agent profile name, shown in the roster. */
  readonly agent?: string;
  /** Workflow id of the orchestrator that owns this child, if any (OrchardParent). */
  readonly parent?: string;
  /** A child created by an orchestrator may only touch its own branch (enforced by the bash guard). */
  readonly isolated?: boolean;
  readonly model?: ModelSpec;
  readonly limits?: Partial<SessionLimits>;
  /** A first task, queued before the worktree exists, so create+send is one call. */
  readonly task?: string;
}

export interface SendInput {
  /** What the session should do next; becomes the user message of one turn. */
  readonly task: string;
  /** Idempotency key: a retried send with the same id is acknowledged once and queued once. */
  readonly requestId?: string;
  /** Who relayed it (orchestrator id, service name), kept for the transcript. */
  readonly from?: string;
}

export interface SendResult {
  readonly taskId: string;
  /** Tasks ahead of this one (0: it runs next, or now). */
  readonly position: number;
  readonly status: SessionStatus;
  /** True when the requestId was seen before and nothing new was queued. */
  readonly duplicate: boolean;
}

export interface CancelInput {
  readonly reason?: string;
}

export type TurnOutcome = 'finished' | 'step_limit' | 'failed' | 'cancelled';

export interface TurnRef {
  readonly turn: number;
  readonly taskId: string;
  readonly outcome: TurnOutcome;
  readonly steps: number;
  /** Tool calls executed in this turn. */
  readonly toolCalls: number;
  /** The model's final text, cut short; the full transcript is in Postgres under (session, turn). */
  readonly finalExcerpt?: string;
  readonly error?: { readonly code: string; readonly message: string };
}

export interface SessionStatusView {
  readonly sessionId: string;
  readonly title: string;
  readonly agent: string;
  readonly host: string;
  readonly repo: string;
  readonly branch?: string;
  readonly worktree?: string;
  readonly status: SessionStatus;
  /** Turns completed over the whole session (across continue-as-new runs). */
  readonly turnsCompleted: number;
  readonly currentTask?: { readonly taskId: string; readonly turn: number; readonly excerpt: string };
  readonly queued: number;
  readonly lastTurn?: TurnRef;
  /** How many times this session has continued-as-new. */
  readonly runIndex: number;
  readonly error?: { readonly code: string; readonly message: string };
}

/** Where the bulky evidence lives: transcript rows in Postgres are keyed by (sessionId, turn). */
export interface TranscriptRefs {
  readonly sessionId: string;
  readonly turns: readonly TurnRef[];
}

export const sendUpdate = defineUpdate<SendResult, [SendInput]>('send');
export const sendSignal = defineSignal<[SendInput]>('send');
export const cancelUpdate = defineUpdate<SessionStatusView, [CancelInput]>('cancel');
export const statusQuery = defineQuery<SessionStatusView>('status');
export const transcriptRefsQuery = defineQuery<TranscriptRefs>('transcriptRefs');

export interface Problem {
  readonly code: ErrorCode;
  readonly message: string;
}

export function sendProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'send needs an object { task }' };
  const { task, requestId, from } = input as Record<string, unknown>;
  if (typeof task !== 'string' || task.trim() === '') {
    return { code: 'task_empty', message: 'send needs a non-empty task: say what the session should do' };
  }
  if (task.length > MAX_TASK_CHARS) {
    return {
      code: 'task_too_large',
      message: `task is ${task.length} characters; the limit is ${MAX_TASK_CHARS}: put the detail in a file and reference it`,
    };
  }
  if (requestId !== undefined && (typeof requestId !== 'string' || requestId.length === 0 || requestId.length > 200)) {
    return { code: 'invalid_input', message: 'requestId must be a non-empty string of at most 200 characters' };
  }
  if (from !== undefined && typeof from !== 'string') return { code: 'invalid_input', message: 'from must be a string' };
  return undefined;
}

export function createSessionProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'create needs an object' };
  const i = input as Record<string, unknown>;
  const idProblem = typeof i.sessionId === 'string' ? sessionIdProblem(i.sessionId) : 'sessionId must be a string';
  if (idProblem) return { code: 'invalid_input', message: idProblem };
  if (typeof i.title !== 'string' || i.title.trim() === '') return { code: 'invalid_input', message: 'title must be a non-empty string' };
  if (typeof i.repo !== 'string' || !i.repo.startsWith('/')) {
    return { code: 'invalid_input', message: 'repo must be an absolute path to a git repository on the host' };
  }
  if (typeof i.host !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(i.host)) {
    return { code: 'invalid_input', message: 'host must be a host id (letters, digits, ".", "_", "-")' };
  }
  const model = i.model as Record<string, unknown> | undefined;
  if (model !== undefined) {
    const ok =
      (model?.provider === 'default') ||
      (model?.provider === 'scripted' && typeof model.scenario === 'string' && model.scenario !== '');
    if (!ok) return { code: 'invalid_input', message: 'model must be { provider: "default" } or { provider: "scripted", scenario }' };
  }
  const limits = i.limits as Record<string, unknown> | undefined;
  if (limits !== undefined) {
    for (const key of Object.keys(limits)) {
      const value = limits[key];
      if (!(key in DEFAULT_LIMITS)) return { code: 'invalid_input', message: `unknown limit ${key}` };
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
        return { code: 'invalid_input', message: `limit ${key} must be a positive integer` };
      }
    }
  }
  if (i.task !== undefined) return sendProblem({ task: i.task });
  return undefined;
}
