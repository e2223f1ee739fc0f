/**
 * The public contract of Orchard's workflows: every signal, update and query, with its input and
 * result shapes. Services in any language use these names and JSON shapes; `client/` wraps them.
 * Validation lives here as `xxxProblem(input)` functions that the workflow validators and the client
 * both call, so both accept exactly the same values.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { ErrorCode } from './errors';
import { ordinarySessionIdProblem, plainIdProblem, sessionIdProblem } from './ids';
import { legacyMemberSessionId, MEMBER_ID_PATTERN, memberSessionId } from './member-session';

export const SESSION_WORKFLOW_TYPE = 'childSession';

/** A short workflow that asks another host to check a repository before a session, orchestrator or team starts. */
export const HOST_PREFLIGHT_WORKFLOW_TYPE = 'hostPreflight';

/** What is checked on the host (see `checkRepository`). */
export interface RepositoryCheck {
  readonly repo: string;
  readonly baseRef?: string;
  /** The session whose branch may exist already (a session created again finds its work there). */
  readonly sessionId?: string;
  /** A scripted scenario file the worker would read. */
  readonly scenario?: string;
}

export interface HostPreflightInput {
  readonly host: string;
  readonly check: RepositoryCheck;
  /** How long to wait for the host's worker to take the check before answering `host_unavailable`. */
  readonly hostWaitSeconds: number;
}
export const sessionWorkflowId = (sessionId: string): string => `session/${sessionId}`;
export const sessionIdFromWorkflowId = (workflowId: string): string | undefined =>
  workflowId.startsWith('session/') ? workflowId.slice('session/'.length) : undefined;

export { DEFAULT_TASK_QUEUE, hostTaskQueue } from './task-queues';

/**
 * A task longer than this belongs in a file in the repository. Its text crosses workflow history once (the
 * send's input); it is stored in Postgres and history carries its id from then on.
 */
export const MAX_TASK_CHARS = 256 * 1024;

/**
 * Where a session stands, in one vocabulary for the status query, the CLI, the `OrchardStatus` search attribute and
 * the Web UI: `progressing` (a turn runs or is queued), `idle` (open, nothing to do), `failed_open` (its last turn
 * failed; it is open and takes the next task), `closed` (cancelled, or it could not start: it takes nothing more;
 * `closedAs` says which).
 */
export type SessionStatus = 'progressing' | 'idle' | 'failed_open' | 'closed';

/** The lifecycle the session workflow keeps (and carries across continue-as-new); shown as a SessionStatus. */
export type SessionLifecycle = 'progressing' | 'idle' | 'failed' | 'cancelled';

/** A lifecycle as people and clients see it: a failed session is `closed` when it took nothing more, else `failed_open`. */
export function sessionStatusOf(lifecycle: SessionLifecycle, closed: boolean): SessionStatus {
  if (closed || lifecycle === 'cancelled') return 'closed';
  return lifecycle === 'failed' ? 'failed_open' : lifecycle;
}

/** queued → running → done | failed | cancelled: every task a session accepted ends in a terminal state. */
export type TaskState = 'queued' | 'running' | 'done' | 'failed' | 'cancelled';

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
  /** Tasks waiting in the queue at most; a send beyond it is refused with `queue_full`. */
  readonly maxQueuedTasks: number;
  /**
   * Bytes of history one workflow run may reach before sends are refused with `queue_full` until the session
   * has continued-as-new: each accepted task's text crosses history once, so this bounds a run's history.
   */
  readonly historyBudgetBytes: number;
  /** Characters of conversation a model request carries at most; the oldest turns are left out beyond it. */
  readonly contextChars: number;
  /**
   * Tokens one model call may produce: sent as `max_tokens` when the session has a budget, and part of each call's
   * reservation (absent in limits resolved before budgets: DEFAULT_LIMITS' value then).
   */
  readonly maxOutputTokens?: number;
}

/** Code defaults; a worker's environment may override them (activities/limits.ts) for sessions it starts. */
export const DEFAULT_LIMITS: SessionLimits = {
  maxStepsPerTurn: 24,
  turnsPerRun: 20,
  bashTimeoutSeconds: 300,
  hostWaitSeconds: 60,
  maxQueuedTasks: 200,
  historyBudgetBytes: 8 * 1024 * 1024,
  contextChars: 400_000,
  maxOutputTokens: 4096,
};

/** Smallest sensible values: below them a session could not work (a history budget a fresh run already exceeds). */
export const LIMIT_MINIMUMS: Partial<Record<keyof SessionLimits, number>> = {
  historyBudgetBytes: 256 * 1024,
  contextChars: 4096,
};

/** Why `value` cannot be the limit `key`, if it cannot (the client, the workflow and the worker's env agree). */
export function limitProblem(key: keyof SessionLimits, value: unknown): string | undefined {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) return `limit ${key} must be a positive integer`;
  const minimum = LIMIT_MINIMUMS[key];
  if (minimum !== undefined && value < minimum) return `limit ${key} must be at least ${minimum}`;
  return undefined;
}

/** A session's limits: what its creator asked for, else the worker's defaults, else the code's. */
export function resolveLimits(requested: Partial<SessionLimits> | undefined, defaults: Partial<SessionLimits> = {}): SessionLimits {
  return { ...DEFAULT_LIMITS, ...defaults, ...requested };
}

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
  /**
   * The team and member this session works for (a team run's Member, session id `<teamId>__<memberId>`, or
   * `<teamId>-<memberId>` in a team started before that: contract/member-session.ts): it is
   * offered the member tools (`org_send_message` to its Coordinator). Absent for every other session.
   */
  readonly team?: TeamMembership;
  readonly model?: ModelSpec;
  readonly limits?: Partial<SessionLimits>;
  /** Tokens the session may spend on model calls (the worker's ORCHARD_DEFAULT_BUDGET_TOKENS when absent; none if unset). */
  readonly budgetTokens?: number;
  /** The orchestrator or team (workflow id) whose budget this one was carved from: a raise is carved from it too. */
  readonly fundedBy?: string;
  /** A first task, queued before the worktree exists, so create+send is one call. */
  readonly task?: string;
  /**
   * The create request that started this execution chain (update-with-start): a retried create with the same
   * id is answered `created` again instead of `bound`, and its task is queued once.
   */
  readonly requestId?: string;
}

/**
 * What the session workflow (`childSession`) is started with: its create input and, on a continued run only, the
 * state its previous run carried. The carried state is the workflow's own (`Carried`, workflows/session/state.ts):
 * a client starts a session with `create` alone.
 */
export interface SessionWorkflowInput<Carried = never> {
  readonly create: CreateSessionInput;
  readonly carried?: Carried;
}

/** A create as a client asks for it: the host defaults to the client's (its machine's ORCHARD_HOST_ID or hostname). */
export type CreateSessionRequest = Omit<CreateSessionInput, 'host'> & { host?: string } & StartingContext;

/** A handoff is a briefing: longer belongs in a file in the repository (or in the conversation, by reference). */
export const MAX_CONTEXT_CHARS = 64 * 1024;

/**
 * Where a new session's conversation starts (docs/sessions.md#starting-context): at most one of the two — both are
 * refused `context_conflict` — and neither means it starts independent. It applies to the create that starts the
 * session's execution chain; a create that binds to a running session with one is refused `context_conflict`.
 */
export interface StartingContext {
  /** An explicit handoff: a user message before the first task (stored in Postgres; history carries it once, like a task). */
  readonly context?: string;
  /** The parent orchestrator's conversation up to the tool call that created this child, by reference (`includeContext`). */
  readonly parentConversation?: ConversationBound;
}

/**
 * A point in an orchestrator's transcript: its conversation as it stood when the model made the call at `step` of the
 * turn attempt `turnId` (every earlier entry of the chain `executionId`, up to that model answer). Only the orchestrator
 * that is the session's `parent` can be named.
 */
export interface ConversationBound {
  readonly orchestratorId: string;
  readonly executionId: string;
  readonly turnId: string;
  readonly turn: number;
  readonly step: number;
}

export interface CreateSessionResult {
  /**
   * created: this request started the session (or a new run of a closed one, which re-enters its worktree once
   * the old run is provably gone); bound: the session was already running — no second agent was started, the
   * task (if any) was routed to it.
   */
  readonly outcome: 'created' | 'bound';
  readonly session: SessionStatusView;
  /** The first task's acknowledgement, when a task was given. */
  readonly task?: SendResult;
  /** The create's idempotency key: the same key again is answered the same way and queues the task once. */
  readonly requestId: string;
  readonly message: string;
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
  /** Where the task stands now (a duplicate's task may have run already). */
  readonly taskState?: TaskState;
}

/** The update that update-with-start sends: binds the caller to the session, optionally with a first task and its starting context. */
export interface CreateRequest extends StartingContext {
  /** Idempotency key of the create: the same key is answered the same way, its task queued once. */
  readonly requestId: string;
  readonly task?: string;
  readonly from?: string;
}

export interface CreateResult {
  /** created: this request started the session's execution chain; bound: it was already running. */
  readonly outcome: 'created' | 'bound';
  /** The first task, when one was given. */
  readonly task?: SendResult;
  readonly session: SessionStatusView;
}

export interface CancelInput {
  readonly reason?: string;
}

/** `budget_exhausted`: a model call would have passed the budget, so it was not sent; the session stays open. */
export type TurnOutcome = 'finished' | 'step_limit' | 'failed' | 'cancelled' | 'budget_exhausted';

export interface TurnRef {
  readonly turn: number;
  /** The turn attempt's id: its transcript, model calls and tool claims are stored under it. */
  readonly turnId?: string;
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
  /**
   * An isolated child's confinement (docs/confinement.md): `confined` (the sandbox), or `unconfined` when its host
   * runs with ORCHARD_SANDBOX=off. Absent for sessions that are not isolated children, and while preparing.
   */
  readonly confinement?: 'confined' | 'unconfined';
  /** A command changed what this isolated child must not: no command runs in its worktree until `resolveHold`. */
  readonly held?: boolean;
  readonly status: SessionStatus;
  /** How a `closed` session closed: cancelled, or failed (it could not start, or failed for good). */
  readonly closedAs?: 'cancelled' | 'failed';
  /** Turns completed over the whole session (across continue-as-new runs). */
  readonly turnsCompleted: number;
  readonly currentTask?: { readonly taskId: string; readonly turn: number; readonly excerpt: string };
  readonly queued: number;
  readonly lastTurn?: TurnRef;
  /** How many times this session has continued-as-new. */
  readonly runIndex: number;
  readonly error?: { readonly code: string; readonly message: string };
  /** The execution chain every stored effect of this session is keyed by (absent before execution keys). */
  readonly executionId?: string;
  /** A cancel was accepted: sends are refused with `session_closing` until the session is closed. */
  readonly closing?: boolean;
  /** Tasks accepted over the whole chain, by state. */
  readonly tasks?: Readonly<Record<TaskState, number>>;
  /** The most recent tasks that reached a terminal state, newest last (the full record is in `session_tasks`). */
  readonly recentTasks?: readonly TaskRecord[];
  /** Signalled sends that were refused (a signal cannot be answered): how many, and the latest few. */
  readonly refusedSignals?: { readonly count: number; readonly recent: readonly RefusedSend[] };
  /** The limits resolved when the session started (carried across continue-as-new). */
  readonly limits?: SessionLimits;
  /** Tokens spent, and the budget's limit and remaining when it has one (absent in sessions started before budgets). */
  readonly budget?: BudgetView;
}

export interface TaskRecord {
  readonly taskId: string;
  readonly state: TaskState;
  readonly excerpt: string;
  readonly turn?: number;
  /** The turn outcome for done/failed tasks, or why a task never ran. */
  readonly outcome?: string;
  readonly reason?: string;
}

export interface RefusedSend {
  readonly code: ErrorCode;
  readonly requestId?: string;
  readonly excerpt: string;
}

/** Where the bulky evidence lives: transcript rows in Postgres are keyed by (executionId, turnId). */
export interface TranscriptRefs {
  readonly sessionId: string;
  /** The execution chain the rows are stored under (`execution_id`); each turn ref names its `turn_id`. */
  readonly executionId?: string;
  readonly turns: readonly TurnRef[];
}

export const sendUpdate = defineUpdate<SendResult, [SendInput]>('send');
export const createUpdate = defineUpdate<CreateResult, [CreateRequest]>('create');
export const sendSignal = defineSignal<[SendInput]>('send');
export const cancelUpdate = defineUpdate<SessionStatusView, [CancelInput]>('cancel');

/** A user resolves a verification hold (docs/confinement.md): the worktree runs commands again. */
export interface ResolveHoldInput {
  /** Who decided (recorded on the hold); `user` when absent. */
  readonly by?: string;
  /** What was done about the change (recorded on the hold). */
  readonly note?: string;
}
export interface ResolveHoldResult {
  readonly holdId: string;
  readonly command: string;
  readonly heldAt: string;
  readonly resolvedAt: string;
  readonly resolvedBy: string;
}
export const resolveHoldUpdate = defineUpdate<ResolveHoldResult, [ResolveHoldInput]>('resolveHold');
export const statusQuery = defineQuery<SessionStatusView>('status');
export const transcriptRefsQuery = defineQuery<TranscriptRefs>('transcriptRefs');

export interface Problem {
  readonly code: ErrorCode;
  readonly message: string;
}

export function sendProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'send needs an object { task }' };
  const { task, requestId, from } = input as Record<string, unknown>;
  return taskProblem(task, 'send') ?? requestIdProblem(requestId) ?? fromProblem(from);
}

/** The create update's input: a request id always, a task only when one is given. */
export function createRequestProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'create needs an object { requestId }' };
  const { task, requestId, from } = input as Record<string, unknown>;
  if (requestId === undefined) return { code: 'invalid_input', message: 'create needs a requestId (its idempotency key)' };
  return (
    (task === undefined ? undefined : taskProblem(task, 'create')) ??
    requestIdProblem(requestId) ??
    fromProblem(from) ??
    startingContextProblem(input as StartingContext, from)
  );
}

export const hasStartingContext = (input: StartingContext): boolean => input.context !== undefined || input.parentConversation !== undefined;

/** Why a create's starting context cannot be taken: both kinds, a handoff empty or too long, a bound not of `parent`. */
export function startingContextProblem(input: StartingContext, parent: unknown): Problem | undefined {
  const { context, parentConversation: bound } = input;
  if (context !== undefined && bound !== undefined) {
    return {
      code: 'context_conflict',
      message:
        "a create takes the parent's conversation (includeContext) or an explicit handoff (context), never both: give one, or neither for an independent session",
    };
  }
  if (context !== undefined) {
    if (typeof context !== 'string' || context.trim() === '')
      return { code: 'invalid_input', message: 'context must be non-empty text (the handoff), or left out' };
    if (context.length > MAX_CONTEXT_CHARS) {
      return {
        code: 'context_too_large',
        message: `the context is ${context.length} characters; the limit is ${MAX_CONTEXT_CHARS}: put the detail in a file in the repository and reference it`,
      };
    }
  }
  if (bound === undefined) return undefined;
  const b = bound as unknown as Record<string, unknown> | null;
  const ok =
    typeof b === 'object' &&
    b !== null &&
    ['orchestratorId', 'executionId', 'turnId'].every((k) => typeof b[k] === 'string' && b[k] !== '') &&
    ['turn', 'step'].every((k) => Number.isInteger(b[k]) && (b[k] as number) >= 1);
  if (!ok) return { code: 'invalid_input', message: 'parentConversation must be { orchestratorId, executionId, turnId, turn, step }' };
  if (parent !== orchestratorWorkflowId(b.orchestratorId as string)) {
    return {
      code: 'invalid_input',
      message: `parentConversation names orchestrator ${String(b.orchestratorId)}: only the parent's own conversation can be included`,
    };
  }
  return undefined;
}

/** Why `task` cannot be a task of `verb` (which the message names, so a caller knows which call was wrong). */
export function taskProblem(task: unknown, verb: 'send' | 'create'): Problem | undefined {
  if (typeof task !== 'string' || task.trim() === '') {
    const what =
      verb === 'create'
        ? 'create was given an empty task: give the first task text, or leave the task out'
        : 'send needs a non-empty task: say what the session should do';
    return { code: 'task_empty', message: what };
  }
  if (task.length > MAX_TASK_CHARS) {
    return {
      code: 'task_too_large',
      message: `${verb}: the task is ${task.length} characters; the limit is ${MAX_TASK_CHARS}: put the detail in a file and reference it`,
    };
  }
  return undefined;
}

function requestIdProblem(requestId: unknown): Problem | undefined {
  if (requestId !== undefined && (typeof requestId !== 'string' || requestId.length === 0 || requestId.length > 200)) {
    return { code: 'invalid_input', message: 'requestId must be a non-empty string of at most 200 characters' };
  }
  return undefined;
}

function fromProblem(from: unknown): Problem | undefined {
  return from !== undefined && typeof from !== 'string' ? { code: 'invalid_input', message: 'from must be a string' } : undefined;
}

export function createSessionProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'create needs an object' };
  const i = input as Record<string, unknown>;
  // A team's Member takes exactly its own id (which may be reserved); every other session an ordinary one.
  const idProblem =
    typeof i.sessionId !== 'string'
      ? 'sessionId must be a string'
      : i.team === undefined
        ? ordinarySessionIdProblem(i.sessionId)
        : sessionIdProblem(i.sessionId);
  if (idProblem) return { code: 'invalid_input', message: idProblem };
  if (typeof i.title !== 'string' || i.title.trim() === '') return { code: 'invalid_input', message: 'title must be a non-empty string' };
  const placement = placementProblem(i);
  if (placement) return placement;
  if (i.team !== undefined) {
    const problem = memberSessionProblem(i.sessionId as string, i.team);
    if (problem) return { code: 'invalid_input', message: problem };
  }
  const context = startingContextProblem(i as StartingContext, i.parent);
  if (context) return context;
  if (i.task !== undefined) return taskProblem(i.task, 'create');
  return requestIdProblem(i.requestId);
}

/**
 * Why `sessionId` is not the session of the Member `team` names: `<teamId>__<memberId>` (contract/member-session.ts),
 * or `<teamId>-<memberId>` for a team started before that encoding (its Members keep the ids they were stored with).
 */
function memberSessionProblem(sessionId: string, team: unknown): string | undefined {
  const t = team as Record<string, unknown> | null;
  if (typeof t !== 'object' || t === null || typeof t.teamId !== 'string' || typeof t.memberId !== 'string') return 'team must be { teamId, memberId }';
  const encoded = memberSessionId(t.teamId, t.memberId);
  if (sessionId === encoded || sessionId === legacyMemberSessionId(t.teamId, t.memberId)) return undefined;
  return `a team member's session id is <teamId>__<memberId> (${encoded}; <teamId>-<memberId> for a team started before that), not ${sessionId}`;
}

/** What a session and an orchestrator are both given: the repository, the host, models and limits. */
function placementProblem(i: Record<string, unknown>): Problem | undefined {
  if (typeof i.repo !== 'string' || !i.repo.startsWith('/')) {
    return { code: 'invalid_input', message: 'repo must be an absolute path to a git repository on the host' };
  }
  if (typeof i.host !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(i.host)) {
    return { code: 'invalid_input', message: 'host must be a host id (letters, digits, ".", "_", "-")' };
  }
  for (const field of ['model', 'childModel'] as const) {
    const model = i[field] as Record<string, unknown> | undefined;
    if (model === undefined) continue;
    const ok = model?.provider === 'default' || (model?.provider === 'scripted' && typeof model.scenario === 'string' && model.scenario !== '');
    if (!ok) return { code: 'invalid_input', message: `${field} must be { provider: "default" } or { provider: "scripted", scenario }` };
  }
  const limits = i.limits as Record<string, unknown> | undefined;
  if (limits !== undefined) {
    for (const key of Object.keys(limits)) {
      const value = limits[key];
      if (!(key in DEFAULT_LIMITS)) return { code: 'invalid_input', message: `unknown limit ${key}` };
      const problem = limitProblem(key as keyof SessionLimits, value);
      if (problem) return { code: 'invalid_input', message: problem };
    }
  }
  return budgetTokensProblem(i.budgetTokens);
}

/** Why an orchestrator cannot be started with this input (checked by the client before anything starts). */
export function startOrchestratorProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'an orchestrator needs an object' };
  const i = input as Record<string, unknown>;
  const idProblem = typeof i.orchestratorId === 'string' ? plainIdProblem(i.orchestratorId) : 'orchestratorId must be a string';
  if (idProblem) return { code: 'invalid_input', message: idProblem.replace('session id', 'orchestrator id') };
  if (i.title !== undefined && (typeof i.title !== 'string' || i.title.trim() === '')) {
    return { code: 'invalid_input', message: 'title must be a non-empty string when given' };
  }
  return placementProblem(i);
}

export const ORCHESTRATOR_WORKFLOW_TYPE = 'orchestratorSession';
export const orchestratorWorkflowId = (orchestratorId: string): string => `orchestrator/${orchestratorId}`;

export interface StartOrchestratorInput {
  /** Becomes the workflow id `orchestrator/<orchestratorId>`; same alphabet as session ids. */
  readonly orchestratorId: string;
  /** The repository its children work on (a path on `host`). */
  readonly repo: string;
  readonly host: string;
  readonly title?: string;
  /** The orchestrator's own model, and its children's (the worker's default unless given). */
  readonly model?: ModelSpec;
  readonly childModel?: ModelSpec;
  readonly limits?: Partial<SessionLimits>;
  /** Tokens the orchestrator and all its children may spend together (children's budgets are carved from it). */
  readonly budgetTokens?: number;
}

/**
 * What the orchestrator workflow is started with; `carried` (its own state, workflows/orchestrator/workflow.ts) only
 * on a continued run.
 */
export interface OrchestratorWorkflowInput<Carried = never> {
  readonly start: StartOrchestratorInput;
  readonly carried?: Carried;
}

export interface MessageInput {
  /** What the user says; becomes the user message of one orchestrator turn. */
  readonly text: string;
  /** Idempotency key: a repeated message with the same id is accepted once. */
  readonly requestId?: string;
}

export interface MessageResult {
  readonly messageId: string;
  readonly duplicate: boolean;
}

/** A child's turn ended (sent by the child, deduplicated by the orchestrator on childId + turnId). */
export interface ChildTurnEnded {
  readonly childId: string;
  readonly turnId: string;
  readonly taskId: string;
  readonly outcome: TurnOutcome;
  /** The child's final text, cut short: the full answer is in its transcript. */
  readonly excerpt?: string;
  /** Tasks still queued at the child after this turn (it keeps running when there are). */
  readonly queued: number;
  /** The session itself closed (cancelled or failed): `outcome` says which, `excerpt` why; no turn ended. */
  readonly closed?: boolean;
  /** A failed turn's (or a failed session's) typed code and message. */
  readonly error?: { readonly code: string; readonly message: string };
  /** The child's budget now: a funding parent counts its spend, and returns the rest of its escrow once it closed. */
  readonly budget?: { readonly limit?: number; readonly spent: number };
}

export interface OrchestratorChildView {
  readonly childId: string;
  readonly title: string;
  readonly agent: string;
  readonly topicKey?: string;
  readonly routingDescription?: string;
  readonly routingAliases: readonly string[];
  readonly status: 'running' | 'idle' | 'failed' | 'cancelled';
  readonly provenance: { readonly turn: number; readonly callId: string };
  /** Logical clock of the ledger at the child's last dispatch or turn end (larger = more recent). */
  readonly lastActivity: number;
  readonly turnEnds: number;
  /** How its turn ends reach the orchestrator's model: `each` (default) or with its completion group. */
  readonly completion?: Completion;
}

/**
 * `each`: every turn end of a child is a result of its own. `group`: the members created under one
 * completionGroupId in one turn are delivered together, once every one of them is terminal.
 */
export type Completion = { readonly policy: 'each' } | { readonly policy: 'group'; readonly groupId: string };

/** A completion group: members registered in the turn that opened it, sealed when that turn settled. */
export interface CompletionGroupView {
  readonly groupId: string;
  readonly openedTurn: number;
  readonly members: readonly string[];
  /** Members whose work is done (their last turn ended with nothing queued, or failed, or was cancelled). */
  readonly terminal: readonly string[];
  readonly sealed: boolean;
  readonly delivered: boolean;
}

/** A change to a child's routing metadata (proposed, then confirmed by a user's token). */
export interface RoutingChange {
  readonly routingDescription?: string;
  readonly routingAliases?: readonly string[];
}

/** One dispatch of work to a child: which message's turn sent it, how, and the child's task id. */
export interface OrchestratorDelivery {
  /** The user message (or manifest) whose turn made the dispatch. */
  readonly messageId: string;
  readonly turn: number;
  readonly childId: string;
  /** `create`: a new child; `topic`: a create whose topic an existing child owns, routed to it; `send`: a send. */
  readonly via: 'create' | 'topic' | 'send';
  readonly taskId?: string;
}

export interface OrchestratorStatusView {
  readonly orchestratorId: string;
  readonly status: 'progressing' | 'idle';
  readonly children: readonly OrchestratorChildView[];
  readonly turnsCompleted: number;
  readonly queued: number;
  /** Signalled messages that could not be accepted (a store that refused them for good); a signal has no answer. */
  readonly refusedSignals?: number;
  readonly lastTurn?: TurnRef;
  /** The most recent turns (taskId is the message id the turn answered), oldest first. */
  readonly turns: readonly TurnRef[];
  /** The most recent dispatches to children, oldest first. */
  readonly deliveries: readonly OrchestratorDelivery[];
  /** Completion groups not yet delivered, and the last delivered ones. */
  readonly groups: readonly CompletionGroupView[];
  /** Routing changes proposed and waiting for a user's confirmation token. */
  readonly proposals: readonly { readonly token: string; readonly childId: string; readonly change: RoutingChange; readonly confirmedBy?: string }[];
  readonly runIndex: number;
  /** Tokens spent by the orchestrator and its children, what its open children hold (escrowed), what remains. */
  readonly budget?: BudgetView;
}

export const messageUpdate = defineUpdate<MessageResult, [MessageInput]>('message');
export const messageSignal = defineSignal<[MessageInput]>('message');
export const childTurnEndedSignal = defineSignal<[ChildTurnEnded]>('childTurnEnded');
export const orchestratorStatusQuery = defineQuery<OrchestratorStatusView>('status');
/** The settings the running orchestrator was started with (carried across continue-as-new). */
export const orchestratorStartQuery = defineQuery<StartOrchestratorInput>('start');
export const rosterQuery = defineQuery<string>('roster');

// Token budgets (issue 22) ------------------------------------------------------------------------------------

/**
 * A budget as status shows it. Tokens are what the model reported; a call that reported none counts at its
 * reservation (the request's UTF-8 bytes plus its max output tokens).
 */
export interface BudgetView {
  /** The cap; absent when there is none (spend is counted all the same). */
  readonly limit?: number;
  /** Tokens spent: this workflow's model calls, and (a parent) its children's. */
  readonly spent: number;
  /** A parent's open children's budgets not yet spent: carved out of this one, returned when a child closes. */
  readonly escrowed?: number;
  /** limit − spent − escrowed: what the next model call or child budget may take. */
  readonly remaining?: number;
  /** A model call was refused for want of budget: queued tasks wait until the limit is raised (`setBudget`). */
  readonly exhausted?: boolean;
  /** The parent (workflow id) this budget was carved from. */
  readonly fundedBy?: string;
}

export interface SetBudgetInput {
  /** The new limit in tokens: at least what was spent; a budget carved from a parent can only grow (from it). */
  readonly limit: number;
  /** Idempotency key: a repeat with the same id changes nothing again. */
  readonly requestId: string;
}

/** A parent carves a child's raise out of its own budget (sent by the child's `setBudget`, through an activity). */
export interface FundChildInput {
  readonly childId: string;
  /** The child's new limit (absolute): the parent's escrow grows by the difference. */
  readonly limit: number;
  readonly requestId: string;
}

export const setBudgetUpdate = defineUpdate<BudgetView, [SetBudgetInput]>('setBudget');
export const fundChildUpdate = defineUpdate<BudgetView, [FundChildInput]>('fundChild');

/** Why `value` cannot be a token budget, if it cannot. */
export function budgetTokensProblem(value: unknown, field = 'budgetTokens'): Problem | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    return { code: 'invalid_input', message: `${field} must be a positive integer (tokens)` };
  return undefined;
}

export function setBudgetProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'setBudget takes { limit, requestId }' };
  const i = input as Record<string, unknown>;
  if (i.limit === undefined) return { code: 'invalid_input', message: 'limit must be a positive integer (tokens)' };
  return (
    budgetTokensProblem(i.limit, 'limit') ??
    (i.requestId === undefined ? { code: 'invalid_input', message: 'setBudget needs a requestId' } : requestIdProblem(i.requestId))
  );
}

export function fundChildProblem(input: unknown): Problem | undefined {
  const problem = setBudgetProblem(input);
  if (problem) return problem;
  const childId = (input as Record<string, unknown>).childId;
  return typeof childId === 'string' && childId !== '' ? undefined : { code: 'invalid_input', message: 'fundChild needs the childId' };
}

export function messageProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'message needs an object { text }' };
  const { text, requestId } = input as Record<string, unknown>;
  if (typeof text !== 'string' || text.trim() === '') return { code: 'task_empty', message: 'message needs non-empty text' };
  if (text.length > MAX_TASK_CHARS) return { code: 'task_too_large', message: `message is ${text.length} characters; the limit is ${MAX_TASK_CHARS}` };
  return requestIdProblem(requestId);
}

// Team runs (issue 9) ------------------------------------------------------------------------------------------

export const TEAM_WORKFLOW_TYPE = 'teamRun';
export const teamWorkflowId = (teamId: string): string => `team/${teamId}`;

export interface TeamMemberSpec {
  /** Unique in the team (MEMBER_ID_PATTERN); part of the member's session id (contract/member-session.ts). */
  readonly memberId: string;
  /** What the member is for (Planner, Implementer, Reviewer, Tester…): its agent profile name. */
  readonly role: string;
}

export const DEFAULT_TEAM_MEMBERS: readonly TeamMemberSpec[] = [
  { memberId: 'planner', role: 'Planner' },
  { memberId: 'implementer', role: 'Implementer' },
  { memberId: 'reviewer', role: 'Reviewer' },
  { memberId: 'tester', role: 'Tester' },
];

export interface StartTeamInput {
  /** Becomes the workflow id `team/<teamId>`; same alphabet as session ids. */
  readonly teamId: string;
  readonly repo: string;
  readonly host: string;
  readonly goal: string;
  readonly members?: readonly TeamMemberSpec[];
  /** The branch no member and no Coordinator may move (default main). */
  readonly protectedBranch?: string;
  /** The Coordinator's model, and the members' (the worker's default unless given). */
  readonly model?: ModelSpec;
  readonly memberModel?: ModelSpec;
  readonly limits?: Partial<SessionLimits>;
  /** Tokens the Coordinator and all Members may spend together (Members' budgets are carved from it). */
  readonly budgetTokens?: number;
  /** Handoff SLO and timeout in milliseconds (durable timers; defaults 5 000 and 10 000). */
  readonly handoff?: { readonly sloMs?: number; readonly timeoutMs?: number };
  /**
   * Delivery verified by running it: `org_run_complete` runs `command` on the result tree in a sandboxed scratch
   * checkout on the team's host, and certifies only when it exits 0 within `timeoutMs` (default 5 minutes).
   */
  readonly verify?: VerifySpec;
}

export interface VerifySpec {
  readonly command: string;
  readonly timeoutMs?: number;
}

export const DEFAULT_VERIFY_TIMEOUT_MS = 300_000;
/** A verification runs inside one Coordinator tool call (at most ten minutes): its command gets nine at most. */
export const MAX_VERIFY_TIMEOUT_MS = 540_000;
const MAX_VERIFY_COMMAND_CHARS = 4096;

/** Why `verify` is unusable: a non-empty command without NUL (at most 4096 characters), a timeout of 1 s to 9 min. */
function verifyProblem(verify: unknown): string | undefined {
  if (verify === undefined) return undefined;
  const shape = objectShapeProblem('verify', verify, ['command', 'timeoutMs'], '{ command, timeoutMs? }');
  if (shape) return shape;
  const v = verify as Record<string, unknown>;
  if (typeof v.command !== 'string' || v.command.trim() === '') return 'verify.command must be a non-empty command';
  if (v.command.length > MAX_VERIFY_COMMAND_CHARS || v.command.includes('\0')) {
    return `verify.command must be at most ${MAX_VERIFY_COMMAND_CHARS} characters, without NUL`;
  }
  const t = v.timeoutMs;
  if (t !== undefined && (typeof t !== 'number' || !Number.isInteger(t) || t < 1000 || t > MAX_VERIFY_TIMEOUT_MS)) {
    return `verify.timeoutMs must be a whole number of milliseconds from 1000 to ${MAX_VERIFY_TIMEOUT_MS}`;
  }
  return undefined;
}

/**
 * One run of a team's verify command on a result tree (the output itself is in PostgreSQL, `team_verifications`;
 * this carries its digest and the end of it).
 */
export interface VerificationView {
  readonly verificationId: string;
  readonly command: string;
  /** The result commit it ran on, and that commit's tree. */
  readonly resultHead: string;
  readonly tree: string;
  /** null when it was killed (a timeout: `timedOut`). */
  readonly exitCode: number | null;
  readonly timedOut: boolean;
  readonly durationMs: number;
  /** sha256 of what it wrote (stdout, NUL, stderr; as stored: head and tail of each when it wrote more). */
  readonly outputDigest: string;
  /** Ran under the sandbox (false only where the operator turned it off: ORCHARD_SANDBOX=off). */
  readonly confined: boolean;
  /** Exit code 0, not timed out. */
  readonly passed: boolean;
  /** The end of its output (stderr after stdout), at most 2000 characters. */
  readonly excerpt: string;
}

/** What a certificate says about running the result: bound to a passing verification, or why it was not verified. */
export type CertificateVerification =
  ({ readonly verified: true } & Omit<VerificationView, 'passed' | 'excerpt'>) | { readonly verified: false; readonly reason: string };

/** `orchard team verify`: the verify command again, on the certified tree. */
export interface VerifyTeamInput {
  readonly requestId?: string;
}

export interface VerifyTeamResult {
  readonly teamId: string;
  readonly certificateId: string;
  /** What the certificate bound, and this run. */
  readonly certified: Omit<Extract<CertificateVerification, { verified: true }>, 'verified'>;
  readonly run: VerificationView;
  /** It still exits 0; and whether its output is byte-for-byte what was certified (same digest). */
  readonly stillPasses: boolean;
  readonly outputMatches: boolean;
}

/** What a team run's workflow is started with; `carried` (its own state, workflows/team/workflow.ts) only on a continued run. */
export interface TeamWorkflowInput<Carried = never> {
  readonly start: StartTeamInput;
  readonly carried?: Carried;
}

export const DEFAULT_HANDOFF = { sloMs: 5_000, timeoutMs: 10_000 } as const;

/** One dispatch of a task to its owner: the execution the board's evidence will be attributed to. */
export interface TaskExecutionView {
  readonly executionId: string;
  /** The execution's own workflow (`team/<team>/task/<task>/<execution>`); absent for executions of older runs. */
  readonly workflowId?: string;
  readonly taskId: string;
  readonly memberId: string;
  readonly sessionId: string;
  readonly state: 'running' | 'completed' | 'failed' | 'handed_off' | 'cancelled' | 'paused';
  /** The member session's task id (its queue entry). */
  readonly sessionTaskId?: string;
  /** Why it failed (the Member's typed code and message). */
  readonly failure?: { readonly code: string; readonly message: string };
}

export const TASK_EXECUTION_WORKFLOW_TYPE = 'teamTaskExecution';
export const taskExecutionWorkflowId = (teamId: string, taskId: string, executionId: string): string => `team/${teamId}/task/${taskId}/${executionId}`;

/** What a task execution workflow is started with (by its team). */
export interface TaskExecutionInput {
  readonly teamId: string;
  readonly taskId: string;
  readonly executionId: string;
  readonly memberId: string;
  readonly role: string;
  /** The Member's session (`<team>-<member>`): its worktree and lease are the execution's. */
  readonly sessionId: string;
  readonly repo: string;
  readonly host: string;
  readonly model?: ModelSpec;
  /** The Member's session budget carved from the team's, when this dispatch creates the session. */
  readonly budgetTokens?: number;
}

/** How an execution ended, as it tells its team (and returns). */
export interface TaskExecutionSettled {
  readonly executionId: string;
  readonly taskId: string;
  readonly memberId: string;
  /**
   * `not_started`: the dispatch was refused (`message` says why); `handed_off`: a fence had frozen the task;
   * `team_closed`: the team run closed (cancelled, terminated, failed) while the execution waited — it ends, recording
   * nothing, and signals no one.
   */
  readonly state: 'completed' | 'failed' | 'handed_off' | 'not_started' | 'team_closed';
  readonly revision: number;
  readonly candidate?: string;
  /** The work revision `candidate` was assessed at (absent in histories from before it was sent). */
  readonly candidateRevision?: number;
  readonly sessionTaskId?: string;
  readonly excerpt?: string;
  readonly message?: string;
  /** A failed task's reason (the Member's typed code and message), as stored on the board. */
  readonly failure?: { readonly code: string; readonly message: string };
  /** What the board says about the run's outcome after this settlement (read at `candidateRevision`). */
  readonly board?: BoardOutcomeFacts;
}

/** Team → execution: a turn end (or the close) of the Member's session. */
export const executionTurnEndedSignal = defineSignal<[ChildTurnEnded]>('turnEnded');
/** Execution → team: the execution settled. */
export const taskExecutionSettledSignal = defineSignal<[TaskExecutionSettled]>('executionSettled');
export const taskExecutionQuery = defineQuery<TaskExecutionInput & { readonly state: string; readonly sessionTaskId?: string }>('execution');

/** How a Coordinator turn ended: `waiting_for_org_event` when it produced no new fact. */
export type CoordinatorTurnOutcome = TurnOutcome | 'waiting_for_org_event';

export interface CoordinatorTurnView {
  readonly turn: number;
  readonly turnId: string;
  /** What woke it: the work revision it started at, and whether a user message was among the causes. */
  readonly startRevision: number;
  readonly endRevision: number;
  readonly outcome: CoordinatorTurnOutcome;
  readonly modelCalls: number;
  readonly toolCalls: number;
  readonly finalExcerpt?: string;
}

/**
 * A team run's outcome, derived by one pure function (workflows/team/outcome.ts) from board, receipts and
 * certificate; a team's `OrchardStatus` search attribute.
 */
export const TEAM_OUTCOMES = ['running', 'needs_attention', 'delivered', 'cancelled', 'failed'] as const;
export type TeamOutcome = (typeof TEAM_OUTCOMES)[number];

/** What the board contributes to a team run's outcome (workflows/team/outcome.ts): ids only, reasons are on the board. */
export interface BoardOutcomeFacts {
  /** Failed tasks that no task replaces (`replacesTaskId`), sorted. */
  readonly failedUnreplaced: readonly string[];
  /** Every task's scope was removed by a user event (the closure's `cancelled`). */
  readonly userRemovedAll: boolean;
}

export interface TeamStatusView {
  readonly teamId: string;
  readonly goal: string;
  readonly status: 'coordinating' | 'waiting_for_org_event' | 'delivered' | 'paused' | 'archived';
  /** A user's pause (while paused) or archive, and why. */
  readonly paused?: { readonly reason: string };
  readonly archived?: { readonly reason: string; readonly eventId: string };
  /** What the run has come to: see TEAM_OUTCOMES. */
  readonly outcome: TeamOutcome;
  /** Why it needs attention or failed: short lines naming tasks and receipts (empty otherwise). */
  readonly outcomeBecause: readonly string[];
  readonly generation: number;
  /** The highest work revision the workflow has been told of, and the one the Coordinator last read. */
  readonly workRevision: number;
  readonly readRevision: number;
  readonly members: readonly (TeamMemberSpec & { readonly sessionId: string })[];
  readonly planApproved: boolean;
  readonly executions: readonly TaskExecutionView[];
  readonly turns: readonly CoordinatorTurnView[];
  /** What the Coordinator said to the user (user_reply), newest last. */
  readonly replies: readonly string[];
  /** Refused Coordinator tool calls (name and code), newest last: the allowlist at work. */
  readonly refusals: readonly { readonly tool: string; readonly code: string }[];
  readonly queuedMessages: number;
  /** Signalled messages that could not be accepted (refused, or a store that refused them for good). */
  readonly refusedSignals?: number;
  /** Handoff receipts of this run, newest last. */
  readonly receipts: readonly ReceiptView[];
  /** Replacement tasks that wait for their previous execution to be released (not a task status). */
  readonly waiting: readonly { readonly taskId: string; readonly waiting: 'waiting_for_previous_execution'; readonly receiptId: string }[];
  /** `completion_candidate.state` when the board last changed through this run (`certified` once delivered). */
  readonly candidate?: 'ready' | 'blocked' | 'not_applicable' | 'certified';
  /** The run's certificate, once delivered (ids and revisions; the full certificate is in Postgres). */
  readonly certificate?: {
    readonly certificateId: string;
    readonly generation: number;
    readonly workRevision: number;
    readonly taskIds: readonly string[];
    readonly outputIds: readonly string[];
    /** The run's result branch and the commit the certificate names (absent on certificates issued before them). */
    readonly resultBranch?: string;
    readonly resultHead?: string;
    /** Whether the certificate binds a passing run of the verify command (absent on certificates issued before them). */
    readonly verified?: boolean;
  };
  /** The newest run of the verify command at completion (passing or not). */
  readonly verification?: VerificationView;
  /**
   * The final summary of the delivered run: the Coordinator's last words of the turn that certified it, always
   * citing the certificate (prefixed with it when the Coordinator did not). Recorded after the certificate and
   * before that turn ends: certificate → summary → turn terminal → idle (`delivered`).
   */
  readonly summary?: { readonly certificateId: string; readonly turn: number; readonly text: string };
  /** Tokens spent by the Coordinator and the Members, what the Members' budgets still hold (escrowed), what remains. */
  readonly budget?: BudgetView;
}

export interface ReceiptView {
  readonly receiptId: string;
  /**
   * `reassign` (the work goes on with `newOwner` as `newTaskId`), `cancel` (the user removed it; no replacement),
   * `pause` (the team was paused: the task is pending again for the same owner) or `archive` (the team was archived).
   */
  readonly kind: HandoffKind;
  readonly oldTaskId: string;
  readonly newTaskId?: string;
  readonly oldOwner: string;
  readonly newOwner?: string;
  readonly state: 'requested' | 'yielding' | 'released' | 'timeout' | 'unknown' | 'failed';
  readonly sloMissed: boolean;
  /** The states it went through, in order. */
  readonly trail: readonly string[];
  readonly resolution?: 'keep_stopped' | 'release';
}

/** Why running work was fenced: a user's reassign or cancel of one task, or a pause or archive of the whole team. */
export type HandoffKind = 'reassign' | 'cancel' | 'pause' | 'archive';

/** Idempotency of a user's team action: the update id, remembered by the team across continue-as-new. */
interface TeamRequest {
  /** A retry with the same id answers the first result (the client makes one when absent). */
  readonly requestId?: string;
}

export interface ReassignInput extends TeamRequest {
  readonly taskId: string;
  readonly newOwner: string;
  readonly reason: string;
}

export interface ResolveHandoffInput extends TeamRequest {
  readonly receiptId: string;
  /** keep_stopped: cancel only the replacement; release: start it, given proof the old runtime is quiescent. */
  readonly action: 'keep_stopped' | 'release';
  readonly reason?: string;
}

export interface CancelTaskInput extends TeamRequest {
  readonly taskId: string;
  readonly reason: string;
}

/**
 * A user's cancel: the task leaves the run's scope (cited by the user event, so the closure counts it as
 * `user_scope_removed`). Running work is fenced and yielded like a reassign, without a replacement: `receipt`.
 */
export interface CancelTaskResult {
  readonly taskId: string;
  readonly status: 'cancelled';
  readonly workRevision: number;
  readonly receipt?: ReceiptView;
}

export const cancelTaskUpdate = defineUpdate<CancelTaskResult, [CancelTaskInput]>('cancelTask');

/** A user's pause, resume or archive of a whole team run (`orchard team pause|resume|archive`). */
export interface TeamLifecycleInput extends TeamRequest {
  readonly reason: string;
}

/**
 * What a pause, resume or archive did: the team's state after it, the running work it fenced (one receipt per
 * execution: kind `pause` or `archive`), and for an archive the tasks it cancelled.
 */
export interface TeamLifecycleResult {
  readonly teamId: string;
  readonly state: 'paused' | 'running' | 'archived';
  readonly receipts: readonly ReceiptView[];
  readonly cancelledTasks?: readonly string[];
  readonly workRevision: number;
}

/**
 * Pause: no Coordinator turn and no execution starts while paused; running executions are fenced and yielded
 * (receipts of kind `pause`) and their tasks are pending again for the same owners. Refused `team_paused` when
 * paused already, `run_delivered` once delivered, `team_archived` after an archive.
 */
export const pauseTeamUpdate = defineUpdate<TeamLifecycleResult, [TeamLifecycleInput]>('pauseTeam');
/** Resume: the Coordinator and the dispatch run again; paused tasks start again with their owners. Refused `team_not_paused`. */
export const resumeTeamUpdate = defineUpdate<TeamLifecycleResult, [TeamLifecycleInput]>('resumeTeam');
/**
 * Archive: the whole episode is abandoned — running executions fenced and stopped, open tasks cancelled citing one
 * user event, no certificate, the Members' sessions closed; the run then ends with outcome `cancelled` (or `failed`
 * with unresolved failed or unknown work). Refused `run_delivered` once delivered, `team_archived` when archiving already.
 */
export const archiveTeamUpdate = defineUpdate<TeamLifecycleResult, [TeamLifecycleInput]>('archiveTeam');

/**
 * `orchard team merge`: a user integrates the certified result into the protected branch. Repeating it answers the
 * same result and changes nothing.
 */
export interface TeamMergeResult {
  readonly teamId: string;
  readonly certificateId: string;
  readonly protectedBranch: string;
  readonly resultBranch: string;
  /** The certified result commit that was merged (whatever the result branch points to now). */
  readonly resultHead: string;
  /** The protected branch's head before the merge, and after it. */
  readonly before: string;
  readonly after: string;
  readonly mode: 'already_contained' | 'fast_forward' | 'merge_commit';
  /** The team user event (kind `merge`) that records it. */
  readonly eventId: string;
  readonly mergedAt: string;
}

export const reassignTaskUpdate = defineUpdate<ReceiptView, [ReassignInput]>('reassignTask');
/**
 * Runs the verify command again on the certified tree and says whether it still passes and its output matches.
 * Refused `not_delivered` without a certificate, `verification_not_configured` when the certificate binds none.
 */
export const verifyTeamUpdate = defineUpdate<VerifyTeamResult, [VerifyTeamInput]>('verifyTeam');
/** Refused `not_delivered` (before history is written) while the team has no certificate with a result. */
export const mergeTeamUpdate = defineUpdate<TeamMergeResult>('mergeTeam');
export const resolveHandoffUpdate = defineUpdate<ReceiptView, [ResolveHandoffInput]>('resolveHandoff');

export const teamMessageUpdate = defineUpdate<MessageResult, [MessageInput]>('message');
export const teamMessageSignal = defineSignal<[MessageInput]>('message');
/** Which team a Member's session works for. */
export interface TeamMembership {
  readonly teamId: string;
  readonly memberId: string;
}

/**
 * A Member's message accepted into the Coordinator's Inbox (ids, and the text cut short: the message itself is in
 * `team_inbox`, and the Coordinator reads it in full with `task_list`).
 */
export interface MemberMessageFact {
  readonly messageId: string;
  readonly from: string;
  readonly executionId: string;
  readonly relatedTaskId: string;
  readonly purpose: string;
  readonly excerpt: string;
}

/**
 * A fact was committed outside the workflow: wake if it is new. A Member's message names itself (`message`, sent
 * once by the Member's session when the Inbox accepted it) and always wakes the Coordinator, whose wake text says
 * who wrote, about which task and why.
 */
export interface TeamFact {
  readonly revision: number;
  readonly message?: MemberMessageFact;
}
export const teamFactSignal = defineSignal<[TeamFact]>('fact');
export const teamStatusQuery = defineQuery<TeamStatusView>('status');
/** The settings the running team run was started with (carried across continue-as-new). */
export const teamStartQuery = defineQuery<StartTeamInput>('start');

/** The longest handoff SLO or timeout a team accepts (a durable timer, not a reason to wait forever). */
export const MAX_HANDOFF_MS = 3_600_000;

/** Why `value` is not an object with only `fields` (shown as `shown`), or undefined when it is. */
function objectShapeProblem(name: string, value: unknown, fields: readonly string[], shown: string): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return `${name} must be an object ${shown}`;
  const extra = Object.keys(value).filter((k) => !fields.includes(k));
  return extra.length > 0 ? `${name} has unknown field(s) ${extra.join(', ')}: only ${fields.join(' and ')}` : undefined;
}

/** Why `handoff` durations are unusable: whole milliseconds from 1 to an hour, the SLO no later than the timeout. */
function handoffProblem(handoff: unknown): string | undefined {
  if (handoff === undefined) return undefined;
  const shape = objectShapeProblem('handoff', handoff, ['sloMs', 'timeoutMs'], '{ sloMs?, timeoutMs? }');
  if (shape) return shape;
  const h = handoff as Record<string, unknown>;
  for (const key of ['sloMs', 'timeoutMs'] as const) {
    const v = h[key];
    if (v !== undefined && (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > MAX_HANDOFF_MS)) {
      return `handoff.${key} must be a whole number of milliseconds from 1 to ${MAX_HANDOFF_MS}`;
    }
  }
  const sloMs = (h.sloMs as number | undefined) ?? DEFAULT_HANDOFF.sloMs;
  const timeoutMs = (h.timeoutMs as number | undefined) ?? DEFAULT_HANDOFF.timeoutMs;
  if (sloMs > timeoutMs) return `handoff.sloMs (${sloMs}) must not be later than handoff.timeoutMs (${timeoutMs})`;
  return undefined;
}

/** Why a team cannot be started with this input (checked by the client before anything starts). */
export function startTeamProblem(input: unknown): Problem | undefined {
  if (typeof input !== 'object' || input === null) return { code: 'invalid_input', message: 'a team needs an object' };
  const i = input as Record<string, unknown>;
  // An ordinary id: plain (its Members' `<teamId>__<memberId>` are then session ids) and without `__` (a team's
  // Members' ids of either encoding are then never one another's: contract/member-session.ts).
  const idProblem = typeof i.teamId === 'string' ? ordinarySessionIdProblem(i.teamId) : 'teamId must be a string';
  if (idProblem) return { code: 'invalid_input', message: idProblem.replace('session id', 'team id') };
  if (typeof i.goal !== 'string' || i.goal.trim() === '') return { code: 'invalid_input', message: 'goal must be a non-empty string' };
  if (i.goal.length > MAX_TASK_CHARS) return { code: 'task_too_large', message: `goal is ${i.goal.length} characters; the limit is ${MAX_TASK_CHARS}` };
  if (i.members !== undefined) {
    if (!Array.isArray(i.members) || i.members.length === 0 || i.members.length > 12) {
      return { code: 'invalid_input', message: 'members must be a list of 1 to 12 { memberId, role }' };
    }
    const ids = new Set<string>();
    for (const m of i.members as Record<string, unknown>[]) {
      if (typeof m?.memberId !== 'string' || !MEMBER_ID_PATTERN.test(m.memberId) || ids.has(m.memberId)) {
        return { code: 'invalid_input', message: 'each memberId must be unique: lowercase letters, digits, "-", at most 24' };
      }
      if (typeof m.role !== 'string' || m.role.trim() === '') return { code: 'invalid_input', message: `member ${m.memberId} needs a role` };
      ids.add(m.memberId);
    }
  }
  const handoff = handoffProblem(i.handoff);
  if (handoff) return { code: 'invalid_input', message: handoff };
  const verify = verifyProblem(i.verify);
  if (verify) return { code: 'invalid_input', message: verify };
  if (i.memberModel !== undefined) {
    const problem = placementProblem({ ...i, childModel: i.memberModel });
    if (problem) return problem;
  }
  return placementProblem(i);
}
