/** FROZEN with ./workflow.ts (the pre-`session-v2` session state): never edit. */
/**
 * The pure state of one child session: its queue, dedupe window, status and turn refs. The workflow
 * wires handlers to it; everything here is plain data so it survives continue-as-new as JSON.
 */
import type { Lease } from '../../../contract/activities';
import {
  DEFAULT_LIMITS,
  type CreateSessionInput,
  type SendInput,
  type SendResult,
  type SessionLimits,
  type SessionLifecycle,
  sessionStatusOf,
  type SessionStatusView,
  type TranscriptRefs,
  type TurnRef,
} from '../../../contract/messages';

export interface QueuedTask {
  readonly taskId: string;
  readonly task: string;
  readonly from?: string;
}

/** The session's worktree and the lease that fences every write to it (carried across continue-as-new). */
export interface SessionWorktree {
  readonly path: string;
  readonly branch: string;
  readonly lease: Lease;
}

/** Carried across continue-as-new: JSON-safe (arrays and plain objects, never a Map). */
export interface CarriedSessionState {
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
}

export interface SessionWorkflowInput {
  readonly create: CreateSessionInput;
  readonly carried?: CarriedSessionState;
}

/** Bounds that keep state (and so every continue-as-new payload) small. */
const DEDUPE_WINDOW = 500;
const TURN_REFS_KEPT = 50;
const EXCERPT_CHARS = 120;

export class SessionState {
  status: SessionLifecycle;
  queue: QueuedTask[];
  nextTaskSeq: number;
  turnsCompleted: number;
  turnsThisRun = 0;
  readonly runIndex: number;
  seenRequests: [string, string][];
  turns: TurnRef[];
  worktree?: SessionWorktree;
  error?: { code: string; message: string };
  current?: { taskId: string; turn: number; excerpt: string };
  cancelRequested?: { reason: string };
  readonly limits: SessionLimits;

  constructor(
    readonly create: CreateSessionInput,
    carried?: CarriedSessionState,
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...create.limits };
    this.status = carried?.status ?? 'progressing';
    this.queue = [...(carried?.queue ?? [])];
    this.nextTaskSeq = carried?.nextTaskSeq ?? 1;
    this.turnsCompleted = carried?.turnsCompleted ?? 0;
    this.runIndex = carried ? carried.runIndex + 1 : 0;
    this.seenRequests = (carried?.seenRequests ?? []).map(([r, t]) => [r, t]);
    this.turns = [...(carried?.turns ?? [])];
    this.worktree = carried?.worktree;
    this.error = carried?.error;
    if (!carried && create.task) this.enqueue({ task: create.task, from: create.parent });
  }

  /** Cancelled, or failed before it had a worktree: nothing can run here any more. */
  get closed(): boolean {
    return this.status === 'cancelled' || (this.status === 'failed' && this.worktree === undefined);
  }

  /** Queues a task; a repeated requestId returns the first acknowledgement and queues nothing. */
  enqueue(input: SendInput): SendResult {
    if (input.requestId !== undefined) {
      const seen = this.seenRequests.find(([requestId]) => requestId === input.requestId);
      if (seen) return { taskId: seen[1], position: this.positionOf(seen[1]), status: sessionStatusOf(this.status, this.closed), duplicate: true };
    }
    const taskId = `t${this.nextTaskSeq++}`;
    this.queue.push({ taskId, task: input.task, from: input.from });
    if (input.requestId !== undefined) {
      this.seenRequests.push([input.requestId, taskId]);
      if (this.seenRequests.length > DEDUPE_WINDOW) this.seenRequests.splice(0, this.seenRequests.length - DEDUPE_WINDOW);
    }
    return { taskId, position: this.positionOf(taskId), status: sessionStatusOf(this.status, this.closed), duplicate: false };
  }

  private positionOf(taskId: string): number {
    const index = this.queue.findIndex((q) => q.taskId === taskId);
    if (index < 0) return 0;
    return index + (this.current ? 1 : 0);
  }

  /** Takes the next task and marks the session busy with it. */
  beginTurn(): { task: QueuedTask; turn: number } | undefined {
    const task = this.queue.shift();
    if (!task) return undefined;
    const turn = this.turnsCompleted + 1;
    this.current = { taskId: task.taskId, turn, excerpt: excerpt(task.task) };
    this.status = 'progressing';
    this.error = undefined;
    return { task, turn };
  }

  finishTurn(ref: TurnRef): void {
    this.turns.push(ref);
    if (this.turns.length > TURN_REFS_KEPT) this.turns.splice(0, this.turns.length - TURN_REFS_KEPT);
    this.turnsCompleted = ref.turn;
    this.turnsThisRun += 1;
    this.current = undefined;
    if (ref.outcome === 'failed') {
      // The session stays open: a later send retries with the history intact (a fixed key, a recovered host).
      this.status = 'failed';
      this.error = ref.error;
    } else if (ref.outcome !== 'cancelled') {
      this.status = this.queue.length > 0 ? 'progressing' : 'idle';
    }
  }

  /** Setup failed (no worktree): the session cannot work at all and closes. */
  failSetup(error: { code: string; message: string }): void {
    this.status = 'failed';
    this.error = error;
  }

  markCancelled(reason: string): void {
    this.status = 'cancelled';
    this.cancelRequested ??= { reason };
    this.current = undefined;
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
      status: sessionStatusOf(this.status, this.closed),
      closedAs: this.closed ? (this.status === 'cancelled' ? 'cancelled' : 'failed') : undefined,
      turnsCompleted: this.turnsCompleted,
      currentTask: this.current,
      queued: this.queue.length,
      lastTurn: this.turns[this.turns.length - 1],
      runIndex: this.runIndex,
      error: this.error,
    };
  }

  transcriptRefs(): TranscriptRefs {
    return { sessionId: this.create.sessionId, turns: this.turns };
  }

  carry(): CarriedSessionState {
    return {
      status: this.status,
      queue: this.queue,
      nextTaskSeq: this.nextTaskSeq,
      turnsCompleted: this.turnsCompleted,
      runIndex: this.runIndex,
      seenRequests: this.seenRequests,
      turns: this.turns,
      worktree: this.worktree,
      error: this.error,
    };
  }
}

export function excerpt(text: string, max = EXCERPT_CHARS): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
