/**
 * The completion closure (invariant 15): one pure function decides, from ledger facts alone, whether a team
 * board is delivered. The TeamRun workflow calls it for `completion_candidate` and for the certificate; the CLI
 * (`orchard board check`) calls it on a board file. No I/O, no clock, no randomness, no zod: it runs in the
 * workflow sandbox, and the same board always gives the same result whatever the order of its rows.
 *
 * A task counts (is "closed") in exactly one of three ways:
 *   - `completed`: status completed, and its `outputId` names a TaskOutput row of this task and of the
 *     board's current generation;
 *   - `replaced_by`: some task whose `replacesTaskId` names it is closed, so the chain ends in a counted task;
 *   - `user_scope_removed`: cancelled by the user, citing a user event of this team about this task, and
 *     replaced by nothing (a cancelled task with a replacement moved its scope there: it counts only through it).
 * Delivered needs every task closed, at least one `completed` task, a current assessment
 * (`assessedRevision === workRevision`) and no blocker (open task, unreleased handoff, unread inbox, running turn);
 * a handoff the user resolved `keep_stopped` no longer blocks (its replacement was cancelled by that user event).
 */

/** Recorded in every certificate, so a certificate can be re-checked by the validator that issued it. */
export const CLOSURE_VALIDATOR_VERSION = 'closure/2';

export const TASK_STATUSES = ['pending', 'in_progress', 'completed', 'failed', 'cancelled'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

export const HANDOFF_STATES = ['requested', 'yielding', 'released', 'timeout', 'unknown', 'failed'] as const;
export type HandoffState = (typeof HANDOFF_STATES)[number];

export interface TaskCancel {
  /** Who cancelled: only a user's cancel can remove scope; a Coordinator's needs a replacement that counts. */
  readonly by: 'user' | 'coordinator';
  /** The structured kind of cancel (e.g. `reassign`, `keep_stopped`); informational. */
  readonly kind?: string;
  readonly reason?: string;
  /** The user event that removed this task's scope; required for `user_scope_removed`. */
  readonly userEventId?: string;
}

export interface BoardTask {
  readonly id: string;
  readonly status: TaskStatus;
  /** The TaskOutput row this task's completion points at. */
  readonly outputId?: string;
  /** The task this one replaces (cancel/reassign): closing this task closes that one. */
  readonly replacesTaskId?: string;
  readonly cancel?: TaskCancel;
}

/** A TaskOutput evidence row, as stored. */
export interface BoardOutput {
  readonly id: string;
  readonly taskId: string;
  /** The team generation that produced it: evidence of an earlier activation is stale. */
  readonly generation: number;
}

export interface BoardHandoff {
  readonly oldTaskId: string;
  /** The replacement of a reassign; absent when the user cancelled the running work outright. */
  readonly newTaskId?: string;
  readonly state: HandoffState;
  /**
   * A user's resolution of a handoff that timed out (or ended unknown/failed): `keep_stopped` settles it (the old
   * work stays stopped, the replacement is cancelled); `release` comes with state `released`.
   */
  readonly resolution?: HandoffResolution;
}

export const HANDOFF_RESOLUTIONS = ['keep_stopped', 'release'] as const;
export type HandoffResolution = (typeof HANDOFF_RESOLUTIONS)[number];

/** A durable user event (message, cancel, resolution) the run recorded. */
export interface BoardUserEvent {
  readonly id: string;
  readonly teamId: string;
  readonly kind: string;
  /** The task the event is about. */
  readonly taskId: string;
}

export interface BoardBlockers {
  /** Inbox messages the Coordinator has not read yet: it may still act on them. */
  readonly inboxUnread: number;
  /** Coordinator or Member turns still running: they may still change the board. */
  readonly turnsRunning: number;
}

export interface BoardSnapshot {
  readonly teamId: string;
  readonly generation: number;
  /** Bumped on every committed fact. */
  readonly workRevision: number;
  /** The revision this assessment was made at: anything else is a stale view of the board. */
  readonly assessedRevision: number;
  readonly tasks: readonly BoardTask[];
  readonly outputs: readonly BoardOutput[];
  readonly handoffs: readonly BoardHandoff[];
  readonly userEvents: readonly BoardUserEvent[];
  readonly blockers: BoardBlockers;
}

/**
 * Every reason the validator gives, with what it means. Reasons are sorted in this order (then by task id and
 * detail), so a board's result does not depend on the order of its rows.
 */
export const CLOSURE_REASONS = {
  board_empty: 'the board has no task: there is nothing to deliver',
  duplicate_task_id: 'two task rows share an id: the board is not a consistent ledger view',
  duplicate_output_id: 'two output rows share an id: the evidence is ambiguous',
  duplicate_user_event_id: 'two user events share an id: a citation is ambiguous',
  all_cancelled: 'every task is cancelled: nothing is delivered (the board reads cancelled only when users removed every task)',
  all_failed: 'every task failed',
  stale_revision: 'the assessment was made at another work revision than the current one',
  task_open: 'a task is pending or in progress',
  handoff_pending: 'a cancel/reassign handoff is not released (requested, yielding, timeout, unknown or failed) and no user kept it stopped',
  inbox_unread: 'the Coordinator has unread inbox messages',
  turn_running: 'a turn is still running',
  missing_output: 'a completed task names no output, or names an output row that does not exist',
  output_task_mismatch: 'a completed task names an output row of another task',
  stale_evidence: "a completed task's output row is from another generation",
  task_failed: 'a failed task with no replacement chain that ends in a counted task',
  cancelled_by_coordinator: 'a task cancelled by the Coordinator with no replacement chain that ends in a counted task',
  cancelled_without_user_event: 'a task cancelled by the user (or with no cancel record) that cites no user event',
  user_event_missing: 'a user-cancelled task cites a user event that does not exist',
  user_event_foreign: 'a user-cancelled task cites a user event of another team or about another task',
  replacement_chain_broken: 'a task has replacements, but none of them is closed',
  replacement_target_unknown: 'a task replaces a task id that is not on the board',
  replacement_cycle: 'a task lies on a cycle of replacesTaskId links',
  no_completed_output: 'no task is completed with output: there is no delivered work',
} as const;

type ClosureReasonCode = keyof typeof CLOSURE_REASONS;
/** `cancelled`: every task removed from scope by a user event (never a Coordinator's cancels). */
export type ClosureOutcome = 'delivered' | 'not_delivered' | 'not_applicable' | 'cancelled';
/** The workflow adds `certified` once a certificate is issued. */
type CandidateState = 'ready' | 'blocked' | 'not_applicable';

export interface ClosureReason {
  readonly code: ClosureReasonCode;
  readonly taskId?: string;
  readonly detail: string;
}

interface Resolution {
  readonly taskId: string;
  readonly kind: 'completed' | 'replaced_by' | 'user_scope_removed';
  /** For `replaced_by`: the replacement that closes this task (the first link of the chain). */
  readonly by?: string;
  /** For `user_scope_removed`: the cited user event. */
  readonly userEventId?: string;
}

interface ClosureEvidence {
  /** Every closed task, sorted. */
  readonly taskIds: readonly string[];
  /** The output rows of the `completed` resolutions, sorted. */
  readonly outputIds: readonly string[];
  /** How each closed task counts, sorted by task id. */
  readonly resolutions: readonly Resolution[];
}

export interface ClosureResult {
  readonly outcome: ClosureOutcome;
  readonly candidate: CandidateState;
  /** Empty exactly when delivered. */
  readonly reasons: readonly ClosureReason[];
  readonly evidence: ClosureEvidence;
  readonly validatorVersion: string;
}

type Direct =
  | { readonly ok: true; readonly resolution: Resolution; readonly outputId?: string }
  /** No reason: a replaced cancelled task, which counts only through its replacements (reported as a broken chain). */
  | { readonly ok: false; readonly reason?: ClosureReason };

export function validateClosure(board: BoardSnapshot): ClosureResult {
  const reasons: ClosureReason[] = [];
  const add = (code: ClosureReasonCode, detail: string, taskId?: string) => reasons.push(taskId === undefined ? { code, detail } : { code, taskId, detail });
  const { tasks } = board;

  if (tasks.length === 0) add('board_empty', 'the board has no task');
  const allCancelled = tasks.length > 0 && tasks.every((t) => t.status === 'cancelled');
  const allFailed = tasks.length > 0 && tasks.every((t) => t.status === 'failed');
  if (allCancelled) add('all_cancelled', `all ${tasks.length} task(s) are cancelled`);
  if (allFailed) add('all_failed', `all ${tasks.length} task(s) failed`);

  if (board.assessedRevision !== board.workRevision) {
    add('stale_revision', `assessed at revision ${board.assessedRevision}, the board is at revision ${board.workRevision}`);
  }
  for (const t of tasks) if (t.status === 'pending' || t.status === 'in_progress') add('task_open', `task ${t.id} is ${t.status}`, t.id);
  for (const h of board.handoffs) {
    if (h.state !== 'released' && h.resolution !== 'keep_stopped')
      add('handoff_pending', `handoff ${h.oldTaskId} -> ${h.newTaskId ?? '(cancelled)'} is ${h.state}, not released`, h.newTaskId ?? h.oldTaskId);
  }
  if (board.blockers.inboxUnread > 0) add('inbox_unread', `${board.blockers.inboxUnread} unread inbox message(s)`);
  if (board.blockers.turnsRunning > 0) add('turn_running', `${board.blockers.turnsRunning} turn(s) running`);

  const duplicated = [
    ...duplicates(tasks.map((t) => t.id)).map((id) => ['duplicate_task_id', 'task', id] as const),
    ...duplicates(board.outputs.map((o) => o.id)).map((id) => ['duplicate_output_id', 'output', id] as const),
    ...duplicates(board.userEvents.map((e) => e.id)).map((id) => ['duplicate_user_event_id', 'user event', id] as const),
  ];
  for (const [code, what, id] of duplicated) add(code, `more than one ${what} row has id ${id}`);

  // An inconsistent ledger view closes nothing: which of two same-id rows to believe would depend on row order.
  const closure = duplicated.length === 0 ? closeTasks(board, add) : { resolutions: [], outputIds: [] };
  if (duplicated.length === 0 && tasks.length > 0 && !allCancelled && !allFailed && closure.outputIds.length === 0) {
    add('no_completed_output', 'no task is completed with an output of this generation');
  }

  // `cancelled` is the user's word only: every task's scope removed by a user event (directly, or through a chain of
  // replacements the user removed too). A board the Coordinator cancelled is not delivered and not abandoned.
  const userRemovedAll = allCancelled && duplicated.length === 0 && closure.resolutions.length === tasks.length;
  const outcome: ClosureOutcome = tasks.length === 0 ? 'not_applicable' : userRemovedAll ? 'cancelled' : reasons.length > 0 ? 'not_delivered' : 'delivered';
  return {
    outcome,
    candidate: outcome === 'not_applicable' ? 'not_applicable' : outcome === 'delivered' ? 'ready' : 'blocked',
    reasons: sortReasons(reasons),
    evidence: { taskIds: closure.resolutions.map((r) => r.taskId), outputIds: closure.outputIds, resolutions: closure.resolutions },
    validatorVersion: CLOSURE_VALIDATOR_VERSION,
  };
}

/**
 * Closes what can be closed and reports why each remaining settled task is not. Replacement closure is the least
 * fixed point of "a settled task is closed when one of its replacements is", computed in rounds; each `replaced_by`
 * link points at a replacement closed in an earlier round, so following the links always ends in a direct closure,
 * even on a board with cycles. An open task is never closed: it may still change.
 */
function closeTasks(
  board: BoardSnapshot,
  add: (code: ClosureReasonCode, detail: string, taskId?: string) => void,
): { resolutions: Resolution[]; outputIds: string[] } {
  const byId = new Map(board.tasks.map((t) => [t.id, t]));
  const outputs = new Map(board.outputs.map((o) => [o.id, o]));
  const events = new Map(board.userEvents.map((e) => [e.id, e]));
  const replacements = new Map<string, BoardTask[]>();
  for (const t of board.tasks) {
    if (t.replacesTaskId === undefined) continue;
    if (!byId.has(t.replacesTaskId)) {
      add('replacement_target_unknown', `task ${t.id} replaces ${t.replacesTaskId}, which is not on the board`, t.id);
      continue;
    }
    replacements.set(t.replacesTaskId, [...(replacements.get(t.replacesTaskId) ?? []), t]);
  }
  for (const id of cycleMembers(board.tasks)) add('replacement_cycle', `task ${id} lies on a cycle of replacesTaskId links`, id);

  // A cancel that handed the task on (a reassign, or a cancel followed by a replacement) did not remove its scope:
  // the replacement carries it, so the task closes only through the chain, as `replaced_by`.
  const direct = new Map(
    board.tasks.map((t): [string, Direct] => {
      const d = closeDirectly(t, board, outputs, events);
      return [t.id, d.ok && t.status === 'cancelled' && replacements.has(t.id) ? { ok: false } : d];
    }),
  );
  const closed = new Map<string, Resolution>();
  const outputIds: string[] = [];
  const round = new Map<string, number>();
  for (const [id, d] of direct) {
    if (!d.ok) continue;
    closed.set(id, d.resolution);
    if (d.outputId !== undefined) outputIds.push(d.outputId);
    round.set(id, 0);
  }
  for (let r = 1; ; r++) {
    const added: [string, string][] = [];
    for (const t of board.tasks) {
      if (closed.has(t.id) || t.status === 'pending' || t.status === 'in_progress') continue;
      const by = (replacements.get(t.id) ?? []).filter((x) => round.has(x.id)).sort((a, b) => round.get(a.id)! - round.get(b.id)! || compare(a.id, b.id))[0];
      if (by) added.push([t.id, by.id]);
    }
    if (added.length === 0) break;
    for (const [taskId, by] of added) {
      closed.set(taskId, { taskId, kind: 'replaced_by', by });
      round.set(taskId, r);
    }
  }

  for (const t of board.tasks) {
    if (closed.has(t.id) || t.status === 'pending' || t.status === 'in_progress') continue;
    const d = direct.get(t.id)!;
    if (!d.ok && d.reason) add(d.reason.code, d.reason.detail, t.id);
    const replacedBy = replacements.get(t.id);
    if (replacedBy) {
      const ids = replacedBy.map((x) => x.id).sort(compare);
      add('replacement_chain_broken', `task ${t.id} is replaced by ${ids.join(', ')}, but no replacement chain ends in a counted task`, t.id);
    }
  }
  return { resolutions: [...closed.values()].sort((a, b) => compare(a.taskId, b.taskId)), outputIds: outputIds.sort(compare) };
}

/** Rules 1 and 3: a task that counts by itself, or why it does not. */
function closeDirectly(t: BoardTask, board: BoardSnapshot, outputs: ReadonlyMap<string, BoardOutput>, events: ReadonlyMap<string, BoardUserEvent>): Direct {
  const no = (code: ClosureReasonCode, detail: string): Direct => ({ ok: false, reason: { code, taskId: t.id, detail } });
  switch (t.status) {
    case 'pending':
    case 'in_progress':
      return no('task_open', `task ${t.id} is ${t.status}`);
    case 'failed':
      return no('task_failed', `task ${t.id} failed`);
    case 'completed': {
      if (t.outputId === undefined) return no('missing_output', `task ${t.id} is completed but names no output`);
      const output = outputs.get(t.outputId);
      if (!output) return no('missing_output', `task ${t.id} names output ${t.outputId}, which does not exist`);
      if (output.taskId !== t.id) return no('output_task_mismatch', `output ${output.id} belongs to task ${output.taskId}, not ${t.id}`);
      if (output.generation !== board.generation) {
        return no('stale_evidence', `output ${output.id} is from generation ${output.generation}, the team is at generation ${board.generation}`);
      }
      return { ok: true, resolution: { taskId: t.id, kind: 'completed' }, outputId: output.id };
    }
    case 'cancelled': {
      const cancel = t.cancel;
      if (cancel?.by === 'coordinator') return no('cancelled_by_coordinator', `task ${t.id} was cancelled by the coordinator`);
      if (cancel?.userEventId === undefined) {
        return no('cancelled_without_user_event', `task ${t.id} is cancelled ${cancel ? 'by the user' : 'with no cancel record'} and cites no user event`);
      }
      const event = events.get(cancel.userEventId);
      if (!event) return no('user_event_missing', `task ${t.id} cites user event ${cancel.userEventId}, which does not exist`);
      if (event.teamId !== board.teamId) {
        return no('user_event_foreign', `user event ${event.id} belongs to team ${event.teamId}, not ${board.teamId}`);
      }
      if (event.taskId !== t.id) return no('user_event_foreign', `user event ${event.id} is about task ${event.taskId}, not ${t.id}`);
      return { ok: true, resolution: { taskId: t.id, kind: 'user_scope_removed', userEventId: event.id } };
    }
  }
}

/** Ids on a cycle of the replacesTaskId graph (each task has at most one outgoing link, so walks are simple). */
function cycleMembers(tasks: readonly BoardTask[]): string[] {
  const next = new Map(tasks.map((t) => [t.id, t.replacesTaskId]));
  const onCycle = new Set<string>();
  const done = new Set<string>();
  for (const start of next.keys()) {
    const path: string[] = [];
    const index = new Map<string, number>();
    let at: string | undefined = start;
    while (at !== undefined && next.has(at) && !done.has(at) && !index.has(at)) {
      index.set(at, path.length);
      path.push(at);
      at = next.get(at);
    }
    if (at !== undefined && index.has(at)) for (const id of path.slice(index.get(at))) onCycle.add(id);
    for (const id of path) done.add(id);
  }
  return [...onCycle];
}

function duplicates(ids: readonly string[]): string[] {
  const seen = new Set<string>();
  const dup = new Set<string>();
  for (const id of ids) (seen.has(id) ? dup : seen).add(id);
  return [...dup];
}

const REASON_RANK = new Map(Object.keys(CLOSURE_REASONS).map((code, i) => [code, i]));

function sortReasons(reasons: readonly ClosureReason[]): ClosureReason[] {
  return [...reasons].sort(
    (a, b) => REASON_RANK.get(a.code)! - REASON_RANK.get(b.code)! || compare(a.taskId ?? '', b.taskId ?? '') || compare(a.detail, b.detail),
  );
}

/** Code-unit order: the same everywhere, unlike localeCompare. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
