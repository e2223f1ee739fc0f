/**
 * The pure state of one child session: its queue of task ids, dedupe window, task records, status and turn
 * refs. The workflow wires handlers to it; everything here is plain data so it survives continue-as-new as JSON.
 * Task text is not here: it is stored in Postgres when a task is accepted, and only ids travel.
 */
import type { Lease } from '../../contract/activities';
import type { ErrorCode } from '../../contract/errors';
import {
  resolveLimits,
  type CreateSessionInput,
  type RefusedSend,
  type SendInput,
  type SendResult,
  type SessionLimits,
  type SessionLifecycle,
  sessionStatusOf,
  type SessionStatusView,
  type SessionWorkflowInput as SessionWorkflowInputOf,
  type TaskRecord,
  type TaskState,
  type TranscriptRefs,
  type TurnRef,
} from '../../contract/messages';
import type { CarriedSessionState as CarriedV1 } from './v1/state';
import { Budget, type CarriedBudget } from '../budget';

export interface QueuedTask {
  readonly taskId: string;
  readonly excerpt: string;
  /** Its text is in Postgres: only stored tasks may start a turn (a send's store may still be under way). */
  readonly stored: boolean;
}

/** The session's worktree and the lease that fences every write to it (carried across continue-as-new). */
export interface SessionWorktree {
  readonly path: string;
  readonly branch: string;
  readonly lease: Lease;
  /** An isolated child whose host runs with ORCHARD_SANDBOX=off: its commands have the guard alone. */
  readonly unconfined?: boolean;
  /** Verification found a change (as far as this workflow learned): commands there are refused until resolved. */
  readonly held?: boolean;
}

/** Carried across continue-as-new: JSON-safe (arrays and plain objects, never a Map). */
export interface CarriedSessionState {
  readonly version: 2;
  readonly executionId: string;
  readonly limits: SessionLimits;
  readonly status: SessionLifecycle;
  readonly queue: readonly QueuedTask[];
  readonly nextTaskSeq: number;
  readonly turnsCompleted: number;
  readonly runIndex: number;
  /** [requestId, taskId] pairs, newest last: built-in update dedupe does not cross runs, this does. */
  readonly seenRequests: readonly (readonly [string, string])[];
  readonly turns: readonly TurnRef[];
  readonly worktree?: SessionWorktree;
  readonly error?: { readonly code: string; readonly message: string };
  readonly taskCounts: Readonly<Record<TaskState, number>>;
  readonly recentTasks: readonly TaskRecord[];
  readonly refusedSignals: { readonly count: number; readonly recent: readonly RefusedSend[] };
  /** Absent in state carried before budgets (spend counted from then on, no limit). */
  readonly budget?: CarriedBudget;
}

/** The input as this code reads it: its carried state is this code's, or the state a run of the frozen v1 code carried into this one. */
export type SessionWorkflowInput = SessionWorkflowInputOf<CarriedSessionState | CarriedV1>;

/** A task the session accepted whose text must be stored before it can run. */
export interface NewTask {
  readonly taskId: string;
  readonly task: string;
  readonly requestId?: string;
  readonly from?: string;
}

/** Bounds that keep state (and so every continue-as-new payload) small. */
const DEDUPE_WINDOW = 500;
const TURN_REFS_KEPT = 50;
const TASK_RECORDS_KEPT = 50;
const REFUSALS_KEPT = 10;
const EXCERPT_CHARS = 120;

const NO_TASKS: Record<TaskState, number> = { queued: 0, running: 0, done: 0, failed: 0, cancelled: 0 };

export function isCurrentCarried(carried: SessionWorkflowInput['carried']): carried is CarriedSessionState {
  return (carried as CarriedSessionState | undefined)?.version === 2;
}

export class SessionState {
  readonly executionId: string;
  limits: SessionLimits;
  status: SessionLifecycle;
  queue: QueuedTask[];
  nextTaskSeq: number;
  turnsCompleted: number;
  turnsThisRun = 0;
  /** Tasks accepted by this run: with turnsThisRun, whether this run did anything its history could grow by. */
  acceptedThisRun = 0;
  readonly runIndex: number;
  seenRequests: [string, string][];
  turns: TurnRef[];
  worktree?: SessionWorktree;
  error?: { code: string; message: string };
  current?: { taskId: string; turn: number; turnId: string; excerpt: string };
  cancelRequested?: { reason: string };
  /** Set once the session has closed (cancelled, or failed for good): handlers waiting for the end return. */
  finished = false;
  taskCounts: Record<TaskState, number>;
  recentTasks: TaskRecord[];
  refusedSignals: { count: number; recent: RefusedSend[] };
  /** Tokens: the limit (if any), what this session spent, whether a call was refused for want of budget. */
  readonly budget: Budget;
  /** Tasks of a v1 run's carried queue (with their text), stored when this run starts. */
  readonly inherited: NewTask[] = [];

  /**
   * `mintId` is the workflow's uuid4 (deterministic on replay; a reset re-runs with a new seed), so a new
   * execution chain gets keys no earlier chain used.
   */
  constructor(
    readonly create: CreateSessionInput,
    carried: SessionWorkflowInput['carried'],
    mintId: () => string,
  ) {
    if (isCurrentCarried(carried)) {
      this.executionId = carried.executionId;
      this.limits = carried.limits;
      this.status = carried.status;
      this.queue = [...carried.queue];
      this.nextTaskSeq = carried.nextTaskSeq;
      this.turnsCompleted = carried.turnsCompleted;
      this.runIndex = carried.runIndex + 1;
      this.seenRequests = carried.seenRequests.map(([r, t]) => [r, t]);
      this.turns = [...carried.turns];
      this.worktree = carried.worktree;
      this.error = carried.error;
      this.taskCounts = { ...carried.taskCounts };
      this.recentTasks = [...carried.recentTasks];
      this.refusedSignals = { count: carried.refusedSignals.count, recent: [...carried.refusedSignals.recent] };
      this.budget = new Budget(carried.budget ?? { spent: 0 });
      return;
    }
    // A fresh chain, or one that a run of the v1 code continued into this one (its rows are the legacy chain's).
    this.executionId = carried ? `legacy/${create.sessionId}` : mintId();
    this.limits = resolveLimits(create.limits);
    this.status = carried?.status ?? 'progressing';
    this.queue = [];
    this.nextTaskSeq = carried?.nextTaskSeq ?? 1;
    this.turnsCompleted = carried?.turnsCompleted ?? 0;
    this.runIndex = carried ? carried.runIndex + 1 : 0;
    this.seenRequests = (carried?.seenRequests ?? []).map(([r, t]) => [r, t]);
    this.turns = [...(carried?.turns ?? [])];
    this.worktree = carried?.worktree;
    this.error = carried?.error;
    this.taskCounts = { ...NO_TASKS };
    this.recentTasks = [];
    this.refusedSignals = { count: 0, recent: [] };
    this.budget = new Budget({ limit: create.budgetTokens, spent: 0, fundedBy: create.fundedBy });
    for (const q of carried?.queue ?? []) this.inherited.push({ taskId: q.taskId, task: q.task, from: q.from });
    for (const q of this.inherited) this.queue.push({ taskId: q.taskId, excerpt: excerpt(q.task), stored: false });
    this.taskCounts.queued = this.queue.length;
  }

  /** Cancelled, or failed before it had a worktree: nothing can run here any more. */
  get closed(): boolean {
    return this.finished || this.status === 'cancelled' || (this.status === 'failed' && this.worktree === undefined);
  }

  /** A cancel was accepted and the session is winding down: new work is refused. */
  get closing(): boolean {
    return this.cancelRequested !== undefined && !this.finished;
  }

  /** Why a send (or the create's task) of `length` characters cannot be accepted now, if it cannot. */
  refusalOf(length: number, historySize: number): { code: ErrorCode; message: string } | undefined {
    if (this.closed) return { code: 'session_closed', message: `session ${this.create.sessionId} is ${this.status}: create a new session` };
    if (this.closing) {
      return { code: 'session_closing', message: `session ${this.create.sessionId} is being cancelled: nothing new is accepted` };
    }
    if (this.queue.length >= this.limits.maxQueuedTasks) {
      return {
        code: 'queue_full',
        message: `session ${this.create.sessionId} has ${this.queue.length} tasks queued (limit ${this.limits.maxQueuedTasks}): retry after some have run`,
      };
    }
    if (historySize + length > this.limits.historyBudgetBytes) {
      return {
        code: 'queue_full',
        message: `this run of session ${this.create.sessionId} is at its history budget; it continues-as-new at its next turn boundary: retry shortly`,
      };
    }
    return undefined;
  }

  /** The acknowledgement of a request id seen before (nothing new is queued), if it was. */
  duplicateOf(requestId: string | undefined): SendResult | undefined {
    if (requestId === undefined) return undefined;
    const seen = this.seenRequests.find(([r]) => r === requestId);
    if (!seen) return undefined;
    return {
      taskId: seen[1],
      position: this.positionOf(seen[1]),
      status: sessionStatusOf(this.status, this.closed),
      duplicate: true,
      taskState: this.stateOf(seen[1]),
    };
  }

  /** Accepts a task: it gets an id and a place in the queue now; it may start once its text is stored. */
  reserve(input: SendInput): { ack: SendResult; task: NewTask } {
    const taskId = `t${this.nextTaskSeq++}`;
    this.acceptedThisRun += 1;
    this.queue.push({ taskId, excerpt: excerpt(input.task), stored: false });
    this.taskCounts.queued += 1;
    if (input.requestId !== undefined) this.remember(input.requestId, taskId);
    return {
      ack: { taskId, position: this.positionOf(taskId), status: sessionStatusOf(this.status, this.closed), duplicate: false, taskState: 'queued' },
      task: { taskId, task: input.task, requestId: input.requestId, from: input.from },
    };
  }

  /** Remembers a request id that queued nothing (a create without a task), so a retry is answered the same. */
  remember(requestId: string, taskId: string): void {
    this.seenRequests.push([requestId, taskId]);
    if (this.seenRequests.length > DEDUPE_WINDOW) this.seenRequests.splice(0, this.seenRequests.length - DEDUPE_WINDOW);
  }

  /** The task's text is stored: it may run. */
  markStored(taskId: string): void {
    const at = this.queue.findIndex((q) => q.taskId === taskId);
    if (at >= 0) this.queue[at] = { ...this.queue[at], stored: true };
  }

  /** A task that could not be stored was never accepted after all: it leaves no trace but the refusal. */
  unreserve(taskId: string): void {
    const at = this.queue.findIndex((q) => q.taskId === taskId);
    if (at < 0) return;
    this.queue.splice(at, 1);
    this.taskCounts.queued -= 1;
    this.seenRequests = this.seenRequests.filter(([, t]) => t !== taskId);
  }

  /** A signalled send that was refused: a signal cannot be answered, so the refusal is recorded here. */
  refuseSignal(code: ErrorCode, input: Partial<SendInput>): void {
    this.refusedSignals.count += 1;
    this.refusedSignals.recent.push({ code, requestId: input.requestId, excerpt: excerpt(String(input.task ?? '')) });
    if (this.refusedSignals.recent.length > REFUSALS_KEPT) this.refusedSignals.recent.shift();
  }

  get nextReady(): boolean {
    return this.queue[0]?.stored === true;
  }

  /** The next task may start a turn: it is stored, and the budget is not waiting to be raised. */
  get runnable(): boolean {
    return this.nextReady && !this.budget.exhausted;
  }

  private positionOf(taskId: string): number {
    const index = this.queue.findIndex((q) => q.taskId === taskId);
    if (index < 0) return 0;
    return index + (this.current ? 1 : 0);
  }

  private stateOf(taskId: string): TaskState | undefined {
    if (this.current?.taskId === taskId) return 'running';
    if (this.queue.some((q) => q.taskId === taskId)) return 'queued';
    return this.recentTasks.find((r) => r.taskId === taskId)?.state;
  }

  /** Takes the next stored task and marks the session busy with it under a new turn attempt id. */
  beginTurn(turnId: string): { task: QueuedTask; turn: number; turnId: string } | undefined {
    if (!this.nextReady) return undefined;
    const task = this.queue.shift()!;
    const turn = this.turnsCompleted + 1;
    this.current = { taskId: task.taskId, turn, turnId, excerpt: task.excerpt };
    this.taskCounts.queued -= 1;
    this.taskCounts.running += 1;
    this.status = 'progressing';
    this.error = undefined;
    return { task, turn, turnId };
  }

  /** Ends the current turn: its task is done, failed or cancelled. Returns the task's terminal record. */
  finishTurn(ref: TurnRef): TaskRecord {
    this.turns.push(ref);
    if (this.turns.length > TURN_REFS_KEPT) this.turns.splice(0, this.turns.length - TURN_REFS_KEPT);
    this.turnsCompleted = ref.turn;
    this.turnsThisRun += 1;
    const excerptText = this.current?.excerpt ?? '';
    this.current = undefined;
    this.taskCounts.running -= 1;
    if (ref.outcome === 'failed' || ref.outcome === 'budget_exhausted') {
      // The session stays open: a later send retries with the history intact (a fixed key, a recovered host, a
      // raised budget).
      this.status = 'failed';
      this.error = ref.error;
    } else if (ref.outcome !== 'cancelled') {
      this.status = this.queue.length > 0 ? 'progressing' : 'idle';
    }
    const state: TaskState = ref.outcome === 'failed' || ref.outcome === 'budget_exhausted' ? 'failed' : ref.outcome === 'cancelled' ? 'cancelled' : 'done';
    return this.recordEnd({
      taskId: ref.taskId,
      state,
      excerpt: excerptText,
      turn: ref.turn,
      outcome: ref.outcome,
      reason: ref.error?.message ?? (ref.outcome === 'cancelled' ? this.cancelRequested?.reason : undefined),
    });
  }

  /**
   * The session is closing: every task still queued ends now (cancelled, or failed when the session could never
   * run them). Returns their terminal records.
   */
  endQueued(state: 'cancelled' | 'failed', reason: string): TaskRecord[] {
    const ended = this.queue.map((q) => this.recordEnd({ taskId: q.taskId, state, excerpt: q.excerpt, reason }, 'queued'));
    this.queue = [];
    return ended;
  }

  /** A send whose store finished after the cancel was accepted: it is recorded as cancelled, never run. */
  endAdmittedLate(taskId: string, reason: string): TaskRecord | undefined {
    const at = this.queue.findIndex((q) => q.taskId === taskId);
    if (at < 0) return undefined;
    const [q] = this.queue.splice(at, 1);
    return this.recordEnd({ taskId, state: 'cancelled', excerpt: q.excerpt, reason }, 'queued');
  }

  /** The recorded end of a task that has ended (among the recent ones), if it has. */
  endedRecord(taskId: string): TaskRecord | undefined {
    return this.recentTasks.find((r) => r.taskId === taskId);
  }

  private recordEnd(record: TaskRecord, from?: 'queued'): TaskRecord {
    if (from === 'queued') this.taskCounts.queued -= 1;
    this.taskCounts[record.state] += 1;
    this.recentTasks.push(record);
    if (this.recentTasks.length > TASK_RECORDS_KEPT) this.recentTasks.splice(0, this.recentTasks.length - TASK_RECORDS_KEPT);
    return record;
  }

  /** Setup failed (no worktree): the session cannot work at all and closes. */
  failSetup(error: { code: string; message: string }): void {
    this.status = 'failed';
    this.error = error;
  }

  requestCancel(reason: string): void {
    this.cancelRequested ??= { reason };
  }

  markClosed(status: 'cancelled' | 'failed', reason: string): void {
    this.status = status;
    this.cancelRequested ??= { reason };
    this.current = undefined;
    this.finished = true;
  }

  view(): SessionStatusView {
    return {
      sessionId: this.create.sessionId,
      title: this.create.title,
      agent: this.create.agent ?? 'coder',
      host: this.create.host,
      repo: this.create.repo,
      branch: this.worktree?.branch,
      worktree: this.worktree?.path,
      confinement: this.create.isolated && this.worktree ? (this.worktree.unconfined ? 'unconfined' : 'confined') : undefined,
      held: this.worktree?.held ? true : undefined,
      status: sessionStatusOf(this.status, this.closed),
      closedAs: this.closed ? (this.status === 'cancelled' ? 'cancelled' : 'failed') : undefined,
      turnsCompleted: this.turnsCompleted,
      currentTask: this.current && { taskId: this.current.taskId, turn: this.current.turn, excerpt: this.current.excerpt },
      queued: this.queue.length,
      lastTurn: this.turns[this.turns.length - 1],
      runIndex: this.runIndex,
      error: this.error,
      executionId: this.executionId,
      closing: this.closing,
      tasks: { ...this.taskCounts },
      recentTasks: this.recentTasks,
      refusedSignals: this.refusedSignals,
      limits: this.limits,
      budget: this.budget.view(),
    };
  }

  transcriptRefs(): TranscriptRefs {
    return { sessionId: this.create.sessionId, executionId: this.executionId, turns: this.turns };
  }

  carry(): CarriedSessionState {
    return {
      version: 2,
      executionId: this.executionId,
      limits: this.limits,
      status: this.status,
      queue: this.queue,
      nextTaskSeq: this.nextTaskSeq,
      turnsCompleted: this.turnsCompleted,
      runIndex: this.runIndex,
      seenRequests: this.seenRequests,
      turns: this.turns,
      worktree: this.worktree,
      error: this.error,
      taskCounts: this.taskCounts,
      recentTasks: this.recentTasks,
      refusedSignals: this.refusedSignals,
      budget: this.budget.carry(),
    };
  }
}

export function excerpt(text: string, max = EXCERPT_CHARS): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
