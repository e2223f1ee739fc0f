import type { Pool, PoolClient } from 'pg';
import { actorLabel, MEMBER_MESSAGE_PURPOSES, storeRefusal, type Actor, type StoreOperation } from '../../workflows/team/authority';
import {
  HANDOFF_RESOLUTIONS,
  validateClosure,
  type BoardSnapshot as ClosureBoard,
  type ClosureResult,
  type HandoffResolution,
  type HandoffState,
} from '../../workflows/team/closure';
import { withTransaction } from './db';
import type { HandoffKind, HandoffReceipt, ReceiptState } from '../../contract/team-activities';
import type { CertificateVerification, VerifySpec } from '../../contract/messages';
import { verificationProblem } from './team-verify';

/**
 * The team board in Postgres (issue 9): tasks, outputs, facts, the Inbox and user events. Every write goes through
 * `commit`, which refuses a write its actor may not make (the store boundary of invariant 12) before anything is
 * read, then locks the run row, applies the change and bumps `work_revision` with a fact row, all in one
 * transaction: a reader that saw revision N knows whether anything happened since.
 */

type TaskStatus = 'pending' | 'in_progress' | 'completed' | 'failed' | 'cancelled';

/** Why a task failed: the typed code and message of its Member's failed turn or closed session. */
export interface TaskFailure {
  readonly code: string;
  readonly message: string;
}

export interface TeamTask {
  readonly taskId: string;
  readonly title: string;
  readonly description: string;
  readonly owner?: string;
  readonly status: TaskStatus;
  readonly replacesTaskId?: string;
  readonly outputId?: string;
  readonly cancel?: { by: 'user' | 'coordinator'; kind?: string; reason?: string; userEventId?: string };
  /** Why it failed (its execution's typed code and message), once failed. */
  readonly failure?: TaskFailure;
  /** The execution it was last started under (a paused task starts again under a new one). */
  readonly executionId?: string;
  readonly generation: number;
  readonly updatedRevision: number;
}

interface TeamOutput {
  readonly outputId: string;
  readonly taskId: string;
  readonly generation: number;
  readonly executionId: string;
  readonly summary: string;
  readonly commitSha?: string;
}

export interface BoardSnapshot {
  readonly teamId: string;
  readonly generation: number;
  readonly workRevision: number;
  readonly tasks: readonly TeamTask[];
  readonly outputs: readonly TeamOutput[];
  readonly userEvents: readonly { id: string; teamId: string; kind: string; taskId?: string }[];
  readonly handoffs: readonly { oldTaskId: string; newTaskId?: string; state: HandoffState; resolution?: HandoffResolution }[];
  readonly inboxUnread: number;
}

/** A refused write: typed, and nothing was changed. */
export class TeamStoreRefusal extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'TeamStoreRefusal';
  }
}

/**
 * Opens the run and its members (idempotent). A member's row is written once: the session id it was first stored
 * with stays its session id (a later activation or a retry proposing another changes nothing). Answers every
 * member's stored session id.
 */
export async function createTeamRun(
  pool: Pool,
  run: {
    teamId: string;
    repo: string;
    goal: string;
    protectedBranch?: string;
    members: readonly { memberId: string; role: string; sessionId: string }[];
    /** The verify command of the run as started now (each start of the team sets it; none: not verified). */
    verify?: VerifySpec;
  },
): Promise<{ memberId: string; sessionId: string }[]> {
  return withTransaction(pool, async (c) => {
    await c.query(`INSERT INTO team_runs (team_id, repo, goal, protected_branch) VALUES ($1, $2, $3, $4) ON CONFLICT (team_id) DO NOTHING`, [
      run.teamId,
      run.repo,
      run.goal,
      run.protectedBranch ?? 'main',
    ]);
    await c.query(`UPDATE team_runs SET verify = $2 WHERE team_id = $1 AND verify IS DISTINCT FROM $2::jsonb`, [
      run.teamId,
      run.verify ? JSON.stringify(run.verify) : null,
    ]);
    for (const m of run.members) {
      await c.query(`INSERT INTO team_members (team_id, member_id, role, session_id) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, [
        run.teamId,
        m.memberId,
        m.role,
        m.sessionId,
      ]);
    }
    const { rows } = await c.query(`SELECT member_id, session_id FROM team_members WHERE team_id = $1 AND member_id = ANY($2::text[])`, [
      run.teamId,
      run.members.map((m) => m.memberId),
    ]);
    const stored = new Map<string, string>(rows.map((r) => [r.member_id, r.session_id]));
    return run.members.map((m) => ({ memberId: m.memberId, sessionId: stored.get(m.memberId)! }));
  });
}

/** The session id stored for `memberId` in `teamId` (refused `member_not_found` when it has none). */
export async function memberSessionOf(pool: Pool, teamId: string, memberId: string): Promise<string> {
  const { rows } = await pool.query(`SELECT session_id FROM team_members WHERE team_id = $1 AND member_id = $2`, [teamId, memberId]);
  if (rows.length === 0) throw new TeamStoreRefusal('member_not_found', `no member ${memberId} in team ${teamId}`);
  return rows[0].session_id;
}

/**
 * An activation of the team: the first run of a `team/<id>` workflow chain (continue-as-new keeps it). The first
 * activation is generation 1; each later one bumps the generation, so the evidence of an earlier activation is
 * stale for the closure. The same activation again (a retried activity, a continued run) changes nothing.
 */
export async function activateTeamRun(pool: Pool, teamId: string, activationId: string) {
  return commit(pool, teamId, { kind: 'system' }, 'activate', async ({ c, generation }) => {
    const { rows } = await c.query(`SELECT activation_id FROM team_runs WHERE team_id = $1`, [teamId]);
    const previous: string | null = rows[0].activation_id;
    if (previous === activationId) return { result: { generation } };
    const next = previous === null ? generation : generation + 1;
    await c.query(`UPDATE team_runs SET activation_id = $2, generation = $3 WHERE team_id = $1`, [teamId, activationId, next]);
    return { result: { generation: next }, fact: { kind: 'activated', detail: { activationId, generation: next, previous } } };
  });
}

/** Context of one committed change: the transaction, the locked run row, and the fact to record. */
interface Txn {
  readonly c: PoolClient;
  readonly generation: number;
  readonly revision: number;
}

/** Writes that change the task graph: refused once the generation is certified. */
const GRAPH_WRITES: readonly StoreOperation[] = ['task_create', 'task_assign', 'task_update', 'plan_approve'];

/**
 * One committed fact: refuse what the actor may not do, lock the run, apply, bump the revision. `apply` returns
 * the fact's kind, task and detail, or undefined when it changed nothing (an idempotent retry): no revision bump.
 */
export async function commit<T>(
  pool: Pool,
  teamId: string,
  actor: Actor,
  operation: StoreOperation,
  apply: (t: Txn) => Promise<{ result: T; fact?: { kind: string; taskId?: string; detail?: unknown } }>,
): Promise<{ result: T; revision: number }> {
  const refused = storeRefusal(actor, operation);
  if (refused) throw new TeamStoreRefusal('tool_not_allowed', refused);
  return withTransaction(pool, async (c) => {
    const { rows } = await c.query(`SELECT generation, work_revision, archived FROM team_runs WHERE team_id = $1 FOR UPDATE`, [teamId]);
    if (rows.length === 0) throw new TeamStoreRefusal('team_not_found', `no team run ${teamId}`);
    const generation = Number(rows[0].generation);
    const current = Number(rows[0].work_revision);
    if ((GRAPH_WRITES.includes(operation) || operation === 'task_start' || operation === 'certificate') && rows[0].archived) {
      // An archived run is over: nobody changes its board any more.
      throw new TeamStoreRefusal('team_archived', `team ${teamId} is archived (${String(rows[0].archived.reason)}): its task graph is closed`);
    }
    if (GRAPH_WRITES.includes(operation)) {
      // A delivered generation's task graph is closed: its certificate is the last word on it, for everyone.
      const { rows: certified } = await c.query(
        `SELECT certificate->>'certificateId' AS id FROM team_certificates WHERE team_id = $1 AND generation = $2 LIMIT 1`,
        [teamId, generation],
      );
      if (certified[0]) throw new TeamStoreRefusal('run_delivered', `team ${teamId} is delivered (certificate ${certified[0].id}): its task graph is closed`);
    }
    const { result, fact } = await apply({ c, generation, revision: current + 1 });
    if (!fact) return { result, revision: current };
    await c.query(`UPDATE team_runs SET work_revision = $2 WHERE team_id = $1`, [teamId, current + 1]);
    await c.query(`INSERT INTO team_facts (team_id, revision, kind, task_id, actor, detail) VALUES ($1, $2, $3, $4, $5, $6)`, [
      teamId,
      current + 1,
      fact.kind,
      fact.taskId ?? null,
      actorLabel(actor),
      JSON.stringify(fact.detail ?? {}),
    ]);
    return { result, revision: current + 1 };
  });
}

async function taskRow(c: PoolClient, teamId: string, taskId: string, lock = true): Promise<TeamTask | undefined> {
  const { rows } = await c.query(`SELECT * FROM team_tasks WHERE team_id = $1 AND task_id = $2${lock ? ' FOR UPDATE' : ''}`, [teamId, taskId]);
  return rows[0] ? toTask(rows[0]) : undefined;
}

function toTask(r: any): TeamTask {
  return {
    taskId: r.task_id,
    title: r.title,
    description: r.description,
    owner: r.owner ?? undefined,
    status: r.status,
    replacesTaskId: r.replaces_task_id ?? undefined,
    outputId: r.output_id ?? undefined,
    cancel: r.cancel ?? undefined,
    failure: r.failure ?? undefined,
    executionId: r.execution_id ?? undefined,
    generation: Number(r.generation),
    updatedRevision: Number(r.updated_revision),
  };
}

/** A task's status on the board, or undefined when the board has no such task (a read: no lock). */
export async function taskStatusOf(pool: Pool, teamId: string, taskId: string): Promise<TeamTask['status'] | undefined> {
  const c = await pool.connect();
  try {
    return (await taskRow(c, teamId, taskId, false))?.status;
  } finally {
    c.release();
  }
}

async function requireTask(c: PoolClient, teamId: string, taskId: string): Promise<TeamTask> {
  const task = await taskRow(c, teamId, taskId);
  if (!task) throw new TeamStoreRefusal('task_not_found', `no task ${taskId}`);
  return task;
}

async function requireMember(c: PoolClient, teamId: string, memberId: string): Promise<void> {
  const { rowCount } = await c.query(`SELECT 1 FROM team_members WHERE team_id = $1 AND member_id = $2`, [teamId, memberId]);
  if (!rowCount) throw new TeamStoreRefusal('member_not_found', `no member ${memberId} in team ${teamId}`);
}

export async function createTask(
  pool: Pool,
  teamId: string,
  actor: Actor,
  task: { taskId: string; title: string; description?: string; owner?: string; replacesTaskId?: string },
) {
  return commit(pool, teamId, actor, 'task_create', async ({ c, generation, revision }) => {
    const existing = await taskRow(c, teamId, task.taskId);
    if (existing) return { result: existing };
    if (task.owner) await requireMember(c, teamId, task.owner);
    if (task.replacesTaskId !== undefined) {
      // The Coordinator replaces failed work (its scope moves to the replacement); everything else has its own path.
      const replaced = await requireTask(c, teamId, task.replacesTaskId);
      if (replaced.status !== 'failed' || replaced.taskId === task.taskId) {
        throw new TeamStoreRefusal('task_not_replaceable', `task ${task.replacesTaskId} is ${replaced.status}: only a failed task is replaced`);
      }
    }
    await c.query(
      `INSERT INTO team_tasks (team_id, task_id, title, description, owner, status, replaces_task_id, generation, updated_revision)
       VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8)`,
      [teamId, task.taskId, task.title, task.description ?? '', task.owner ?? null, task.replacesTaskId ?? null, generation, revision],
    );
    return { result: (await taskRow(c, teamId, task.taskId))!, fact: { kind: 'task_created', taskId: task.taskId, detail: { owner: task.owner } } };
  });
}

export async function assignTask(pool: Pool, teamId: string, actor: Actor, taskId: string, owner: string) {
  return commit(pool, teamId, actor, 'task_assign', async ({ c, revision }) => {
    const task = await requireTask(c, teamId, taskId);
    await requireMember(c, teamId, owner);
    if (task.status !== 'pending') throw new TeamStoreRefusal('task_not_pending', `task ${taskId} is ${task.status}; only a pending task is assigned`);
    if (task.owner === owner) return { result: task };
    await c.query(`UPDATE team_tasks SET owner = $3, updated_revision = $4 WHERE team_id = $1 AND task_id = $2`, [teamId, taskId, owner, revision]);
    return { result: { ...task, owner }, fact: { kind: 'task_assigned', taskId, detail: { owner } } };
  });
}

export async function updateTask(pool: Pool, teamId: string, actor: Actor, taskId: string, change: { title?: string; description?: string }) {
  return commit(pool, teamId, actor, 'task_update', async ({ c, revision }) => {
    const task = await requireTask(c, teamId, taskId);
    if (task.status !== 'pending' && task.status !== 'in_progress') throw new TeamStoreRefusal('task_closed', `task ${taskId} is ${task.status}`);
    const title = change.title ?? task.title;
    const description = change.description ?? task.description;
    if (title === task.title && description === task.description) return { result: task };
    await c.query(`UPDATE team_tasks SET title = $3, description = $4, updated_revision = $5 WHERE team_id = $1 AND task_id = $2`, [
      teamId,
      taskId,
      title,
      description,
      revision,
    ]);
    return { result: { ...task, title, description }, fact: { kind: 'task_updated', taskId } };
  });
}

/**
 * The Coordinator approves the plan: assigned tasks may start. A fact once per activation (a repeat, or an approval
 * after continue-as-new, changes nothing).
 */
export async function approvePlan(pool: Pool, teamId: string, actor: Actor) {
  return commit(pool, teamId, actor, 'plan_approve', async ({ c }) => {
    const { rows } = await c.query(
      `SELECT 1 FROM team_facts WHERE team_id = $1 AND kind = 'plan_approved'
         AND revision > COALESCE((SELECT max(revision) FROM team_facts WHERE team_id = $1 AND kind = 'activated'), 0)`,
      [teamId],
    );
    if (rows[0]) return { result: { approved: true, already: true } };
    return { result: { approved: true, already: false }, fact: { kind: 'plan_approved' } };
  });
}

/**
 * A task execution began (system: the workflow started the Member's work). `owner`, when given, must be the task's
 * owner on the board (an execution never starts for an owner the task has since moved away from). A handoff's
 * replacement starts only once its receipt is released: while the old execution may still run, it is refused.
 * `handingOver` marks the task's dispatch in flight (a fence waits for it) until `dispatchEnded`.
 */
export async function startTask(pool: Pool, teamId: string, taskId: string, executionId: string, owner?: string, options: { handingOver?: boolean } = {}) {
  const inFlight = options.handingOver ? 'now()' : 'NULL';
  return commit(pool, teamId, { kind: 'system' }, 'task_start', async ({ c, revision }) => {
    const task = await requireTask(c, teamId, taskId);
    // An execution fenced before it started (a pause, archive or reassign met its dispatch) never starts, also when
    // a pause left its task pending for the same owner: that starts again under a new execution.
    const fenced = await c.query(`SELECT receipt_id FROM team_handoff_receipts WHERE team_id = $1 AND old_task_id = $2 AND execution_id = $3`, [
      teamId,
      taskId,
      executionId,
    ]);
    if (fenced.rows[0])
      throw new TeamStoreRefusal(
        'task_not_startable',
        `execution ${executionId} of task ${taskId} was stopped by ${fenced.rows[0].receipt_id} before it started`,
      );
    if (task.status === 'in_progress') {
      if (task.executionId !== undefined && task.executionId !== executionId)
        throw new TeamStoreRefusal('task_not_startable', `task ${taskId} runs under execution ${task.executionId}`);
      // A retried dispatch: in flight again until the session has the task.
      await c.query(`UPDATE team_tasks SET dispatching_since = ${inFlight} WHERE team_id = $1 AND task_id = $2`, [teamId, taskId]);
      return { result: task };
    }
    if (task.status !== 'pending' || !task.owner)
      throw new TeamStoreRefusal('task_not_startable', `task ${taskId} is ${task.status}${task.owner ? '' : ' and has no owner'}`);
    if (owner !== undefined && owner !== task.owner) throw new TeamStoreRefusal('task_not_startable', `task ${taskId} is ${task.owner}'s now, not ${owner}'s`);
    const blocking = await c.query(`SELECT receipt_id, state FROM team_handoff_receipts WHERE team_id = $1 AND new_task_id = $2 AND state <> 'released'`, [
      teamId,
      taskId,
    ]);
    if (blocking.rows[0]) {
      const { receipt_id: receiptId, state } = blocking.rows[0];
      throw new TeamStoreRefusal(
        'replacement_blocked',
        `task ${taskId} replaces fenced work: it starts once handoff ${receiptId} is released (it is ${state})`,
      );
    }
    await c.query(
      `UPDATE team_tasks SET status = 'in_progress', updated_revision = $3, execution_id = $4, dispatching_since = ${inFlight} WHERE team_id = $1 AND task_id = $2`,
      [teamId, taskId, revision, executionId],
    );
    return { result: { ...task, status: 'in_progress' as const }, fact: { kind: 'task_started', taskId, detail: { executionId } } };
  });
}

/** The execution's dispatch is over (the session has the task, or the hand-over gave up): a fence waits no more. */
export async function dispatchEnded(pool: Pool, teamId: string, taskId: string, executionId: string): Promise<void> {
  await pool.query(`UPDATE team_tasks SET dispatching_since = NULL WHERE team_id = $1 AND task_id = $2 AND execution_id = $3`, [teamId, taskId, executionId]);
}

/**
 * A fence met its execution's dispatch handing the task to the session (a fault of timing, not a refusal: the fence
 * is tried again). A mark older than this is a dispatch presumed lost and is fenced through.
 */
export class DispatchInFlight extends Error {
  static readonly PRESUMED_LOST_MS = 60_000;
  constructor(taskId: string, executionId: string) {
    super(`execution ${executionId} of task ${taskId} is handing the task to its session`);
    this.name = 'DispatchInFlight';
  }
}

/**
 * Evidence: the owner's execution delivered the task. Only a Member's execution may write it (a Coordinator
 * turn is refused at the boundary), only for a task it owns and that is in progress; a retry is idempotent.
 */
export async function recordTaskOutput(
  pool: Pool,
  teamId: string,
  actor: Actor,
  output: { taskId: string; outputId: string; summary: string; commitSha?: string },
) {
  return commit(pool, teamId, actor, 'task_output', async ({ c, generation, revision }) => {
    if (actor.kind !== 'member') throw new TeamStoreRefusal('tool_not_allowed', 'only a member execution writes task output');
    const task = await requireTask(c, teamId, output.taskId);
    if (task.status === 'completed' && task.outputId === output.outputId) return { result: task };
    if (task.owner !== actor.memberId) throw new TeamStoreRefusal('task_not_owned', `task ${output.taskId} is owned by ${task.owner ?? 'nobody'}`);
    if (task.status !== 'in_progress') throw new TeamStoreRefusal('task_not_in_progress', `task ${output.taskId} is ${task.status}`);
    refuseOtherExecution(task, actor);
    await c.query(
      `INSERT INTO team_task_outputs (output_id, team_id, task_id, generation, execution_id, summary, commit_sha)
       VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (team_id, output_id) DO NOTHING`,
      [output.outputId, teamId, output.taskId, generation, actor.executionId, output.summary, output.commitSha ?? null],
    );
    await c.query(`UPDATE team_tasks SET status = 'completed', output_id = $3, updated_revision = $4 WHERE team_id = $1 AND task_id = $2`, [
      teamId,
      output.taskId,
      output.outputId,
      revision,
    ]);
    return {
      result: { ...task, status: 'completed' as const, outputId: output.outputId },
      fact: { kind: 'task_output', taskId: output.taskId, detail: { outputId: output.outputId, executionId: actor.executionId } },
    };
  });
}

/** A Member's execution writes only the task it was started under (a paused and restarted task has a new one). */
function refuseOtherExecution(task: TeamTask, actor: Actor): void {
  if (actor.kind === 'member' && task.executionId !== undefined && actor.executionId !== task.executionId) {
    throw new TeamStoreRefusal('task_not_in_progress', `task ${task.taskId} is being worked by execution ${task.executionId}, not ${actor.executionId}`);
  }
}

export async function failTask(pool: Pool, teamId: string, actor: Actor, taskId: string, reason: string, failure?: TaskFailure) {
  return commit(pool, teamId, actor, 'task_fail', async ({ c, revision }) => {
    const task = await requireTask(c, teamId, taskId);
    if (task.status === 'failed') return { result: task };
    if (actor.kind === 'member' && task.owner !== actor.memberId) throw new TeamStoreRefusal('task_not_owned', `task ${taskId} is owned by ${task.owner}`);
    if (task.status !== 'in_progress' && task.status !== 'pending') throw new TeamStoreRefusal('task_closed', `task ${taskId} is ${task.status}`);
    refuseOtherExecution(task, actor);
    await c.query(`UPDATE team_tasks SET status = 'failed', updated_revision = $3, failure = $4 WHERE team_id = $1 AND task_id = $2`, [
      teamId,
      taskId,
      revision,
      failure ?? null,
    ]);
    return {
      result: { ...task, status: 'failed' as const, failure },
      fact: { kind: 'task_failed', taskId, detail: { reason, ...(failure ? { failure } : {}) } },
    };
  });
}

/**
 * A Member's message to the Coordinator (invariant 16): the exact current task it owns and is working on — in
 * progress, owned by the Member, and its current execution the one the message is attributed to — and a purpose
 * from the list; anything else is refused before a row is written, so nothing wakes. A retry of the same message
 * id finds the accepted row (and the revision of its fact) and changes nothing.
 */
export async function postInboxMessage(
  pool: Pool,
  teamId: string,
  actor: Actor,
  message: { messageId: string; relatedTaskId?: unknown; purpose?: unknown; text: string },
): Promise<{ result: { messageId: string; revision: number }; revision: number }> {
  if (actor.kind !== 'member') throw new TeamStoreRefusal('tool_not_allowed', storeRefusal(actor, 'inbox_message') ?? 'only members post to the inbox');
  if (typeof message.purpose !== 'string' || !(MEMBER_MESSAGE_PURPOSES as readonly string[]).includes(message.purpose)) {
    throw new TeamStoreRefusal('message_purpose_invalid', `purpose must be one of ${MEMBER_MESSAGE_PURPOSES.join(', ')}`);
  }
  if (typeof message.relatedTaskId !== 'string' || message.relatedTaskId === '') {
    throw new TeamStoreRefusal('related_task_required', 'related_task_id must name the task you are working on');
  }
  const relatedTaskId = message.relatedTaskId;
  return commit(pool, teamId, actor, 'inbox_message', async ({ c, revision }) => {
    const accepted = await c.query(
      `SELECT f.revision FROM team_inbox i LEFT JOIN team_facts f
         ON f.team_id = i.team_id AND f.kind = 'inbox_message' AND f.detail->>'messageId' = i.message_id
       WHERE i.team_id = $1 AND i.message_id = $2 AND i.from_member = $3`,
      [teamId, message.messageId, actor.memberId],
    );
    if (accepted.rows[0]) return { result: { messageId: message.messageId, revision: Number(accepted.rows[0].revision ?? 0) } };
    const task = await taskRow(c, teamId, relatedTaskId, false);
    if (!task) throw new TeamStoreRefusal('related_task_unknown', `no task ${relatedTaskId}`);
    if (task.owner !== actor.memberId || task.status !== 'in_progress') {
      throw new TeamStoreRefusal(
        'related_task_not_current',
        `task ${relatedTaskId} is ${task.status}, owned by ${task.owner ?? 'nobody'}: not your current task`,
      );
    }
    const current = await currentExecutionIn(c, teamId, relatedTaskId);
    if (current !== actor.executionId) {
      throw new TeamStoreRefusal(
        'related_task_not_current',
        `task ${relatedTaskId} runs as execution ${current ?? '(none)'}, not as yours (${actor.executionId})`,
      );
    }
    await c.query(`INSERT INTO team_inbox (team_id, message_id, from_member, related_task_id, purpose, text) VALUES ($1, $2, $3, $4, $5, $6)`, [
      teamId,
      message.messageId,
      actor.memberId,
      relatedTaskId,
      message.purpose,
      message.text,
    ]);
    return {
      result: { messageId: message.messageId, revision },
      fact: {
        kind: 'inbox_message',
        taskId: relatedTaskId,
        detail: { messageId: message.messageId, purpose: message.purpose, executionId: actor.executionId },
      },
    };
  });
}

/** The execution a task runs as now: the one its last start recorded (`startTask`), if any. */
async function currentExecutionIn(c: Pool | PoolClient, teamId: string, taskId: string): Promise<string | undefined> {
  const { rows } = await c.query(
    `SELECT detail->>'executionId' AS execution_id FROM team_facts WHERE team_id = $1 AND task_id = $2 AND kind = 'task_started' ORDER BY revision DESC LIMIT 1`,
    [teamId, taskId],
  );
  return rows[0]?.execution_id ?? undefined;
}

/**
 * A Member's current execution of a task: the task is in progress, owned by the Member, and its last start
 * recorded this execution. Undefined otherwise (what the Member's message would be refused for).
 */
export async function currentExecution(pool: Pool, teamId: string, memberId: string, taskId: string): Promise<string | undefined> {
  const { rows } = await pool.query(`SELECT owner, status FROM team_tasks WHERE team_id = $1 AND task_id = $2`, [teamId, taskId]);
  if (rows[0]?.owner !== memberId || rows[0]?.status !== 'in_progress') return undefined;
  return currentExecutionIn(pool, teamId, taskId);
}

/** Whether `sessionId` is the session of `memberId` in `teamId` (what a Member's session says it is, checked). */
export async function isMemberSession(pool: Pool, teamId: string, memberId: string, sessionId: string): Promise<boolean> {
  const { rowCount } = await pool.query(`SELECT 1 FROM team_members WHERE team_id = $1 AND member_id = $2 AND session_id = $3`, [teamId, memberId, sessionId]);
  return (rowCount ?? 0) > 0;
}

/**
 * The Coordinator reads its Inbox as of a board revision: every unread message whose fact is at or below it is
 * marked read at that revision, by this read (`readBy`, its tool call), and returned (no fact: reading changes no
 * work). A message committed after the revision stays unread, for the next read. A retry of the same read gets what
 * it took the first time again (the first attempt's result may have been lost).
 */
export async function readInbox(pool: Pool, teamId: string, upToRevision: number, readBy: string) {
  const { rows } = await pool.query(
    `UPDATE team_inbox i SET read_revision = COALESCE(i.read_revision, $2), read_by = $3 FROM team_facts f
     WHERE i.team_id = $1 AND (i.read_revision IS NULL OR i.read_by = $3)
       AND f.team_id = i.team_id AND f.kind = 'inbox_message' AND f.detail->>'messageId' = i.message_id AND f.revision <= $2
     RETURNING i.message_id, i.from_member, i.related_task_id, i.purpose, i.text, i.created_at, f.actor`,
    [teamId, upToRevision, readBy],
  );
  return rows
    .sort((a, b) => Number(a.created_at) - Number(b.created_at))
    .map((r) => ({ messageId: r.message_id, from: r.from_member, actor: r.actor, relatedTaskId: r.related_task_id, purpose: r.purpose, text: r.text }));
}

export async function recordUserEvent(pool: Pool, teamId: string, event: { eventId: string; kind: string; taskId?: string; text?: string }) {
  return commit(pool, teamId, { kind: 'user', eventId: event.eventId }, 'user_event', async ({ c }) => {
    const inserted = await c.query(`INSERT INTO team_user_events (team_id, event_id, kind, task_id, text) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, [
      teamId,
      event.eventId,
      event.kind,
      event.taskId ?? null,
      event.text ?? '',
    ]);
    return {
      result: { eventId: event.eventId },
      fact: inserted.rowCount ? { kind: 'user_event', taskId: event.taskId, detail: { eventId: event.eventId, kind: event.kind } } : undefined,
    };
  });
}

/** A task as views print it (JSON-safe: absent fields are null). */
export function taskView(t: TeamTask) {
  return {
    id: t.taskId,
    title: t.title,
    owner: t.owner ?? null,
    status: t.status,
    outputId: t.outputId ?? null,
    replacesTaskId: t.replacesTaskId ?? null,
    cancel: t.cancel ?? null,
    failure: t.failure ?? null,
  };
}

/** The whole board at one revision (one snapshot transaction). */
export async function readBoard(pool: Pool, teamId: string): Promise<BoardSnapshot> {
  return withTransaction(pool, async (c) => {
    // One snapshot for the run row and every table read after it.
    await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
    return boardIn(c, teamId);
  });
}

/** The board as the transaction `c` sees it (a snapshot, or a writer's view under the run row's lock). */
async function boardIn(c: PoolClient, teamId: string): Promise<BoardSnapshot> {
  const run = await c.query(`SELECT generation, work_revision FROM team_runs WHERE team_id = $1`, [teamId]);
  if (run.rows.length === 0) throw new TeamStoreRefusal('team_not_found', `no team run ${teamId}`);
  const tasks = await c.query(`SELECT * FROM team_tasks WHERE team_id = $1 ORDER BY created_at, task_id`, [teamId]);
  const outputs = await c.query(`SELECT * FROM team_task_outputs WHERE team_id = $1 ORDER BY created_at`, [teamId]);
  const events = await c.query(`SELECT event_id, kind, task_id FROM team_user_events WHERE team_id = $1 ORDER BY created_at`, [teamId]);
  const handoffs = await c.query(`SELECT old_task_id, new_task_id, state, resolution FROM team_handoff_receipts WHERE team_id = $1 ORDER BY created_at`, [
    teamId,
  ]);
  const unread = await c.query(`SELECT count(*)::int AS n FROM team_inbox WHERE team_id = $1 AND read_revision IS NULL`, [teamId]);
  return {
    teamId,
    generation: Number(run.rows[0].generation),
    workRevision: Number(run.rows[0].work_revision),
    tasks: tasks.rows.map(toTask),
    outputs: outputs.rows.map((r) => ({
      outputId: r.output_id,
      taskId: r.task_id,
      generation: Number(r.generation),
      executionId: r.execution_id,
      summary: r.summary,
      commitSha: r.commit_sha ?? undefined,
    })),
    userEvents: events.rows.map((r) => ({ id: r.event_id, teamId, kind: r.kind, taskId: r.task_id ?? undefined })),
    handoffs: handoffs.rows.map((r) => {
      const action = r.resolution?.action;
      return {
        oldTaskId: r.old_task_id,
        ...(r.new_task_id ? { newTaskId: r.new_task_id } : {}),
        state: r.state,
        ...((HANDOFF_RESOLUTIONS as readonly string[]).includes(action) ? { resolution: action as HandoffResolution } : {}),
      };
    }),
    inboxUnread: Number(unread.rows[0].n),
  };
}

/** The board as the closure validator reads it, assessed at the board's own revision. */
export function closureInputOf(board: BoardSnapshot, turnsRunning: number): ClosureBoard {
  return {
    teamId: board.teamId,
    generation: board.generation,
    workRevision: board.workRevision,
    assessedRevision: board.workRevision,
    tasks: board.tasks.map((t) => ({
      id: t.taskId,
      status: t.status,
      outputId: t.outputId,
      replacesTaskId: t.replacesTaskId,
      cancel: t.cancel,
    })),
    outputs: board.outputs.map((o) => ({ id: o.outputId, taskId: o.taskId, generation: o.generation })),
    handoffs: board.handoffs,
    userEvents: board.userEvents.map((e) => ({ id: e.id, teamId: e.teamId, kind: e.kind, taskId: e.taskId ?? '' })),
    blockers: { inboxUnread: board.inboxUnread, turnsRunning },
  };
}

/** What a certificate records of the run's code: the branch, the commit it was built at, and how. */
export interface TeamResultRecord {
  /** `orchard/team/<teamId>/result`. */
  readonly branch: string;
  readonly head: string;
  /** The protected branch's commit the result was built from. */
  readonly base: string;
  readonly protectedBranch: string;
  /** Each evidence output and its commit, in the order they were integrated. */
  readonly commits: readonly { readonly taskId: string; readonly outputId: string; readonly commitSha: string | null; readonly how: string }[];
}

export interface RunCompletionCertificate {
  readonly certificateId: string;
  readonly teamId: string;
  readonly outcome: 'delivered';
  readonly generation: number;
  readonly workRevision: number;
  readonly evidence: { readonly taskIds: readonly string[]; readonly outputIds: readonly string[] };
  readonly resolutions: ClosureResult['evidence']['resolutions'];
  readonly validatorVersion: string;
  readonly issuedAt: string;
  readonly summary: string;
  /** The run's result branch and the commit it was built at (activities/git/team-result.ts); absent on older certificates. */
  readonly result?: TeamResultRecord;
  /** The passing run of the verify command it binds, or why the result was not verified; absent on older certificates. */
  readonly verification?: CertificateVerification;
}

/** The certificate of a delivered closure of `board` (the validator's evidence, at the board's generation and revision). */
export function deliveredCertificate(
  board: Pick<BoardSnapshot, 'teamId' | 'generation' | 'workRevision'>,
  closure: ClosureResult,
  fields: { certificateId: string; summary: string; issuedAt?: string; result?: TeamResultRecord; verification?: CertificateVerification },
): RunCompletionCertificate {
  return {
    certificateId: fields.certificateId,
    teamId: board.teamId,
    outcome: 'delivered',
    generation: board.generation,
    workRevision: board.workRevision,
    evidence: { taskIds: closure.evidence.taskIds, outputIds: closure.evidence.outputIds },
    resolutions: closure.evidence.resolutions,
    validatorVersion: closure.validatorVersion,
    issuedAt: fields.issuedAt ?? new Date().toISOString(),
    summary: fields.summary,
    ...(fields.result ? { result: fields.result } : {}),
    ...(fields.verification ? { verification: fields.verification } : {}),
  };
}

/**
 * Persists the certificate of a delivered closure, once per (team, generation, revision): a retry (or a lost
 * response replayed) gets the stored one back. Refused when the board moved since it was assessed.
 */
export async function issueCertificate(pool: Pool, teamId: string, actor: Actor, certificate: RunCompletionCertificate) {
  return commit(pool, teamId, actor, 'certificate', async ({ c, generation, revision }) => {
    // One certificate per generation: once issued, it is the answer to every later request of that generation
    // (a retry after a lost response, or a request after later facts such as a merge).
    const existing = await c.query(`SELECT certificate FROM team_certificates WHERE team_id = $1 AND generation = $2 ORDER BY work_revision LIMIT 1`, [
      teamId,
      certificate.generation,
    ]);
    if (existing.rows[0]) return { result: existing.rows[0].certificate as RunCompletionCertificate };
    if (certificate.generation !== generation || certificate.workRevision !== revision - 1) {
      throw new TeamStoreRefusal(
        'stale_evidence',
        `the board moved (generation ${generation}, revision ${revision - 1}) since it was assessed at revision ${certificate.workRevision}`,
      );
    }
    // The store certifies only the closure of the board it holds (under the run row's lock: no write can slip in),
    // whoever asks: the certificate must be the validator's verdict on this board, evidence and all. Running
    // turns are the caller's to check (the store does not see them).
    const closure = validateClosure(closureInputOf(await boardIn(c, teamId), 0));
    if (closure.outcome !== 'delivered') {
      throw new TeamStoreRefusal('completion_refused', `the run is ${closure.outcome}: ${closure.reasons.map((r) => r.code).join(', ')}`);
    }
    const claimed = {
      taskIds: certificate.evidence.taskIds,
      outputIds: certificate.evidence.outputIds,
      resolutions: certificate.resolutions,
      validatorVersion: certificate.validatorVersion,
    };
    const actual = {
      taskIds: closure.evidence.taskIds,
      outputIds: closure.evidence.outputIds,
      resolutions: closure.evidence.resolutions,
      validatorVersion: closure.validatorVersion,
    };
    if (JSON.stringify(claimed) !== JSON.stringify(actual)) {
      throw new TeamStoreRefusal('completion_refused', "the certificate's evidence is not the board's closure");
    }
    // A run with a verify command is delivered only with a passing run of it on the result (team-verify.ts).
    const unverified = await verificationProblem(c, teamId, certificate);
    if (unverified) throw new TeamStoreRefusal('verification_failed', unverified);
    return { result: await insertCertificate(c, teamId, certificate) };
  });
}

/**
 * Stores a generation's certificate, or answers the one it already has. The database decides (migration 013: unique
 * on team and generation), not only the check above it: two writers that both passed their checks leave one
 * certificate, and each gets that one. The check under the run row's lock makes a conflict rare (a writer that
 * bypassed the lock, a schema that lost it); this keeps it harmless.
 */
async function insertCertificate(c: PoolClient, teamId: string, certificate: RunCompletionCertificate): Promise<RunCompletionCertificate> {
  const inserted = await c.query(
    `INSERT INTO team_certificates (team_id, generation, work_revision, certificate) VALUES ($1, $2, $3, $4)
     ON CONFLICT (team_id, generation) WHERE NOT legacy_extra DO NOTHING`,
    [teamId, certificate.generation, certificate.workRevision, JSON.stringify(certificate)],
  );
  if (inserted.rowCount === 1) return certificate;
  // READ COMMITTED: this statement sees the row the conflicting writer committed.
  const { rows } = await c.query(`SELECT certificate FROM team_certificates WHERE team_id = $1 AND generation = $2 AND NOT legacy_extra`, [
    teamId,
    certificate.generation,
  ]);
  return rows[0].certificate as RunCompletionCertificate;
}

export const __testing = { commit, insertCertificate };

// Handoff (invariant 14) ----------------------------------------------------------------------------------------

function toReceipt(r: any): HandoffReceipt {
  return {
    receiptId: r.receipt_id,
    teamId: r.team_id,
    oldTaskId: r.old_task_id,
    newTaskId: r.new_task_id ?? undefined,
    owner: r.owner,
    sessionId: r.session_id,
    executionId: r.execution_id,
    lease: r.lease ?? undefined,
    generation: Number(r.generation),
    state: r.state,
    reason: r.reason,
    sloMissed: r.slo_missed,
    resolution: r.resolution ?? undefined,
  };
}

/**
 * The fence (one transaction): freezes the old task (cancelled by the user, with the structured reason and the
 * user event), creates the pending replacement for the new owner (a reassign; a user's cancel has none), bumps
 * the old execution's worktree lease generation — so every later mutating call of the old execution
 * revalidates stale and is refused — and writes the receipt bound to old task, owner, session, execution, lease
 * and generation. All before anyone asks the old execution to yield. A retry finds the receipt and changes
 * nothing.
 */
export async function fenceHandoff(
  pool: Pool,
  teamId: string,
  input: {
    eventId: string;
    oldTaskId: string;
    kind: HandoffKind;
    reason: string;
    sessionId: string;
    executionId: string;
    namespace: string;
    /** A reassign's replacement and its owner. */
    replacement?: { taskId: string; owner: string };
  },
): Promise<{ result: HandoffReceipt; revision: number }> {
  return commit(pool, teamId, { kind: 'user', eventId: input.eventId }, 'handoff', async ({ c, generation, revision }) => {
    // One fence per execution: a paused task is fenced again under its next execution, with a receipt of its own.
    const existing = await c.query(`SELECT * FROM team_handoff_receipts WHERE team_id = $1 AND old_task_id = $2 AND execution_id = $3`, [
      teamId,
      input.oldTaskId,
      input.executionId,
    ]);
    if (existing.rows[0]) {
      // A retry of this fence (same user event) finds its receipt; another user's cancel/reassign of the same
      // execution lost the race to it, and is told so instead of being handed the winner's receipt.
      const receipt = toReceipt(existing.rows[0]);
      if (receipt.reason.userEventId === input.eventId) return { result: receipt };
      throw new TeamStoreRefusal(
        'task_not_in_progress',
        `task ${input.oldTaskId} was already handed off (${receipt.reason.kind}, receipt ${receipt.receiptId})`,
      );
    }
    const task = await requireTask(c, teamId, input.oldTaskId);
    // Running work, or work the run has started whose dispatch has not yet marked it in progress (still pending, under
    // no execution): fenced now, that execution's start is refused.
    const starting = task.status === 'pending' && task.executionId === undefined;
    if ((task.status !== 'in_progress' && !starting) || !task.owner)
      throw new TeamStoreRefusal('task_not_in_progress', `task ${input.oldTaskId} is ${task.status}: only running work is handed off`);
    if (task.executionId !== undefined && task.executionId !== input.executionId)
      throw new TeamStoreRefusal('task_not_in_progress', `task ${input.oldTaskId} runs under execution ${task.executionId}, not ${input.executionId}`);
    const inFlight = await c.query(`SELECT 1 FROM team_tasks WHERE team_id = $1 AND task_id = $2 AND dispatching_since > now() - make_interval(secs => $3)`, [
      teamId,
      input.oldTaskId,
      DispatchInFlight.PRESUMED_LOST_MS / 1000,
    ]);
    if (inFlight.rows[0]) throw new DispatchInFlight(input.oldTaskId, input.executionId);
    const replacement = input.replacement;
    if ((input.kind === 'reassign') !== (replacement !== undefined))
      throw new TeamStoreRefusal('invalid_input', 'a reassign names its replacement; a cancel has none');
    if (replacement) {
      await requireMember(c, teamId, replacement.owner);
      if (replacement.owner === task.owner)
        throw new TeamStoreRefusal('same_owner', `task ${input.oldTaskId} is already ${task.owner}'s: a handoff goes to another member`);
    }
    const lease = await c.query(
      `SELECT worktree, holder, generation FROM worktree_leases WHERE holder = $1 || '/' || $2 || '@' || split_part(holder, '@', 2) AND state = 'held' FOR UPDATE`,
      [input.namespace, `session/${input.sessionId}`],
    );
    const fenced = lease.rows[0] ? { worktree: lease.rows[0].worktree, holder: lease.rows[0].holder, generation: Number(lease.rows[0].generation) } : undefined;
    if (fenced) {
      await c.query(`UPDATE worktree_leases SET generation = generation + 1 WHERE worktree = $1 AND generation = $2`, [fenced.worktree, fenced.generation]);
    }
    if (input.kind === 'pause') {
      // Paused, not cancelled: the task waits, pending, for the same owner (no new task state); a resume starts it again.
      await c.query(
        `UPDATE team_tasks SET status = 'pending', execution_id = NULL, dispatching_since = NULL, updated_revision = $3 WHERE team_id = $1 AND task_id = $2`,
        [teamId, input.oldTaskId, revision],
      );
    } else {
      const cancel = { by: 'user', kind: input.kind, reason: input.reason, userEventId: input.eventId };
      await c.query(`UPDATE team_tasks SET status = 'cancelled', cancel = $3, updated_revision = $4 WHERE team_id = $1 AND task_id = $2`, [
        teamId,
        input.oldTaskId,
        JSON.stringify(cancel),
        revision,
      ]);
    }
    // A pause or an archive is one user event for the whole team, cited by each of its fences.
    const whole = input.kind === 'pause' || input.kind === 'archive';
    await c.query(
      `INSERT INTO team_user_events (team_id, event_id, kind, task_id, text) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (team_id, event_id) DO NOTHING`,
      [teamId, input.eventId, input.kind, whole ? null : input.oldTaskId, input.reason],
    );
    if (replacement) {
      await c.query(
        `INSERT INTO team_tasks (team_id, task_id, title, description, owner, status, replaces_task_id, generation, updated_revision)
         VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8)`,
        [teamId, replacement.taskId, task.title, task.description, replacement.owner, input.oldTaskId, generation, revision],
      );
    }
    const receipt = await c.query(
      `INSERT INTO team_handoff_receipts (receipt_id, team_id, old_task_id, new_task_id, owner, session_id, execution_id, lease, generation, state, reason)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'requested', $10) RETURNING *`,
      [
        input.kind === 'pause' || input.kind === 'archive'
          ? `${input.kind}-${teamId}-${input.oldTaskId}-${input.executionId}`
          : `handoff-${teamId}-${input.oldTaskId}`,
        teamId,
        input.oldTaskId,
        replacement?.taskId ?? null,
        task.owner,
        input.sessionId,
        input.executionId,
        fenced ? JSON.stringify(fenced) : null,
        generation,
        JSON.stringify({ kind: input.kind, reason: input.reason, userEventId: input.eventId, newOwner: replacement?.owner }),
      ],
    );
    return {
      result: toReceipt(receipt.rows[0]),
      fact: {
        kind: 'handoff_requested',
        taskId: input.oldTaskId,
        detail: { kind: input.kind, newTaskId: replacement?.taskId, newOwner: replacement?.owner, lease: fenced },
      },
    };
  });
}

/** Moves a receipt along (requested → yielding → released, or to timeout | unknown | failed); a repeat changes nothing. */
export async function moveReceipt(
  pool: Pool,
  teamId: string,
  receiptId: string,
  to: ReceiptState,
  extra: { sloMissed?: boolean; resolution?: unknown; why?: string; onlyFrom?: readonly ReceiptState[] } = {},
): Promise<{ result: HandoffReceipt; revision: number; change?: ReceiptChange }> {
  let change: ReceiptChange | undefined;
  const moved = await commit(pool, teamId, { kind: 'system' }, 'handoff', async ({ c }) => {
    change = undefined;
    const { rows } = await c.query(`SELECT * FROM team_handoff_receipts WHERE receipt_id = $1 AND team_id = $2 FOR UPDATE`, [receiptId, teamId]);
    if (!rows[0]) throw new TeamStoreRefusal('receipt_not_found', `no handoff receipt ${receiptId}`);
    const receipt = toReceipt(rows[0]);
    // Released is final; so is failed, except for the user's resolution of it.
    const final = receipt.state === 'released' || (receipt.state === 'failed' && extra.resolution === undefined);
    const same = receipt.state === to && (extra.sloMissed === undefined || extra.sloMissed === receipt.sloMissed) && extra.resolution === undefined;
    // A conditional move (a yield's) changes nothing once the receipt has left the states it names: a yield that
    // proves quiescence after its handoff timed out releases nothing (a user's release does).
    const moved = extra.onlyFrom !== undefined && !extra.onlyFrom.includes(receipt.state);
    if (same || final || moved) return { result: receipt };
    const updated = await c.query(
      `UPDATE team_handoff_receipts SET state = $3, slo_missed = slo_missed OR $4, resolution = COALESCE($5, resolution), updated_at = now()
       WHERE receipt_id = $1 AND team_id = $2 RETURNING *, extract(epoch FROM (now() - created_at)) * 1000 AS elapsed_ms`,
      [receiptId, teamId, to, extra.sloMissed ?? false, extra.resolution === undefined ? null : JSON.stringify(extra.resolution)],
    );
    change = { from: receipt.state, elapsedMs: Number(updated.rows[0].elapsed_ms), missedSlo: extra.sloMissed === true && !receipt.sloMissed };
    return {
      result: toReceipt(updated.rows[0]),
      fact: { kind: `handoff_${to}`, taskId: receipt.oldTaskId, detail: { receiptId, sloMissed: extra.sloMissed, why: extra.why } },
    };
  });
  return change ? { ...moved, change } : moved;
}

/** What a receipt's move changed (absent when it changed nothing: a repeat, or a final receipt). */
interface ReceiptChange {
  readonly from: ReceiptState;
  /** Since the fence wrote the receipt. */
  readonly elapsedMs: number;
  /** This move recorded the SLO miss (it was not recorded before). */
  readonly missedSlo: boolean;
}

/**
 * A user cancels a task that is not running: the task leaves the run's scope, citing the user's event (so the
 * closure counts it as `user_scope_removed`). `keep_stopped` is the same for a handoff's blocked replacement.
 * Running work is cancelled through the fence instead (`fenceHandoff`, kind `cancel`). A repeat changes nothing.
 */
/**
 * A user's archive of the whole run, after its running work was fenced: every task still pending is cancelled citing
 * the one archive event, and the run is marked archived (its board takes no more writes). A retry changes nothing.
 */
export async function archiveBoard(pool: Pool, teamId: string, input: { eventId: string; reason: string }) {
  return commit(pool, teamId, { kind: 'user', eventId: input.eventId }, 'task_cancel', async ({ c, revision }) => {
    const cancel = { by: 'user' as const, kind: 'archive', reason: input.reason, userEventId: input.eventId };
    await c.query(
      `INSERT INTO team_user_events (team_id, event_id, kind, task_id, text) VALUES ($1, $2, 'archive', NULL, $3) ON CONFLICT (team_id, event_id) DO NOTHING`,
      [teamId, input.eventId, input.reason],
    );
    const { rows } = await c.query(
      `UPDATE team_tasks SET status = 'cancelled', cancel = $2, updated_revision = $3 WHERE team_id = $1 AND status = 'pending' RETURNING task_id`,
      [teamId, JSON.stringify(cancel), revision],
    );
    await c.query(`UPDATE team_runs SET archived = $2 WHERE team_id = $1`, [teamId, JSON.stringify({ eventId: input.eventId, reason: input.reason })]);
    const cancelled = rows.map((r) => r.task_id as string).sort();
    return { result: { cancelled }, fact: { kind: 'team_archived', detail: { eventId: input.eventId, cancelled } } };
  });
}

export async function cancelPendingTask(
  pool: Pool,
  teamId: string,
  input: { eventId: string; taskId: string; reason: string; kind: 'keep_stopped' | 'cancel' },
) {
  return commit(pool, teamId, { kind: 'user', eventId: input.eventId }, 'task_cancel', async ({ c, revision }) => {
    const task = await requireTask(c, teamId, input.taskId);
    if (task.status === 'cancelled' && task.cancel?.by === 'user') return { result: task };
    if (task.status !== 'pending') {
      throw new TeamStoreRefusal(
        'task_not_pending',
        `task ${input.taskId} is ${task.status}${task.status === 'in_progress' ? ': running work is cancelled through a handoff' : ''}`,
      );
    }
    const cancel = { by: 'user' as const, kind: input.kind, reason: input.reason, userEventId: input.eventId };
    await c.query(`INSERT INTO team_user_events (team_id, event_id, kind, task_id, text) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, [
      teamId,
      input.eventId,
      input.kind,
      input.taskId,
      input.reason,
    ]);
    await c.query(`UPDATE team_tasks SET status = 'cancelled', cancel = $3, updated_revision = $4 WHERE team_id = $1 AND task_id = $2`, [
      teamId,
      input.taskId,
      JSON.stringify(cancel),
      revision,
    ]);
    return { result: { ...task, status: 'cancelled' as const, cancel }, fact: { kind: 'task_cancelled', taskId: input.taskId, detail: cancel } };
  });
}

/** Whether the old execution's recorded process groups are all ended (the session's teardown verified each). */
export async function openProcessGroups(pool: Pool, lease: { worktree: string; generation: number }): Promise<number> {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM lease_process_groups WHERE worktree = $1 AND generation <= $2 AND ended_at IS NULL`, [
    lease.worktree,
    lease.generation,
  ]);
  return rows[0].n;
}
