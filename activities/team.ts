import { Context } from '@temporalio/activity';
import { CancelledFailure } from '@temporalio/common';
import { createHash } from 'node:crypto';
import type { Pool } from 'pg';
import { isErrorCode, OrchardError } from '../contract/errors';
import { orchardFailure } from '../contract/failures';
import type { SessionLiveness, TemporalPort } from '../contract/temporal-port';
import { isCoordinatorTool, MEMBER_MESSAGE_PURPOSES, type Actor } from '../workflows/team/authority';
import { excerpt } from '../workflows/session/state';
import type { CallRef } from '../contract/orchestrator-activities';
import type {
  BoardAssessment,
  CoordinatorToolEffects,
  FencedLease,
  ReceiptMove,
  Quiescence,
  ReceiptState,
  SettledAnswer,
  SettleInput,
  TeamActivities,
  TeamHostActivities,
} from '../contract/team-activities';
import { turnKeyOf } from './store/keys';
import { leaseHeldAt } from './store/leases';
import { leaseHostUnreachable } from './store/hosts';
import {
  activateTeamRun,
  assignTask,
  createTask,
  createTeamRun,
  failTask,
  readBoard,
  taskStatusOf,
  archiveBoard,
  readInbox,
  recordTaskOutput,
  startTask,
  approvePlan,
  taskView,
  TeamStoreRefusal,
  updateTask,
  cancelPendingTask,
  closureInputOf,
  fenceHandoff,
  DispatchInFlight,
  dispatchEnded,
  deliveredCertificate,
  issueCertificate,
  memberSessionOf,
  moveReceipt,
  openProcessGroups,
  type RunCompletionCertificate,
  type BoardSnapshot,
  type TeamResultRecord,
} from './store/team';
import { validateClosure } from '../workflows/team/closure';
import { DEFAULT_VERIFY_TIMEOUT_MS, type CertificateVerification, type VerificationView } from '../contract/messages';
import { verifyResult, type VerifierDeps } from './git/verify-result';
import { certifiedVerification, findVerification, recordVerification, verificationView, verifySpecOf, type StoredVerification } from './store/team-verify';
import { boardOutcomeFacts } from '../workflows/team/outcome';
import { metrics } from './metrics';
import { parseLeaseHolder, sessionBranch } from '../contract/ids';
import { memberSessionIdAs } from '../contract/member-session';
import { appendEntry, findAssistantMessage } from './store/transcript';
import { buildResult, deleteBranch, memberHead, moveProtectedBranch, planMerge, resultBranchOf, setBranch, TeamGitRefusal } from './git/team-result';
import {
  certificateById,
  completeTeamMerge,
  findCertificate,
  latestCertificate,
  mergeResultOf,
  readTeamMerge,
  savePlannedMerge,
  teamRunInfo,
} from './store/team-result';

/**
 * A team's side effects (issue 9): opening the run in Postgres, executing the Coordinator's tool calls against
 * the board (attributed to its turn, so the store boundary applies), dispatching tasks to Members' sessions and
 * settling their executions as evidence attributed to the Member. Tool arguments and results stay in Postgres:
 * the workflow gets revisions and the effects it must act on.
 */
export interface TeamActivityDeps {
  pool: Pool;
  /** Temporal, as the worker provides it (sessions of Members, their liveness and cancels, the run's close). */
  temporal: () => TemporalPort;
  /** The Temporal namespace (lease holders are namespaced). */
  namespace?: string;
  /** Test hooks that widen race windows (never set in production). */
  hooks?: TeamActivityHooks;
  /** Where and how the team's verify command runs: the team host's activities have it (the shared queue's do not). */
  verifier?: VerifierDeps;
}

export interface TeamActivityHooks {
  /**
   * Awaited after a settle committed and read its candidate, before it answers: holding one settle's answer while
   * another's goes through delivers them to the workflow out of commit order.
   */
  afterSettle?: (input: { teamId: string; taskId: string; memberId: string }, settled: SettledAnswer) => Promise<void>;
  /** Rewrites Temporal's answer about an old execution's session during a handoff (stands for a cluster that does not answer). */
  sessionLiveness?: (sessionId: string, answer: SessionLiveness) => SessionLiveness;
  /** Awaited as a yield begins; what it throws, the yield throws (stands for an old session that refuses to stop). */
  beforeYield?: (input: { sessionId: string; reason: string }) => Promise<void>;
  /** Awaited as a dispatch is about to mark its task in progress (holds it while a pause or an archive fences). */
  beforeStartTask?: (input: { teamId: string; taskId: string; executionId: string }) => Promise<void>;
  /** Awaited as a dispatch is about to create the Member's session (holds it while a test stops the worker). */
  beforeCreateSession?: (input: { teamId: string; taskId: string; sessionId: string }) => Promise<void>;
  /** Awaited once a dispatch has ended, started or refused (its in-flight mark cleared). */
  afterDispatch?: (input: { teamId: string; taskId: string; executionId: string }) => Promise<void>;
  /** Awaited as an archive's board write begins, after its fences. */
  beforeArchiveBoard?: (input: { teamId: string }) => Promise<void>;
  /**
   * Awaited as a fence begins, before its transaction (holds one while a test stops the workers, so that its answer
   * reaches the run's history beside another event's, in one workflow task).
   */
  beforeFence?: (input: { teamId: string; oldTaskId: string; kind: string }) => Promise<void>;
  /** Awaited before a receipt moves; what it throws, the move throws (stands for a store write that fails for good). */
  beforeMoveReceipt?: (input: { teamId: string; receiptId: string; to: ReceiptState }) => Promise<void>;
}

type DispatchInput = Parameters<TeamActivities['dispatchTask']>[0];

/** The first run id of the execution chain that held the lease, when the holder says. */
const chainOf = (lease: FencedLease | undefined): string | undefined => (lease?.holder ? parseLeaseHolder(lease.holder)?.firstRunId : undefined);

/** A refusal of the store becomes a typed, non-retryable activity failure (a retry would be refused again). */
function asFailure(err: unknown): unknown {
  return err instanceof TeamStoreRefusal ? orchardFailure(isErrorCode(err.code) ? err.code : 'invalid_input', err.message) : err;
}

/** How long one fence attempt waits for a dispatch of the fenced execution to hand its task over. */
const FENCE_DISPATCH_WAIT_MS = 20_000;

/** How long a yield waits for the old runtime to be quiescent before answering that it is not (unknown). */
const YIELD_WAIT_MS = 60_000;
/** While the old chain still runs, how often its yield checks anyway (the close itself is waited for as an event). */
const CLOSE_BACKSTOP_MS = 5_000;

function boardView(board: BoardSnapshot) {
  return {
    workRevision: board.workRevision,
    generation: board.generation,
    tasks: board.tasks.map(taskView),
    inboxUnread: board.inboxUnread,
  };
}

/** A refused completion whose verify command failed: the run it refers to goes to the workflow (status, outcome). */
class VerificationRefusal extends TeamStoreRefusal {
  constructor(readonly view: VerificationView) {
    const how = view.timedOut ? 'did not finish in time' : `exited ${view.exitCode ?? 'by a signal'}`;
    super(
      'verification_failed',
      `the verify command \`${view.command}\` ${how} after ${(view.durationMs / 1000).toFixed(1)} s on the result ${view.resultHead.slice(0, 12)} ` +
        `(verification ${view.verificationId}; its output is stored). Output ends:\n${view.excerpt}\nHave a member fix it, then call org_run_complete again`,
    );
    this.name = 'VerificationRefusal';
  }
}

/** The running activity's cancellation, when there is one (the functions are also called directly in tests). */
function activitySignal(): AbortSignal | undefined {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return undefined;
  }
}

/** Runs `spec` on `head` (one run per verification id: a retried attempt gets the stored run back) and stores it. */
async function runStoredVerification(
  pool: Pool,
  verifier: VerifierDeps | undefined,
  v: { verificationId: string; teamId: string; purpose: 'completion' | 'recheck'; certificateId?: string; repo: string; head: string; branch: string },
  spec: { command: string; timeoutMs: number },
): Promise<StoredVerification> {
  const stored = await findVerification(pool, v.verificationId);
  if (stored) return stored;
  // Only the team host's activities can run it (coordinatorTool runs there since 'team-git-on-host'): elsewhere a
  // fault, retried until the host's worker takes it.
  if (!verifier) throw new Error(`verification ${v.verificationId} needs the team host's worker`);
  const ran = await verifyResult(verifier, {
    repo: v.repo,
    head: v.head,
    branch: v.branch,
    command: spec.command,
    timeoutMs: spec.timeoutMs,
    scratchId: createHash('sha256').update(v.verificationId).digest('hex').slice(0, 20),
    signal: activitySignal(),
  });
  return recordVerification(pool, { ...ran, verificationId: v.verificationId, teamId: v.teamId, purpose: v.purpose, certificateId: v.certificateId });
}

export function createTeamActivities(deps: TeamActivityDeps): TeamActivities {
  async function argsOf(ref: CallRef): Promise<Record<string, unknown>> {
    const message = await findAssistantMessage(deps.pool, ref.turnId, ref.step);
    const call = message?.tool_calls?.find((c) => c.id === ref.callId);
    if (!call) throw new Error(`no tool call ${ref.callId} in turn ${ref.turn} step ${ref.step}`);
    const parsed: unknown = call.function.arguments.trim() === '' ? {} : JSON.parse(call.function.arguments);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      throw new TeamStoreRefusal('tool_args_invalid', 'the arguments must be a JSON object');
    return parsed as Record<string, unknown>;
  }
  const text = (v: unknown, field: string): string => {
    if (typeof v !== 'string' || v.trim() === '') throw new TeamStoreRefusal('tool_args_invalid', `${field} must be a non-empty string`);
    return v;
  };
  async function record(ref: CallRef, index: number, content: string): Promise<void> {
    await appendEntry(deps.pool, { ...turnKeyOf(ref), step: ref.step, ordinal: index + 1 }, { role: 'tool', tool_call_id: ref.callId, content });
  }

  /** The session's liveness; of the fenced execution chain alone when the lease names it (a later chain is not it). */
  async function livenessOf(sessionId: string, lease?: FencedLease): Promise<SessionLiveness> {
    const answer = await deps.temporal().sessionLiveness(sessionId, { chain: chainOf(lease) });
    return deps.hooks?.sessionLiveness?.(sessionId, answer) ?? answer;
  }

  async function quiescence(input: { sessionId: string; lease?: FencedLease }): Promise<Quiescence> {
    // A runtime still there is `known` — unless the host that holds it cannot be reached: then nobody can tell.
    const unreachable = async () => (input.lease ? leaseHostUnreachable(deps.pool, input.lease.worktree) : undefined);
    const live = await livenessOf(input.sessionId, input.lease);
    if (live.liveness !== 'dead') {
      const why = `session ${input.sessionId} is ${live.liveness} (${live.execution}${live.liveness === 'unknown' ? `: ${live.runtime}` : ''})`;
      const gone = live.liveness === 'alive' ? await unreachable() : undefined;
      return { quiescent: false, known: live.liveness === 'alive' && gone === undefined, why: gone ? `${why}; ${gone}` : why };
    }
    const open = input.lease ? await openProcessGroups(deps.pool, input.lease) : 0;
    if (open > 0) {
      const gone = await unreachable();
      const why = `${open} process group(s) of the old execution are not verified gone`;
      return { quiescent: false, known: gone === undefined, why: gone ? `${why}; ${gone}` : why };
    }
    // Release-if-current: the old execution's lease must not still be current (the fence moves it to the next
    // generation; a lease still held at the fenced one means the old execution may still write).
    if (input.lease && (await leaseHeldAt(deps.pool, input.lease))) {
      return {
        quiescent: false,
        known: true,
        why: `the old execution's lease on ${input.lease.worktree} is still held at generation ${input.lease.generation}`,
      };
    }
    return { quiescent: true };
  }

  /**
   * The session closes after its cancel is answered (its close path tears its commands down and verifies them gone):
   * waited for here, heartbeating, so the workflow hears one answer. Its timers bound the wait. The chain's close is
   * waited for as an event (a long poll), not polled for: until it closed (or the long poll failed) the runtime is
   * checked only every 5 s, a backstop for a long poll that hangs, since a runtime whose chain still runs is not
   * quiescent and a proof before the deadline is only ever returned when it is. What is left after the close (process
   * groups of another worker process, a lease) is checked every 100 ms.
   */
  async function quiescentOrDeadline(input: { sessionId: string; lease?: FencedLease }): Promise<Quiescence> {
    const context = Context.current();
    const chain = chainOf(input.lease);
    const abort = new AbortController();
    const stop = () => abort.abort();
    context.cancelled.catch(stop);
    let closed = chain === undefined;
    const closing = closed
      ? Promise.resolve()
      : deps
          .temporal()
          .sessionClosed(input.sessionId, { chain: chain!, signal: abort.signal })
          .catch(() => undefined)
          .finally(() => (closed = true));
    const deadline = Date.now() + YIELD_WAIT_MS;
    try {
      for (;;) {
        // While the chain runs, its close is the event waited for; a check every CLOSE_BACKSTOP_MS only covers a long
        // poll that hangs. Checked every second before this: at a hundred handoffs at once, a hundred describes of
        // running workflows and their store queries each second, all answered "not yet".
        if (!closed) await Promise.race([closing, context.sleep(Math.max(0, Math.min(CLOSE_BACKSTOP_MS, deadline - Date.now())))]);
        const proof = await quiescence(input);
        if (proof.quiescent || Date.now() > deadline) return proof;
        context.heartbeat();
        if (closed) await context.sleep(100);
      }
    } finally {
      stop();
    }
  }

  /**
   * The task's text goes to the owner's session (created on its first task: isolated, on its own worktree, reporting
   * turn ends to the team). The request id is the execution id, so a retry hands it over once.
   */
  async function handOver(input: DispatchInput, sessionId: string, brief: string): Promise<{ sessionId: string; sessionTaskId: string }> {
    const requestId = `${input.teamId}/${input.executionId}`;
    await deps.hooks?.beforeCreateSession?.({ teamId: input.teamId, taskId: input.taskId, sessionId });
    const created = await deps.temporal().createSession({
      sessionId,
      title: `${input.role} of team ${input.teamId}`,
      agent: input.role.toLowerCase(),
      repo: input.repo,
      host: input.host,
      parent: input.parent,
      isolated: true,
      team: { teamId: input.teamId, memberId: input.memberId },
      model: input.model,
      ...(input.budgetTokens !== undefined ? { budgetTokens: input.budgetTokens, fundedBy: input.parent } : {}),
      requestId,
      task: brief,
    });
    // Created or bound, the create update queued the task (once per request id). A send with the same request id
    // would be the same Temporal update id, answered with the create's result, which has no top-level taskId.
    if (created.task) return { sessionId, sessionTaskId: created.task.taskId };
    const sent = await deps.temporal().send(sessionId, { task: brief, requestId, from: 'team' });
    return { sessionId, sessionTaskId: sent.taskId };
  }

  /** A receipt's move, measured, answering the candidate when it may have closed the board (a release, a resolution). */
  async function move(input: {
    teamId: string;
    receiptId: string;
    to: ReceiptState;
    sloMissed?: boolean;
    resolution?: unknown;
    why?: string;
    onlyFrom?: readonly ReceiptState[];
  }): Promise<ReceiptMove> {
    await deps.hooks?.beforeMoveReceipt?.(input);
    const { result, revision, change } = await moveReceipt(deps.pool, input.teamId, input.receiptId, input.to, input);
    if (change) metrics.receiptMoved(input.to, change.elapsedMs, change.missedSlo);
    const settles = input.to === 'released' || input.resolution !== undefined;
    return { receipt: result, revision, ...(settles ? await candidateOf(input.teamId) : {}) };
  }

  /**
   * `completion_candidate.state` of the board now (the same validator as the certificate). A running execution's
   * task is in progress on the board, which already blocks; no running count is needed here. `candidateRevision` is
   * the revision it read: facts settle concurrently and their answers may reach the workflow out of order, so the
   * workflow keeps only the newest assessment.
   */
  /** The board's assessment after a fact: the completion candidate and what the board says about the run's outcome. */
  async function candidateOf(teamId: string): Promise<BoardAssessment> {
    const board = closureInputOf(await readBoard(deps.pool, teamId), 0);
    const closure = validateClosure(board);
    return { candidate: closure.candidate, candidateRevision: board.workRevision, board: boardOutcomeFacts(board, closure) };
  }

  /**
   * The result of a delivered run (before its certificate is stored): the protected branch with every evidence
   * output's commit integrated, oldest output first. Builds commit objects only; a conflict refuses delivery
   * (`merge_conflict`), so no certificate ever names a result that does not exist.
   */
  async function buildTeamResult(teamId: string, board: BoardSnapshot, outputIds: readonly string[]): Promise<TeamResultRecord> {
    const run = await teamRunInfo(deps.pool, teamId);
    const evidence = board.outputs
      .filter((o) => outputIds.includes(o.outputId))
      .map((o) => ({ taskId: o.taskId, outputId: o.outputId, commitSha: o.commitSha }));
    const built = await buildResult(run.repo, { protectedBranch: run.protectedBranch, evidence, teamId });
    return {
      branch: resultBranchOf(teamId),
      head: built.head,
      base: built.base,
      protectedBranch: run.protectedBranch,
      commits: built.steps.map((s) => ({ taskId: s.taskId, outputId: s.outputId, commitSha: s.commitSha ?? null, how: s.how })),
    };
  }

  /** Points the result branch at the head its newest certificate names (idempotent; a retry after a crash sets it). */
  async function syncResultBranch(teamId: string): Promise<void> {
    const latest = await latestCertificate(deps.pool, teamId);
    if (!latest?.result) return;
    await setBranch((await teamRunInfo(deps.pool, teamId)).repo, latest.result.branch, latest.result.head);
  }

  /**
   * Builds the result, creates its branch, then issues the certificate that names it: no certificate names a
   * branch that could not be created. A refused issue (the board moved) puts the branch back where the newest
   * certificate has it, or removes it when there is none.
   */
  async function certify(
    teamId: string,
    board: BoardSnapshot,
    outputIds: readonly string[],
    issue: (result: TeamResultRecord) => Promise<RunCompletionCertificate>,
  ): Promise<RunCompletionCertificate> {
    const result = await buildTeamResult(teamId, board, outputIds);
    const { repo } = await teamRunInfo(deps.pool, teamId);
    await setBranch(repo, result.branch, result.head);
    try {
      return await issue(result);
    } catch (err) {
      // A failed verification keeps no result branch: the run is not delivered.
      const latest = await latestCertificate(deps.pool, teamId);
      if (latest?.result) await setBranch(repo, latest.result.branch, latest.result.head);
      else await deleteBranch(repo, result.branch, result.head);
      throw err;
    }
  }

  /**
   * The verify command of the run (if it has one) on the result about to be certified: what the certificate binds,
   * and the run itself. Refused `verification_failed` (VerificationRefusal) when it did not pass.
   */
  async function verifyForCompletion(
    teamId: string,
    result: TeamResultRecord,
    callKey: string,
  ): Promise<{ bound: CertificateVerification; view?: VerificationView }> {
    const spec = await verifySpecOf(deps.pool, teamId);
    if (!spec) return { bound: { verified: false, reason: 'the run has no verify command (orchard team start --verify)' } };
    const { repo } = await teamRunInfo(deps.pool, teamId);
    const verificationId = `ver-${createHash('sha256').update(`${teamId}/${callKey}`).digest('hex').slice(0, 24)}`;
    const stored = await runStoredVerification(
      deps.pool,
      deps.verifier,
      { verificationId, teamId, purpose: 'completion', repo, head: result.head, branch: result.branch },
      spec,
    );
    const view = verificationView(stored);
    if (!view.passed) throw new VerificationRefusal(view);
    return { bound: certifiedVerification(stored), view };
  }

  return {
    /**
     * Opens the team's rows (idempotent): the run, its members and their session ids. A member new to the store gets
     * its id in the `memberSessionIds` encoding (`legacy` when absent: what a team run started before the encoding
     * asks for); one already stored keeps its id. Answers every member's stored session id: the workflow uses those.
     */
    async openTeam(start) {
      const encoding = start.memberSessionIds ?? 'legacy';
      const members = await createTeamRun(deps.pool, {
        teamId: start.teamId,
        repo: start.repo,
        goal: start.goal,
        protectedBranch: start.protectedBranch,
        members: start.members.map((m) => ({ ...m, sessionId: memberSessionIdAs(encoding, start.teamId, m.memberId) })),
        verify: start.verify,
      });
      if (start.activationId) await activateTeamRun(deps.pool, start.teamId, start.activationId);
      const board = await readBoard(deps.pool, start.teamId);
      return { generation: board.generation, workRevision: board.workRevision, members };
    },

    /**
     * Executes one Coordinator tool call (a name the allowlist holds; the workflow refuses the rest before this)
     * and writes its result to the transcript. Writes are attributed to the Coordinator's turn.
     */
    async coordinatorTool(input) {
      const { teamId, ref } = input;
      const actor: Actor = { kind: 'coordinator', turnId: ref.turnId };
      let content: string;
      let effects: CoordinatorToolEffects = {};
      try {
        if (!isCoordinatorTool(input.tool)) throw new TeamStoreRefusal('tool_not_allowed', `${input.tool} is not a Coordinator tool`);
        const args = await argsOf(ref);
        switch (input.tool) {
          case 'task_list': {
            const read = await readBoard(deps.pool, teamId);
            // Members' messages committed up to this revision are read now (and shown in full) — no longer unread.
            const inbox = await readInbox(deps.pool, teamId, read.workRevision, `${ref.executionId}/${ref.turnId}/${ref.step}/${ref.callId}`);
            const board = { ...read, inboxUnread: Math.max(0, read.inboxUnread - inbox.length) };
            const candidate = validateClosure(closureInputOf(board, input.turnsRunning ?? 0));
            content = JSON.stringify({
              ...boardView(board),
              inbox: inbox.map((m) => ({ messageId: m.messageId, from: m.from, relatedTaskId: m.relatedTaskId, purpose: m.purpose, text: m.text })),
              completion_candidate: { state: candidate.candidate, reasons: candidate.reasons.map((r) => r.code) },
            });
            effects = { readRevision: board.workRevision };
            metrics.coordinatorObserved();
            break;
          }
          case 'task_get': {
            const id = text(args.taskId, 'taskId');
            const board = await readBoard(deps.pool, teamId);
            const task = board.tasks.find((t) => t.taskId === id);
            if (!task) throw new TeamStoreRefusal('task_not_found', `no task ${id}`);
            content = JSON.stringify({ ...task, output: board.outputs.find((o) => o.outputId === task.outputId) ?? null });
            break;
          }
          case 'task_create': {
            const owner = args.owner === undefined ? undefined : text(args.owner, 'owner');
            if (owner && !input.members.includes(owner))
              throw new TeamStoreRefusal('member_not_found', `no member ${owner}; members: ${input.members.join(', ')}`);
            const { result, revision } = await createTask(deps.pool, teamId, actor, {
              taskId: text(args.taskId, 'taskId'),
              title: text(args.title, 'title'),
              description: typeof args.description === 'string' ? args.description : '',
              owner,
              ...(args.replaces === undefined ? {} : { replacesTaskId: text(args.replaces, 'replaces') }),
            });
            content = `created task ${result.taskId}${result.owner ? ` for ${result.owner}` : ''} (revision ${revision})`;
            effects = { revision, assigned: result.owner ? [{ taskId: result.taskId, owner: result.owner }] : [] };
            break;
          }
          case 'task_assign': {
            const { result, revision } = await assignTask(deps.pool, teamId, actor, text(args.taskId, 'taskId'), text(args.owner, 'owner'));
            content = `task ${result.taskId} assigned to ${result.owner} (revision ${revision})`;
            effects = { revision, assigned: [{ taskId: result.taskId, owner: result.owner! }] };
            break;
          }
          case 'task_update': {
            const { result, revision } = await updateTask(deps.pool, teamId, actor, text(args.taskId, 'taskId'), {
              title: typeof args.title === 'string' ? args.title : undefined,
              description: typeof args.description === 'string' ? args.description : undefined,
            });
            content = `task ${result.taskId} updated (revision ${revision})`;
            effects = { revision };
            break;
          }
          case 'plan_approve': {
            const { result, revision } = await approvePlan(deps.pool, teamId, actor);
            content = `plan approved${result.already ? ' (already)' : ''}: assigned tasks start with their owners (revision ${revision})`;
            effects = { planApproved: true, revision };
            break;
          }
          case 'org_send_message': {
            const memberId = text(args.memberId, 'memberId');
            if (!input.members.includes(memberId)) throw new TeamStoreRefusal('member_not_found', `no member ${memberId}`);
            const purpose = args.purpose ?? 'requested_reply';
            if (!(MEMBER_MESSAGE_PURPOSES as readonly unknown[]).includes(purpose))
              throw new TeamStoreRefusal('message_purpose_invalid', `purpose must be one of ${MEMBER_MESSAGE_PURPOSES.join(', ')}`);
            const sent = await deps.temporal().send(await memberSessionOf(deps.pool, teamId, memberId), {
              task: `Message from your Coordinator about task ${text(args.relatedTaskId, 'relatedTaskId')} (${String(purpose)}): ${text(args.text, 'text')}`,
              requestId: `${teamId}/${ref.turnId}/${ref.step}/${ref.callId}`,
              from: 'coordinator',
            });
            content = `sent to ${memberId} (its task ${sent.taskId})`;
            break;
          }
          case 'user_reply': {
            const reply = text(args.text, 'text');
            content = 'delivered to the user';
            effects = { reply: excerpt(reply, 500) };
            break;
          }
          case 'org_run_complete': {
            const summary = text(args.summary, 'summary');
            const board = await readBoard(deps.pool, teamId);
            // One certificate per generation: once issued (a retried or repeated call, or a call after later facts
            // such as a merge), it is the answer, with the result it names.
            const issued = await findCertificate(deps.pool, teamId, board.generation);
            let certificate: RunCompletionCertificate;
            if (issued) {
              certificate = issued;
              metrics.certificateValidated('already_issued');
            } else {
              const closure = validateClosure(closureInputOf(board, input.turnsRunning ?? 0));
              if (closure.outcome !== 'delivered') {
                throw new TeamStoreRefusal(
                  'completion_refused',
                  `the run is ${closure.outcome}: ${closure.reasons.map((r) => `${r.code}${r.taskId ? ` (${r.taskId})` : ''}`).join(', ')}`,
                );
              }
              // The result is built once, before the certificate exists; a run with a verify command runs it on
              // that result first (one run per call: a retried attempt gets the stored run back).
              certificate = await certify(teamId, board, closure.evidence.outputIds, async (result) => {
                const verification = await verifyForCompletion(teamId, result, `${ref.executionId}/${ref.turnId}/${ref.step}/${ref.callId}`);
                if (verification.view) effects = { verification: verification.view };
                const issued = await issueCertificate(
                  deps.pool,
                  teamId,
                  actor,
                  deliveredCertificate(board, closure, {
                    certificateId: `cert-${teamId}-g${board.generation}-r${board.workRevision}`,
                    summary: excerpt(summary, 1000),
                    result,
                    verification: verification.bound,
                  }),
                );
                return issued.result;
              });
              metrics.certificateValidated('issued');
            }
            await syncResultBranch(teamId);
            content = `delivered: certificate ${certificate.certificateId}\n${JSON.stringify(certificate)}\nNow give the user your final summary, citing the certificate.`;
            effects = {
              ...effects,
              certificate: {
                certificateId: certificate.certificateId,
                generation: certificate.generation,
                workRevision: certificate.workRevision,
                taskIds: [...certificate.evidence.taskIds],
                outputIds: [...certificate.evidence.outputIds],
                ...(certificate.result ? { resultBranch: certificate.result.branch, resultHead: certificate.result.head } : {}),
                ...(certificate.verification ? { verified: certificate.verification.verified } : {}),
              },
            };
            break;
          }
        }
      } catch (err) {
        if (err instanceof TeamStoreRefusal || err instanceof TeamGitRefusal || err instanceof OrchardError || err instanceof SyntaxError) {
          const code: string = err instanceof SyntaxError ? 'tool_args_invalid' : (err as TeamStoreRefusal | TeamGitRefusal | OrchardError).code;
          content = `error (${code}): ${err.message}; nothing was changed`;
          effects = { refused: code, ...(err instanceof VerificationRefusal ? { verification: err.view } : {}) };
          metrics.toolRefused('coordinator', code);
          if (input.tool === 'org_run_complete' && code !== 'tool_args_invalid') metrics.certificateValidated('refused');
        } else throw err;
      }
      await record(ref, input.index, content!);
      // A fact the Coordinator committed (a task created, replaced or cancelled) may change the run's outcome.
      if (effects.revision !== undefined && !effects.certificate) {
        const { board, candidateRevision } = await candidateOf(teamId);
        effects = { ...effects, board, boardRevision: candidateRevision };
      }
      return effects;
    },

    /** Records a tool result the workflow decided itself (a refusal before any store query). */
    async recordCoordinatorResult(input) {
      await record(input, input.index, input.content);
      if (input.code) metrics.toolRefused('coordinator', input.code);
    },

    /**
     * Starts a task's execution: the board marks it in progress (system), and its text goes to the owner's session
     * (created on its first task: isolated, on its own worktree, reporting turn ends to the team). The request id
     * is the execution id, so a retry dispatches once.
     */
    async dispatchTask(input) {
      const board = await readBoard(deps.pool, input.teamId);
      const task = board.tasks.find((t) => t.taskId === input.taskId);
      if (!task) throw new TeamStoreRefusal('task_not_found', `no task ${input.taskId}`);
      // The id stored when the team opened (never recomputed: teams started before the encoding keep theirs).
      const sessionId = await memberSessionOf(deps.pool, input.teamId, input.memberId).catch((err: unknown) => {
        throw asFailure(err);
      });
      const key = { teamId: input.teamId, taskId: input.taskId, executionId: input.executionId };
      try {
        await deps.hooks?.beforeStartTask?.(key);
        // A refusal (the task moved on, this execution was fenced before it started, or it is a replacement whose
        // handoff is not released) is final: not retried. Started, the task is marked in flight until the session has it.
        const { revision } = await startTask(deps.pool, input.teamId, input.taskId, input.executionId, input.memberId, { handingOver: true }).catch(
          (err: unknown) => {
            throw asFailure(err);
          },
        );
        try {
          return { revision, ...(await handOver(input, sessionId, `Task ${task.taskId}: ${task.title}\n\n${task.description}`.trim())) };
        } finally {
          // Whatever became of the hand-over (given, refused, this attempt cancelled): a fence waiting on it goes on. A
          // clear that fails fails the attempt, whose retry marks, hands over (once per request id) and clears again.
          await dispatchEnded(deps.pool, input.teamId, input.taskId, input.executionId);
        }
      } finally {
        await deps.hooks?.afterDispatch?.(key);
      }
    },

    /** The fence transaction of a reassign (see `fenceHandoff`): committed before the old execution is asked to yield. */
    async fenceHandoff(input) {
      await deps.hooks?.beforeFence?.(input);
      // A dispatch handing the task to the session is waited for (it takes a Temporal round trip): fenced once the
      // session has the task, the yield stops the session it went to. Past the wait the attempt fails (a fault) and
      // is retried.
      const until = Date.now() + FENCE_DISPATCH_WAIT_MS;
      for (;;) {
        try {
          const { result, revision } = await fenceHandoff(deps.pool, input.teamId, { ...input, namespace: deps.namespace ?? 'default' });
          return { receipt: result, revision };
        } catch (err) {
          if (!(err instanceof DispatchInFlight) || Date.now() > until) throw asFailure(err);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    },

    /** A receipt's next state. A release or a user's resolution may close the board: it answers the candidate too. */
    async moveReceipt(input) {
      return move(input);
    },

    /**
     * Asks the old execution to yield — its session is cancelled, which stops its command's process group and
     * closes it — and then checks release: the session's workflow closed and none of its recorded process groups
     * still open. Returns whether the old runtime is quiescent, and why not; given the receipt, it moves it too
     * (`yielding` as it asks, `released` once proven quiescent) and answers the moves.
     */
    async yieldExecution(input) {
      const receipt = input.receipt;
      // The receipt says `yielding` as the yield is asked (beside it, not before it: the move waits its turn on the
      // team's row, the cancel should not). The moves only save the workflow its own: one that fails is left out of
      // the answer, and the workflow makes it (and meets its failure) as it always did.
      let yielding: Promise<ReceiptMove | undefined> = Promise.resolve(undefined);
      // Only while the handoff is still being driven: once it settled (a timeout the workflow decided while this
      // attempt had not yet heard of its cancellation), the store keeps the settled state.
      const tryMove = (to: 'yielding' | 'released') =>
        move({ ...receipt!, to, onlyFrom: ['requested', 'yielding'] }).catch((err: unknown) => {
          Context.current().log.warn('handoff receipt not moved by its yield; the team moves it', { receiptId: receipt!.receiptId, to, error: String(err) });
          return undefined;
        });
      try {
        await deps.hooks?.beforeYield?.(input);
        if (receipt) yielding = tryMove('yielding');
        // Asked also when Temporal could not say whether the session runs: the cancel is idempotent.
        if ((await livenessOf(input.sessionId, input.lease)).liveness !== 'dead') {
          // The cancel update answers once the session has closed; this activity's own cancellation (a worker
          // shutting down, the workflow giving up) must not wait for that. It reaches the fenced execution chain
          // only: a late retry never cancels a newer session of the same member.
          const cancelled = deps
            .temporal()
            .cancel(input.sessionId, input.reason, { chain: chainOf(input.lease), signal: Context.current().cancellationSignal })
            .catch((err: unknown) => {
              if (!(err instanceof OrchardError && (err.code === 'session_closed' || err.code === 'session_not_found'))) throw err;
            });
          await Promise.race([cancelled, Context.current().cancelled]);
        }
      } catch (err) {
        await yielding;
        // The old session refused to stop (a typed answer): asking again would be refused again.
        if (err instanceof OrchardError)
          throw orchardFailure('handoff_yield_failed', `session ${input.sessionId} refused to stop (${err.code}): ${err.message}`);
        throw err;
      }
      const moved = await yielding;
      const proof = await quiescentOrDeadline(input);
      // Proven quiescent: released here, one workflow round trip before the team would have asked for it (after its
      // `yielding` only: the store's trail keeps its order).
      const released = proof.quiescent && moved ? await tryMove('released') : undefined;
      return { ...proof, ...(moved ? { yielding: moved } : {}), ...(released ? { released } : {}) };
    },

    /** Proof that the old runtime is quiescent (for a user's `release` after a timeout). */
    async checkQuiescent(input) {
      return quiescence(input);
    },

    /** A user's archive, after its fences: every pending task cancelled citing the one event; the run marked archived. */
    async archiveBoard(input) {
      await deps.hooks?.beforeArchiveBoard?.({ teamId: input.teamId });
      try {
        const { result, revision } = await archiveBoard(deps.pool, input.teamId, input);
        return { revision, cancelled: result.cancelled, ...(await candidateOf(input.teamId)) };
      } catch (err) {
        throw asFailure(err);
      }
    },

    /** A task's board status (absent: no such task), for a refusal that names what is wrong with a user's request. */
    async taskStatus(input) {
      return { status: await taskStatusOf(deps.pool, input.teamId, input.taskId) };
    },

    /** A user's cancel of a task that is not running, or "keep stopped" (cancels only a handoff's replacement). */
    async cancelPendingTask(input) {
      try {
        return { revision: (await cancelPendingTask(deps.pool, input.teamId, input)).revision, ...(await candidateOf(input.teamId)) };
      } catch (err) {
        throw asFailure(err);
      }
    },

    /**
     * Returns once the team's run chain has closed (cancelled, terminated, failed or completed), with how: its task
     * executions wait on this, so none waits for ever on a team that is gone. A long poll on Temporal; cancelled
     * (the execution settled first) it returns at once.
     */
    async awaitTeamClosed(input) {
      const context = Context.current();
      const abort = new AbortController();
      const stop = () => abort.abort();
      context.cancelled.catch(stop);
      try {
        return { closed: await deps.temporal().teamClosed(input.teamId, abort.signal) };
      } catch (err) {
        // Cancelled (its execution settled): reported as a cancellation, not as a failed long poll.
        if (context.cancellationSignal.aborted) throw new CancelledFailure('the watch ended: its execution settled');
        throw err;
      } finally {
        stop();
      }
    },

    /** The owner's execution ended: its evidence (or its failure), attributed to the Member's execution. */
    async settleExecution(input) {
      const settled = await settle(input);
      await deps.hooks?.afterSettle?.(input, settled);
      return settled;
    },
  };

  async function settle(input: SettleInput): Promise<SettledAnswer> {
    const actor: Actor = { kind: 'member', memberId: input.memberId, executionId: input.executionId };
    const board = await readBoard(deps.pool, input.teamId);
    const task = board.tasks.find((t) => t.taskId === input.taskId);
    // A fence committed first (the task was handed off): this end is not evidence.
    // …or a pause did (the task is pending again, or already runs under a newer execution).
    const fenced = task?.status === 'cancelled' || task?.status === 'pending' || (task?.executionId !== undefined && task.executionId !== input.executionId);
    if (fenced) return { revision: board.workRevision, state: 'handed_off', ...(await candidateOf(input.teamId)) };
    if (input.outcome === 'finished') {
      // Evidence binds code: the head of the Member's branch now that its turn has ended. Only committed work
      // counts; uncommitted changes stay in its worktree (a Member that committed nothing has its base as head).
      // This runs on the team host's queue (the disk that holds the repository). A repository this worker cannot
      // see is an infrastructure fault — retried, visible as the activity's failing attempts — never "no commit",
      // which would certify a result without the Member's work.
      const { repo } = await teamRunInfo(deps.pool, input.teamId);
      const sessionId = await memberSessionOf(deps.pool, input.teamId, input.memberId);
      const commitSha = await memberHead(repo, sessionBranch(sessionId)).catch((err: unknown) => {
        if (err instanceof TeamGitRefusal && err.code === 'repository_not_found') {
          throw new Error(`cannot read the member's head on this worker (retried): ${err.message}`);
        }
        if (err instanceof TeamGitRefusal) return undefined;
        throw err;
      });
      const { revision } = await recordTaskOutput(deps.pool, input.teamId, actor, {
        taskId: input.taskId,
        outputId: `out-${input.executionId}`,
        summary: input.excerpt ?? '',
        commitSha,
      });
      return { revision, state: 'completed', ...(await candidateOf(input.teamId)) };
    }
    const { revision } = await failTask(deps.pool, input.teamId, actor, input.taskId, `execution ended ${input.outcome}`, input.failure);
    return { revision, state: 'failed', ...(await candidateOf(input.teamId)) };
  }
}

/**
 * Team activities bound to the repository's disk (they run on the team host's queue): `orchard team merge`.
 */
export function createTeamHostActivities(deps: { pool: Pool; verifier?: VerifierDeps }): TeamHostActivities {
  const typed = (err: unknown): unknown => {
    if (err instanceof TeamStoreRefusal || err instanceof TeamGitRefusal)
      return orchardFailure(isErrorCode(err.code) ? err.code : 'invalid_input', err.message);
    return err;
  };
  return {
    /**
     * A user's merge of a delivered run: the certified result commit into the team's protected branch. The plan
     * (before, after, mode) is stored before the branch moves, so a retry finishes the same plan — one merge commit
     * at most — and the merge is recorded once, as a user event and its fact. A repeated merge answers the recorded
     * result and moves nothing. Refused (typed, nothing moved): `not_delivered`, `merge_conflict`, `checkout_dirty`,
     * `branch_not_found`, `repository_not_found`.
     */
    async mergeTeamResult(input) {
      try {
        const { teamId, certificateId } = input;
        const certificate = await certificateById(deps.pool, teamId, certificateId);
        if (!certificate) throw new TeamStoreRefusal('not_delivered', `team ${teamId} has no certificate ${certificateId}`);
        const result = certificate.result;
        if (!result)
          throw new TeamStoreRefusal('not_delivered', `certificate ${certificateId} names no result branch (it predates them): certify the run again`);
        const { repo } = await teamRunInfo(deps.pool, teamId);
        const replan = async () =>
          savePlannedMerge(deps.pool, {
            teamId,
            certificateId,
            protectedBranch: result.protectedBranch,
            resultBranch: result.branch,
            resultHead: result.head,
            eventId: `merge-${certificateId}`,
            ...(await planMerge(repo, {
              protectedBranch: result.protectedBranch,
              resultHead: result.head,
              message: `orchard team merge ${teamId}: ${result.branch} (certificate ${certificateId})`,
            })),
          });
        let row = (await readTeamMerge(deps.pool, teamId, certificateId)) ?? (await replan());
        // The branch may move under a plan (someone committed meanwhile): plan again, a few times.
        for (let attempt = 1; row.state === 'planned'; attempt++) {
          const moved = await moveProtectedBranch(repo, row.protectedBranch, row);
          if (moved !== 'stale') break;
          if (attempt >= 3) throw new TeamGitRefusal('merge_conflict', `${row.protectedBranch} kept moving while the merge was prepared: merge again`);
          row = await replan();
        }
        if (row.state === 'merged') return { result: mergeResultOf(row) };
        const done = await completeTeamMerge(deps.pool, teamId, certificateId, row.eventId);
        return { result: mergeResultOf(done.result), revision: done.revision };
      } catch (err) {
        throw typed(err);
      }
    },

    /**
     * `orchard team verify`: the command the certificate binds, run again on the certified result commit (not on
     * whatever the result branch points to now), in a new scratch checkout. One run per request id; stored like the
     * first. Refused `not_delivered` (no such certificate), `verification_not_configured` (it binds no verification).
     */
    async reverifyTeam(input) {
      try {
        const { teamId, certificateId } = input;
        const certificate = await certificateById(deps.pool, teamId, certificateId);
        if (!certificate?.result) throw new TeamStoreRefusal('not_delivered', `team ${teamId} has no certificate ${certificateId} with a result`);
        const bound = certificate.verification;
        if (!bound?.verified) {
          throw new TeamStoreRefusal(
            'verification_not_configured',
            `certificate ${certificateId} binds no verification (${bound?.reason ?? 'it predates verification'}): start the team with --verify`,
          );
        }
        const { repo } = await teamRunInfo(deps.pool, teamId);
        const stored = await runStoredVerification(
          deps.pool,
          deps.verifier,
          {
            verificationId: `recheck-${createHash('sha256').update(`${teamId}/${input.requestId}`).digest('hex').slice(0, 24)}`,
            teamId,
            purpose: 'recheck',
            certificateId,
            repo,
            head: bound.resultHead,
            branch: certificate.result.branch,
          },
          // The certified run's bound; a longer setting of the run now does not change what was certified.
          { command: bound.command, timeoutMs: (await verifySpecOf(deps.pool, teamId))?.timeoutMs ?? DEFAULT_VERIFY_TIMEOUT_MS },
        );
        const run = verificationView(stored);
        const { verified: _verified, ...certified } = bound;
        return { teamId, certificateId, certified, run, stillPasses: run.passed, outputMatches: run.outputDigest === bound.outputDigest };
      } catch (err) {
        throw typed(err);
      }
    },
  };
}
