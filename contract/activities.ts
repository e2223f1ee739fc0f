/**
 * The activities workflows call, declared: every method with its input and result. Workflows import these
 * interfaces (`proxyActivities<SharedActivities>`), never the activities' code; activities/index.ts builds objects
 * checked against them, so a mismatch between what a workflow calls and what a worker runs is a compile error.
 * Activities that need no particular host run on the shared task queue; those bound to a worktree's disk run on
 * its host's queue (`hostTaskQueue`).
 */
import type {
  ConversationBound,
  ResolveHoldResult,
  MemberMessageFact,
  ModelSpec,
  Problem,
  RepositoryCheck,
  SessionLimits,
  TaskState,
  TeamMembership,
} from './messages';
import type { OrchestratorActivities } from './orchestrator-activities';
import type { TeamActivities, TeamHostActivities } from './team-activities';
import type { ToolProfile } from './tools';

/** What a workspace-mutating activity carries and revalidates: the fence is the generation. */
export interface Lease {
  readonly worktree: string;
  readonly holder: string;
  readonly generation: number;
}

export interface RecordTaskInput {
  sessionId: string;
  turn: number;
  taskId: string;
  task: string;
}

export interface StoredTask {
  readonly executionId: string;
  readonly sessionId: string;
  readonly taskId: string;
  readonly task: string;
  readonly requestId?: string;
  readonly from?: string;
  /** A wake that stands for several events (a Coordinator's work facts, an orchestrator's child results): how many (metrics). */
  readonly coalesced?: { readonly kind: 'coordinator' | 'orchestrator'; readonly events: number };
}

/** A session chain's starting context as stored (activities/store/starting-context.ts): one of the two. */
export interface StartingContextInput {
  readonly executionId: string;
  readonly sessionId: string;
  /** The create that started the chain. */
  readonly requestId: string;
  readonly handoff?: string;
  readonly parentConversation?: ConversationBound;
}

export interface TaskEnd {
  readonly taskId: string;
  readonly state: Extract<TaskState, 'done' | 'failed' | 'cancelled'>;
  /** The turn outcome (`finished`, `step_limit`, …) or why it never ran. */
  readonly outcome?: string;
  readonly reason?: string;
}

/** What a model request's system prompt says of the session. */
export interface SessionContext {
  title: string;
  agent: string;
  worktree: string;
  branch: string;
  /** Earlier turns left out of the request by the context budget. */
  omittedTurns?: number;
  /** An orchestrator's roster (workflows/orchestrator/roster.ts), rebuilt for every request. */
  roster?: string;
}

export interface ModelStepInput {
  sessionId: string;
  /** The execution chain and the turn attempt (absent in histories recorded before execution keys). */
  executionId?: string;
  turnId?: string;
  turn: number;
  step: number;
  /** On a turn's first step: the task that opens it, whose text is read from the task store. */
  taskId?: string;
  model: ModelSpec;
  profile: ToolProfile;
  context: SessionContext;
  /** Characters of conversation sent at most; older turns are left out whole beyond it. */
  contextChars?: number;
  /**
   * A Coordinator's step: whether its turn has committed a fact so far. A final answer (no tool calls) then ends the
   * turn `finished`, or `waiting_for_org_event` when it has not (counted in the metrics).
   */
  progressed?: boolean;
  /**
   * A budgeted caller: the call reserves its maximum (the request's UTF-8 bytes, a bound on its prompt tokens, plus
   * `maxOutputTokens`, sent as `max_tokens`) and is not sent when that is more than `remaining`.
   */
  budget?: { remaining: number; maxOutputTokens: number };
}

export interface ModelStepResult {
  /**
   * Ids and names only: the arguments stay in Postgres and the tool activity reads them there. `label` is the call as
   * the Web UI shows it for the tool's activity (`bash: git status`), at most 100 characters; absent in
   * histories recorded before it.
   */
  toolCalls: { id: string; name: string; label?: string }[];
  /** The model's text, cut short for workflow history. */
  textExcerpt?: string;
  /**
   * What the call is charged: the tokens the model reported, or the reservation when it reported none (absent in
   * histories recorded before budgets, and when a retry found an answer recorded without a charge).
   */
  usage?: { charged: number; reserved: number; reported: boolean };
  /** The call was not sent: its reservation is more than the budget's remaining tokens. */
  refused?: { reserved: number; remaining: number };
}

/** Activities that need no particular host: the model and the store. They run on the shared task queue. */
export interface SessionStoreActivities {
  /** Sessions from histories recorded before execution keys: the task becomes the user message of its turn. */
  recordTask(input: RecordTaskInput): Promise<void>;
  /**
   * Resolves a session's limits once, when its execution chain starts (an activity: the answer is recorded
   * in history, so a replay never reads the worker's environment again).
   */
  resolveSessionLimits(requested: Partial<SessionLimits> | undefined): Promise<SessionLimits>;
  /** Accepted tasks' text goes to Postgres; history and continue-as-new carry their ids. */
  storeTasks(tasks: StoredTask[]): Promise<void>;
  /** Terminal states of tasks; a terminal row never changes again. */
  endTasks(input: { executionId: string; ends: TaskEnd[] }): Promise<void>;
  /** Where a new chain's conversation starts (a handoff, or the parent's conversation by reference); idempotent. */
  storeStartingContext(input: StartingContextInput): Promise<void>;
  /** A user resolved a verification hold (the session's `resolveHold` update): null when none was open. */
  resolveVerificationHold(input: { worktree: string; by: string; note?: string }): Promise<ResolveHoldResult | null>;
  /** One model call of a turn; its answer is in the transcript before this returns. */
  modelStep(input: ModelStepInput): Promise<ModelStepResult>;
  /** ORCHARD_DEFAULT_BUDGET_TOKENS, read once when a session, orchestrator or team chain starts without a budget. */
  resolveDefaultBudget(): Promise<number | null>;
}

/** The shared task queue's activities: a session's store and model, the orchestrator's and the team's. */
export interface SharedActivities extends SessionStoreActivities, OrchestratorActivities, TeamActivities {}

export interface PrepareWorktreeInput {
  sessionId: string;
  repo: string;
  baseRef?: string;
  /** The session's execution chain (`session/<id>@<firstRunId>`), which takes the worktree's lease. */
  holder: string;
  /** An isolated child may only move its own branch: the worktree is marked for the ref backstop hook. */
  isolated?: boolean;
}

export interface PreparedWorktree {
  worktree: string;
  branch: string;
  /** The commit the session branch was created from. */
  baseCommit: string;
  /** false when an earlier attempt had already prepared it (a retry after a crash). */
  created: boolean;
}

/** A prepared worktree with the host that holds it and the lease its session now holds. */
export interface PreparedSessionWorktree extends PreparedWorktree {
  host: string;
  lease: Lease;
  /** How the lease was taken: new, re-entered by the same chain, or taken over from a holder provably gone. */
  leaseOutcome: 'created' | 'reentered' | 'taken_over';
  /** An isolated child on a host that runs with ORCHARD_SANDBOX=off: the session says so (status, search attribute). */
  unconfined?: true;
}

export interface ExecuteToolInput {
  sessionId: string;
  /** The execution chain and the turn attempt (absent in histories recorded before execution keys). */
  executionId?: string;
  turnId?: string;
  turn: number;
  step: number;
  callId: string;
  /** Position of the call in the assistant message: fixes the tool result's place in the transcript. */
  index: number;
  profile: ToolProfile;
  worktree: string;
  branch: string;
  bashTimeoutSeconds: number;
  /** The session's worktree lease: revalidated immediately before every side effect. */
  lease: Lease;
  /** A child created by an orchestrator: its bash may only touch its own branch (guard + backstop). */
  isolated?: boolean;
  /** A team Member's session (profile `member`): the team and member its messages are attributed to. */
  team?: TeamMembership;
}

export interface ExecuteToolResult {
  tool: string;
  /** settled: ran now; already-settled: an earlier attempt ran it; unknown: claimed earlier, never settled. */
  outcome: 'settled' | 'already-settled' | 'unknown';
  ok: boolean;
  /** A Member's message the Inbox accepted: the session tells its team (once). */
  message?: MemberMessageFact & { revision: number };
  /** The command changed what an isolated child must not: its worktree is held until a user resolves it. */
  held?: true;
  /** The session's branch when it was moved to the confined layout by this call (`orchard/<id>/work`). */
  branch?: string;
}

/** Activities bound to the disk that holds a session's worktree. */
export interface WorktreeActivities {
  /**
   * Takes the worktree's lease, then creates (or re-enters) the worktree. A live holder is never joined by a
   * second agent (`worktree_held`); a holder that cannot be proven gone is refused (`worktree_liveness_unknown`).
   */
  prepareWorktree(input: PrepareWorktreeInput): Promise<PreparedSessionWorktree>;
  /** Release-if-current, when the session closes: a stale holder's release changes nothing. */
  releaseWorktree(lease: Lease): Promise<boolean>;
  /** The session is closing: releases what its chain holds on this host, also when it never learned its lease. */
  releaseSessionWorktree(input: { holder: string; lease?: Lease }): Promise<boolean>;
  /** Runs one tool call of a model step; a mutating tool runs at most once. */
  executeTool(input: ExecuteToolInput): Promise<ExecuteToolResult>;
  /**
   * The session is being cancelled: stops the commands its execution chain (`holder`) runs on this host now, so their
   * tool calls end cancelled without waiting for the cancellation to reach them through a heartbeat, and pokes its
   * model call when this process runs it (it heartbeats at once, so its cancellation arrives). Answers how many it
   * stopped or poked (calls of another worker process are not seen here: their next heartbeat still reaches those).
   */
  stopCommands(input: { holder: string }): Promise<number>;
  /**
   * What `session create`, `orchestrator start` and `team start` check before anything starts, made on the host whose
   * disk has the repository: it is a git repository with a commit (the base ref names one), and the scenario reads.
   */
  checkRepository(input: RepositoryCheck): Promise<Problem | null>;
}

/**
 * A host queue's activities (`orchard-host-<hostId>`): the worktree's, the team merge, and the team activities that
 * read and write the team's repository (settling an execution, a Coordinator tool that may certify).
 */
export interface HostActivities extends WorktreeActivities, TeamHostActivities, Pick<TeamActivities, 'settleExecution' | 'coordinatorTool'> {}
