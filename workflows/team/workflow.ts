import {
  ActivityFailure,
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  condition,
  isCancellation,
  continueAsNew,
  getExternalWorkflowHandle,
  ParentClosePolicy,
  startChild,
  log,
  proxyActivities,
  metricMeter,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import { RetryState, type SearchAttributeUpdatePair } from '@temporalio/common';
import type { HostActivities, SharedActivities } from '../../contract/activities';
import type { CallRef } from '../../contract/orchestrator-activities';
import type { ReceiptMove } from '../../contract/team-activities';
import { DISPATCH_OPTIONS, MODEL_ACTIVITY_OPTIONS, QUIESCENCE_OPTIONS, STORE_OPTIONS, failureOf, hostActivityOptions } from '../activity-options';
import { isErrorCode } from '../../contract/errors';
import { orchardFailure } from '../../contract/failures';
import { Budget, type CarriedBudget } from '../budget';
import { registerParentBudget } from '../parent-budget';
import {
  childTurnEndedSignal,
  DEFAULT_HANDOFF,
  executionTurnEndedSignal,
  taskExecutionSettledSignal,
  taskExecutionWorkflowId,
  type TaskExecutionSettled,
  DEFAULT_TEAM_MEMBERS,
  cancelTaskUpdate,
  archiveTeamUpdate,
  pauseTeamUpdate,
  resumeTeamUpdate,
  hostTaskQueue,
  mergeTeamUpdate,
  verifyTeamUpdate,
  DEFAULT_VERIFY_TIMEOUT_MS,
  reassignTaskUpdate,
  resolveHandoffUpdate,
  messageProblem,
  resolveLimits,
  DEFAULT_LIMITS,
  teamFactSignal,
  teamMessageSignal,
  teamMessageUpdate,
  teamStartQuery,
  teamStatusQuery,
  type CancelTaskInput,
  type CancelTaskResult,
  type ChildTurnEnded,
  type CoordinatorTurnView,
  type MessageInput,
  type MessageResult,
  type ReceiptView,
  type TaskExecutionView,
  type TeamMemberSpec,
  type TeamStatusView,
  type BoardOutcomeFacts,
  type HandoffKind,
  type TeamLifecycleInput,
  type TeamLifecycleResult,
  type VerificationView,
  type TeamWorkflowInput as TeamWorkflowInputOf,
} from '../../contract/messages';
import { ORCHARD_HANDOFF_SLO_MISSED, ORCHARD_HOST, ORCHARD_KIND, ORCHARD_STATUS } from '../../contract/search-attributes';
import { excerpt } from '../session/state';
import { isCoordinatorTool } from './authority';
import { teamDetails } from '../current-details';
import { teamTaskExecution } from './execution';
import { legacyMemberSessionId } from '../../contract/member-session';
import { announceReady, NO_CANDIDATE, takeAssessment, type Assessment, type CandidateState } from './candidate';
import { teamOutcome } from './outcome';
import { patchEpoch } from '../patch-epoch';

/** Why the Coordinator is woken: what happened since its last turn, as short lines (the board has the rest). */
interface Wake {
  /** `stored: false` while the message's text is being stored: it holds its place, and no turn takes it yet. */
  readonly userMessages: readonly { readonly messageId: string; readonly stored?: boolean }[];
  readonly events: readonly string[];
}

interface CarriedTeamState {
  readonly executionId: string;
  readonly generation: number;
  readonly knownRevision: number;
  readonly readRevision: number;
  readonly planApproved: boolean;
  readonly assigned: readonly { readonly taskId: string; readonly owner: string }[];
  readonly executions: readonly TaskExecutionView[];
  readonly wake: Wake;
  readonly dirty: boolean;
  /** A task may have become startable since the last dispatch began (absent in state carried before). */
  readonly dispatchDue?: boolean;
  readonly nextMessageSeq: number;
  readonly seenRequests: readonly (readonly [string, string])[];
  readonly turns: readonly CoordinatorTurnView[];
  readonly turnsCompleted: number;
  readonly replies: readonly string[];
  readonly refusals: readonly { readonly tool: string; readonly code: string }[];
  readonly pendingEnds: readonly ChildTurnEnded[];
  /** Executions that reported their end, not yet applied. */
  readonly pendingSettled?: readonly TaskExecutionSettled[];
  readonly candidate?: TeamStatusView['candidate'];
  /** The assessed candidate: the revision it was read at, and the revision whose readiness was last announced. */
  readonly assessed?: CandidateState;
  readonly certificate?: TeamStatusView['certificate'];
  readonly summary?: TeamStatusView['summary'];
  readonly receipts: readonly HandoffState[];
  /** Tasks the user cancelled while they waited (never started, even when a handoff releases them later). */
  readonly userCancelled?: readonly string[];
  /** The answers of the user's recent reassign/cancel/resolve requests, by request id (a retry answers the first). */
  readonly answered?: readonly (readonly [string, AnsweredRequest])[];
  readonly refusedSignals?: number;
  /** [memberId, sessionId] as the team's rows store them (absent in runs before collision-free ids: legacy ids). */
  readonly memberSessions?: readonly (readonly [string, string])[];
  /** What the board last said about the outcome, and the revision it was read at. */
  readonly boardFacts?: { readonly revision: number; readonly facts: BoardOutcomeFacts };
  /** The work revision at which the Coordinator's completion request was last refused. */
  readonly completionRefusedAt?: number;
  /** A user's pause in force, and the user event its fences cite. */
  readonly paused?: { readonly reason: string; readonly eventId: string };
  /** The newest run of the verify command at completion. */
  readonly verification?: VerificationView;
  /** The team's token budget and its Members' escrow (absent in state carried before budgets). */
  readonly budget?: CarriedBudget;
}

/** What a user's team request was answered: a retry with its request id gets the same. */
type AnsweredRequest = { readonly receipt: ReceiptView } | { readonly cancelled: CancelTaskResult } | { readonly lifecycle: TeamLifecycleResult };

/** A handoff as the workflow drives it: the receipt's view plus what the driver needs. */
interface HandoffState extends ReceiptView {
  readonly sessionId: string;
  /** The old execution's lease as fenced; `holder` names its execution chain (the yield reaches that chain only). */
  readonly lease?: { readonly worktree: string; readonly generation: number; readonly holder?: string };
  /** The driver has finished with it (released, or settled at timeout/unknown/failed and waiting for a user). */
  readonly driven: boolean;
}

/** The input as this code reads it: its carried state is this code's. */
type TeamWorkflowInput = TeamWorkflowInputOf<CarriedTeamState>;

const READY_STEER = 'completion_candidate.state is ready: call org_run_complete now, directly, without task_list first.';

const KEPT = 50;
const EVENTS_KEPT = 30;

const keep = <T>(list: T[], max: number) => {
  while (list.length > max) list.shift();
};

/**
 * A team run (`team/<id>`, issue 9): a Coordinator that only orchestrates, and Members that work. The board and
 * its facts live in Postgres; this workflow holds revisions, ids and the executions it started. The Coordinator
 * runs a turn only when a durable event arrived — a user message, or a fact committed by someone other than
 * itself (a task's evidence or failure, a member's message) — and a burst of them is one wake: handlers only
 * record and set a flag, and the loop below wakes once. Nothing here sleeps, polls or starts a timer.
 */
export async function teamRun(input: TeamWorkflowInput): Promise<TeamStatusView> {
  // Every patch below, as one marker for runs that begin on this code (workflows/patch-epoch.ts).
  const since = patchEpoch('team-patches-2026-12');
  const { start, carried } = input;
  const info = workflowInfo();
  const members: TeamMemberSpec[] = [...(start.members ?? DEFAULT_TEAM_MEMBERS)];
  const limits = resolveLimits(start.limits);
  const executionId = carried?.executionId ?? uuid4();
  let generation = carried?.generation ?? 0;
  let knownRevision = carried?.knownRevision ?? 0;
  let readRevision = carried?.readRevision ?? -1;
  let planApproved = carried?.planApproved ?? false;
  const assigned = [...(carried?.assigned ?? [])];
  const executions: TaskExecutionView[] = [...(carried?.executions ?? [])];
  let wake: { userMessages: { messageId: string; stored?: boolean }[]; events: string[] } = {
    userMessages: [...(carried?.wake.userMessages ?? [])],
    events: [...(carried?.wake.events ?? [])],
  };
  // New facts from anyone but the Coordinator itself since its last turn began: the only reason to wake it.
  let dirty = carried?.dirty ?? false;
  let nextMessageSeq = carried?.nextMessageSeq ?? 1;
  const seenRequests: [string, string][] = (carried?.seenRequests ?? []).map(([r, m]) => [r, m]);
  const turns: CoordinatorTurnView[] = [...(carried?.turns ?? [])];
  let turnsCompleted = carried?.turnsCompleted ?? 0;
  let turnsThisRun = 0;
  const replies = [...(carried?.replies ?? [])];
  const refusals = [...(carried?.refusals ?? [])];
  // Member session turn ends not yet forwarded to their executions, and executions' ends not yet applied.
  const pendingEnds: ChildTurnEnded[] = [...(carried?.pendingEnds ?? [])];
  const pendingSettled: TaskExecutionSettled[] = [...(carried?.pendingSettled ?? [])];
  let coordinating = false;
  let candidate: TeamStatusView['candidate'] = carried?.candidate;
  let assessed: CandidateState = carried?.assessed ?? NO_CANDIDATE;
  let certificate: TeamStatusView['certificate'] = carried?.certificate;
  let summary: TeamStatusView['summary'] = carried?.summary;
  let boardFacts = carried?.boardFacts;
  let completionRefusedAt = carried?.completionRefusedAt;
  let verification = carried?.verification;
  // A user's pause or archive (issue 22): while paused no Coordinator turn and no execution starts; an archive
  // abandons the run, which ends once it is done (`archiveDone`). An archive never spans a continue-as-new.
  let paused = carried?.paused;
  let archived: { reason: string; eventId: string } | undefined;
  let archiveDone = false;
  // A task may have become startable (a resume, a budget raise, a release) since the last dispatch began: the main loop
  // dispatches, whatever the Coordinator does with the event (its turn may end without a tool call).
  let dispatchDue = carried?.dispatchDue ?? false;
  // Dispatches and Coordinator tool calls in flight (a pause waits them out).
  let dispatching = 0;
  let toolsInFlight = 0;
  const running = () => executions.filter((e) => e.state === 'running').length;
  const receipts: HandoffState[] = (carried?.receipts ?? []).map((r) => ({ ...r, kind: r.kind ?? 'reassign' }));
  const userCancelled: string[] = [...(carried?.userCancelled ?? [])];
  const answered: [string, AnsweredRequest][] = (carried?.answered ?? []).map(([r, a]) => [r, a]);
  // Request ids of messages being stored now: a concurrent duplicate waits for the first's outcome.
  const storing: string[] = [];
  let refusedSignals = carried?.refusedSignals ?? 0;
  let driving = 0;
  // Every handoff driver this run started: awaited before the run continues-as-new, never left floating.
  const drivers = new Map<string, Promise<void>>();
  const handoffTimes = { ...DEFAULT_HANDOFF, ...(start.handoff ?? {}) };
  // Emitted through the worker's telemetry (Prometheus when the runtime exports metrics); replay-safe. No labels: a
  // team id is content (docs/operations.md, Metrics); orchard_handoff_slo_misses_total counts the same by store write.
  const sloMisses = metricMeter.createCounter('orchard_handoff_slo_missed', 'handoffs', 'Handoffs whose old execution was not released within the SLO');

  // Regular activities, not local ones: update handlers (a handoff's driver) run beside the main loop, and a local
  // activity's result can reach the workflow in a different activation on replay than it did live, which would
  // reorder the two coroutines' commands. An activity's completion is an event, ordered the same both times.
  const store = proxyActivities<SharedActivities>({ ...STORE_OPTIONS, summary: 'team store' });
  const model = proxyActivities<SharedActivities>({ ...MODEL_ACTIVITY_OPTIONS, summary: 'team' });
  // A Coordinator tool may certify (git on the result branch): it heartbeats while it runs.
  const work = proxyActivities<SharedActivities>({ ...DISPATCH_OPTIONS, summary: 'team' });
  // …and certification builds the result branch in the team's repository: Coordinator tools run on its host's queue,
  // waiting for that host rather than reading another disk. Runs before this change ran them on the shared queue.
  const toolsOn = since('team-git-on-host')
    ? proxyActivities<HostActivities>({ ...DISPATCH_OPTIONS, taskQueue: hostTaskQueue(start.host), summary: `team on ${start.host}` })
    : work;
  // A yield heartbeats while it waits for the old runtime: a worker lost mid-handoff is noticed in seconds and
  // the same receipt's yield is retried elsewhere (cancel and the checks are idempotent).
  const handoffActs = proxyActivities<SharedActivities>({ ...QUIESCENCE_OPTIONS, summary: 'handoff' });
  const memberIds = members.map((m) => m.memberId);
  // Members' session ids are the ones stored when the team first opened: `<team>__<member>` for teams started since
  // collision-free ids, `<team>-<member>` for older ones (openTeam answers the stored ids; the first write wins).
  const memberSessionIds = since('team-member-session-ids-v2') ? ('v2' as const) : undefined;
  // Runs before this change dispatched what a release freed only on the Coordinator's wake, just before its turn: a
  // release landing in between (microtasks apart, in one workflow task) cleared its own wake and started nothing.
  // They replay that way: a release does not ask for a dispatch, and a dispatch does not answer a pending one.
  const dispatchWhenDue = since('team-dispatch-when-due');
  let memberSessions: (readonly [string, string])[] = [...(carried?.memberSessions ?? [])];
  // The Coordinator spends from it; each Member's session budget is carved from it at its first dispatch (escrow).
  const budget = new Budget(carried?.budget ?? { limit: start.budgetTokens, spent: 0 });
  registerParentBudget(budget, 'team', (kind) => {
    // A raise may let a dispatch that waited for budget start; a Coordinator stopped by its budget is woken by it.
    dispatchDue = true;
    if (kind === 'limit' && turns.at(-1)?.outcome === 'budget_exhausted') {
      wake.events.push(`the user raised the token budget to ${budget.limit}: carry on`);
      dirty = true;
    }
    publish();
  });
  const sessionOf = (memberId: string) => memberSessions.find(([m]) => m === memberId)?.[1] ?? legacyMemberSessionId(start.teamId, memberId);

  setHandler(teamMessageUpdate, (message) => accept(message), {
    description: 'A user message to the Coordinator: accepted with its id (a repeated requestId once), answered by a Coordinator turn.',
    validator: (message) => {
      const problem = messageProblem(message) ?? (isKnownMessage(message.requestId) ? undefined : queueRefusal(message.text.length));
      if (problem) throw orchardFailure(problem.code, problem.message);
    },
  });
  setHandler(
    teamMessageSignal,
    async (message) => {
      const problem = messageProblem(message) ?? (isKnownMessage(message.requestId) ? undefined : queueRefusal(message.text.length));
      if (problem) {
        refusedSignals += 1;
        return log.info('message signal refused', { code: problem.code });
      }
      // A signal cannot be answered: a message the store refused for good is counted, never a failed team run.
      await accept(message).catch((err: unknown) => {
        refusedSignals += 1;
        log.warn('message signal not accepted', { requestId: message.requestId, error: String(err) });
      });
    },
    { description: 'Fire-and-forget `message`.' },
  );
  setHandler(
    childTurnEndedSignal,
    (notice) => {
      // A member session's turn ended (or it closed): the main loop forwards it to the member's running execution,
      // whose workflow settles it if it was its task's turn.
      if (!memberIds.some((m) => sessionOf(m) === notice.childId)) return;
      budget.childReported(notice);
      if (!pendingEnds.some((p) => p.childId === notice.childId && p.turnId === notice.turnId && p.closed === notice.closed)) pendingEnds.push(notice);
      // Forwarded at once, also while a Coordinator turn runs: a member's evidence is committed by its execution's
      // workflow, not held back by a slow model call (the main loop forwards only between turns). Runs recorded
      // before this change forwarded from the loop alone; they replay that way.
      if (since('team-forward-ends-at-once')) return forwardEnds();
    },
    { description: "A member session's turn ended (sent by the session)." },
  );
  setHandler(
    taskExecutionSettledSignal,
    (settled) => {
      if (!pendingSettled.some((p) => p.executionId === settled.executionId)) pendingSettled.push(settled);
    },
    { description: 'A task execution settled (sent by its workflow): evidence, failure, handed off or not started.' },
  );
  setHandler(
    teamFactSignal,
    ({ revision, message }) => {
      if (typeof revision !== 'number') return;
      if (message) {
        // A Member's accepted message: its session signals it once, so it always wakes (whatever the revision
        // the Coordinator has seen since), with who wrote, about what and why.
        knownRevision = Math.max(knownRevision, revision);
        return noteEvent(
          `message ${message.messageId} from ${message.from} about task ${message.relatedTaskId} (${message.purpose}): ${message.excerpt} — task_list shows it in full`,
        );
      }
      if (revision <= knownRevision) return;
      knownRevision = revision;
      noteEvent(`work revision ${revision}: a fact was committed outside the run`);
    },
    { description: "A fact was committed outside the workflow (its revision, and a Member's message); wakes the Coordinator if it is new." },
  );
  setHandler(
    reassignTaskUpdate,
    (input) =>
      answering(
        input.requestId,
        (a) => ('receipt' in a ? a.receipt : undefined),
        async () => {
          const receipt = await reassign(input);
          return { answer: receipt, remembered: { receipt } };
        },
      ),
    {
      description: 'Cancel a running task and give it to another member: fence, receipt, yield, release, then the replacement starts.',
      validator: (input) => {
        if (answerOf(input?.requestId)) return;
        const problem = reassignProblem(input);
        if (problem) throw orchardFailure(problem.code, problem.message);
      },
    },
  );
  setHandler(
    cancelTaskUpdate,
    (input) =>
      answering(
        input.requestId,
        (a) => ('cancelled' in a ? a.cancelled : undefined),
        async () => {
          const cancelled = await cancelTask(input);
          return { answer: cancelled, remembered: { cancelled } };
        },
      ),
    {
      description:
        "The user removes a task from the run's scope: a waiting task is cancelled; running work is fenced and yielded (a handoff without replacement).",
      validator: (input) => {
        if (answerOf(input?.requestId)) return;
        const i = (input ?? {}) as unknown as Record<string, unknown>;
        if (typeof i.taskId !== 'string' || i.taskId === '' || typeof i.reason !== 'string' || i.reason.trim() === '') {
          throw orchardFailure('invalid_input', 'cancel needs { taskId, reason }');
        }
        if (archived) throw orchardFailure('team_archived', `team ${start.teamId} is archived: its open tasks are cancelled already`);
      },
    },
  );
  setHandler(
    resolveHandoffUpdate,
    (input) =>
      answering(
        input.requestId,
        (a) => ('receipt' in a ? a.receipt : undefined),
        async () => {
          const receipt = await resolveHandoff(input);
          return { answer: receipt, remembered: { receipt } };
        },
      ),
    {
      description: 'A user resolves a handoff that timed out: keep_stopped (cancel only the replacement) or release (with proof of quiescence).',
      validator: (input) => {
        if (answerOf(input?.requestId)) return;
        const receipt = receipts.find((r) => r.receiptId === input?.receiptId);
        if (!receipt) throw orchardFailure('receipt_not_found', `no handoff receipt ${String(input?.receiptId)}`);
        if (input.action !== 'keep_stopped' && input.action !== 'release') throw orchardFailure('invalid_input', 'action must be keep_stopped or release');
        // keep_stopped settles a handoff; a later release (with its proof) still frees the old owner.
        const settled =
          !['timeout', 'unknown', 'failed'].includes(receipt.state) ||
          receipt.resolution === 'release' ||
          (receipt.resolution === 'keep_stopped' && input.action === 'keep_stopped');
        if (settled) {
          throw orchardFailure(
            'handoff_not_blocked',
            `receipt ${receipt.receiptId} is ${receipt.state}${receipt.resolution ? `, resolved ${receipt.resolution}` : ''}: nothing to resolve`,
          );
        }
      },
    },
  );
  for (const [definition, kind, description] of [
    [
      pauseTeamUpdate,
      'pause',
      'Pause the team: no Coordinator turn or execution starts; running work is fenced (receipts of kind pause) and its tasks wait, pending, for their owners.',
    ],
    [resumeTeamUpdate, 'resume', 'Resume a paused team: the Coordinator and the dispatch run again; paused tasks start again with their owners.'],
    [
      archiveTeamUpdate,
      'archive',
      'Abandon the whole run: running work fenced and stopped, open tasks cancelled citing one user event, Members’ sessions closed; the run ends cancelled (or failed).',
    ],
  ] as const) {
    setHandler(
      definition,
      (input: TeamLifecycleInput) =>
        answering(
          input.requestId,
          (a) => ('lifecycle' in a ? a.lifecycle : undefined),
          async () => {
            const lifecycle = kind === 'pause' ? await pause(input.reason) : kind === 'resume' ? resume(input.reason) : await archive(input.reason);
            return { answer: lifecycle, remembered: { lifecycle } };
          },
        ),
      {
        description,
        validator: (input: TeamLifecycleInput) => {
          if (answerOf(input?.requestId)) return;
          const problem = lifecycleProblem(kind, input);
          if (problem) throw orchardFailure(problem.code, problem.message);
        },
      },
    );
  }
  setHandler(
    mergeTeamUpdate,
    async () => {
      // A user action on the team's repository: on its host's queue (the disk that holds it), never the Coordinator's.
      // A host that is gone answers host_unavailable after a minute instead of leaving the user waiting; git on a
      // large checkout may take minutes (no heartbeat); a retry finishes the stored plan, so a few are safe.
      const host = proxyActivities<HostActivities>({ ...hostActivityOptions(start.host, 60), startToCloseTimeout: '10 minutes', summary: 'team merge' });
      try {
        const merged = await host.mergeTeamResult({ teamId: start.teamId, certificateId: certificate!.certificateId });
        if (merged.revision !== undefined) knownRevision = Math.max(knownRevision, merged.revision);
        publish();
        return merged.result;
      } catch (err) {
        if (!(err instanceof ActivityFailure)) throw err;
        const failure = failureOf(err);
        throw orchardFailure(isErrorCode(failure.code) ? failure.code : 'git_command_failed', failure.message);
      }
    },
    {
      description: "The user merges the delivered result (the certificate's result commit) into the protected branch; a repeat answers the same result.",
      validator: () => {
        if (!certificate?.resultHead) {
          throw orchardFailure(
            'not_delivered',
            certificate
              ? `certificate ${certificate.certificateId} names no result branch: certify the run again`
              : `team ${start.teamId} is not delivered: there is no certificate, so there is no result to merge`,
          );
        }
      },
    },
  );
  setHandler(
    verifyTeamUpdate,
    async (input) => {
      // On the team's host (the disk that holds the repository), bounded like the completion's run. One run per request
      // id (the activity keys the stored run by it), so a retried update answers the first run.
      const timeoutMs = (start.verify?.timeoutMs ?? DEFAULT_VERIFY_TIMEOUT_MS) + 60_000;
      const host = proxyActivities<HostActivities>({
        ...hostActivityOptions(start.host, 60),
        startToCloseTimeout: timeoutMs,
        heartbeatTimeout: '30 seconds',
        summary: 'team verify',
      });
      try {
        return await host.reverifyTeam({ teamId: start.teamId, certificateId: certificate!.certificateId, requestId: input?.requestId ?? uuid4() });
      } catch (err) {
        if (!(err instanceof ActivityFailure)) throw err;
        const failure = failureOf(err);
        throw orchardFailure(isErrorCode(failure.code) ? failure.code : 'git_command_failed', failure.message);
      }
    },
    {
      description: "Runs the certificate's verify command again on the certified tree: whether it still passes, and whether its output matches.",
      validator: (input) => {
        if (input !== undefined && (typeof input !== 'object' || input === null)) throw orchardFailure('invalid_input', 'verifyTeam takes { requestId? }');
        if (!certificate?.resultHead) {
          throw orchardFailure('not_delivered', `team ${start.teamId} is not delivered: there is no certified result to verify`);
        }
        if (certificate.verified !== true) {
          throw orchardFailure(
            'verification_not_configured',
            `certificate ${certificate.certificateId} binds no verification: the team was started without --verify`,
          );
        }
      },
    },
  );
  setHandler(teamStatusQuery, () => view(), { description: 'Revisions, members, executions, Coordinator turns, replies and refusals.' });
  setHandler(teamStartQuery, () => start, { description: 'The settings this team run was started with: repo, host, goal, members, models, limits.' });

  /** The first answer to a user request id, if it was answered (a retry after a lost response gets it again). */
  function answerOf(requestId: unknown): AnsweredRequest | undefined {
    return typeof requestId === 'string' ? answered.find(([r]) => r === requestId)?.[1] : undefined;
  }

  /** Runs a user request once per request id (across continue-as-new too): a retry answers what the first did. */
  async function answering<T>(
    requestId: string | undefined,
    pick: (a: AnsweredRequest) => T | undefined,
    run: () => Promise<{ answer: T; remembered: AnsweredRequest }>,
  ): Promise<T> {
    const first = answerOf(requestId);
    const again = first && pick(first);
    if (again !== undefined) return again;
    const { answer, remembered } = await run();
    if (typeof requestId === 'string') {
      answered.push([requestId, remembered]);
      keep(answered, KEPT * 2);
    }
    return answer;
  }

  /** Why a pause, resume or archive does not apply now (nothing is changed then). */
  function lifecycleProblem(
    kind: 'pause' | 'resume' | 'archive',
    input: unknown,
  ): { code: 'invalid_input' | 'team_archived' | 'run_delivered' | 'team_paused' | 'team_not_paused'; message: string } | undefined {
    const i = (input ?? {}) as Record<string, unknown>;
    if (typeof i.reason !== 'string' || i.reason.trim() === '') return { code: 'invalid_input', message: `${kind} needs { reason }` };
    if (archived) return { code: 'team_archived', message: `team ${start.teamId} is archived (${archived.reason}): nothing more to ${kind}` };
    if (kind !== 'resume' && certificate) {
      return { code: 'run_delivered', message: `team ${start.teamId} is delivered (certificate ${certificate.certificateId}): there is nothing to ${kind}` };
    }
    if (kind === 'pause' && paused) return { code: 'team_paused', message: `team ${start.teamId} is paused already (${paused.reason})` };
    if (kind === 'resume' && !paused) return { code: 'team_not_paused', message: `team ${start.teamId} is not paused` };
    return undefined;
  }

  /** Fences every running execution under one user event (receipts of `kind`); one that settled first is skipped. */
  async function fenceAll(kind: 'pause' | 'archive', reason: string, eventId: string): Promise<ReceiptView[]> {
    // Nothing new starts (the flag is set): wait out a dispatch or a Coordinator tool call already under way.
    await condition(() => dispatching === 0 && toolsInFlight === 0);
    const receiptsOf: ReceiptView[] = [];
    for (const execution of executions.filter((e) => e.state === 'running')) {
      const event = (r: HandoffState) =>
        kind === 'pause'
          ? `the user paused the team (${reason}): ${r.oldTaskId} of ${r.oldOwner} is stopped and starts again after the resume`
          : `the user archived the team (${reason}): ${r.oldTaskId} of ${r.oldOwner} is stopped`;
      try {
        receiptsOf.push(await fence(execution, kind, reason, event, undefined, eventId));
      } catch (err) {
        // Its end was committed first (completed or failed): it is applied as any settlement; nothing to fence.
        if (!(err instanceof ApplicationFailure)) throw err;
        continue;
      }
      // Paused, the task is pending again for the same owner: it starts again once resumed (and its receipt released).
      if (kind === 'pause' && !assigned.some((a) => a.taskId === execution.taskId)) assigned.unshift({ taskId: execution.taskId, owner: execution.memberId });
    }
    return receiptsOf;
  }

  /**
   * With the flag set nothing new starts; a dispatch or Coordinator tool call already under way is waited out. A
   * completion among them may have certified the run meanwhile: then the user's pause or archive comes too late
   * (`run_delivered`), the flag is lifted and nothing was changed.
   */
  async function unlessDeliveredMeanwhile(kind: 'pause' | 'archive', undo: () => void): Promise<void> {
    await condition(() => dispatching === 0 && toolsInFlight === 0);
    if (!certificate) return;
    undo();
    publish();
    throw orchardFailure(
      'run_delivered',
      `team ${start.teamId} was delivered (certificate ${certificate.certificateId}) before the ${kind} took hold: there is nothing to ${kind}`,
    );
  }

  async function pause(reason: string): Promise<TeamLifecycleResult> {
    const eventId = `pause-${uuid4()}`;
    paused = { reason, eventId };
    publish();
    await unlessDeliveredMeanwhile('pause', () => (paused = undefined));
    const fenced = await fenceAll('pause', reason, eventId);
    publish();
    return { teamId: start.teamId, state: 'paused', receipts: fenced, workRevision: knownRevision };
  }

  function resume(reason: string): TeamLifecycleResult {
    paused = undefined;
    dispatchDue = true;
    noteEvent(`the user resumed the team (${reason}): paused tasks start again with their owners`);
    publish();
    return { teamId: start.teamId, state: 'running', receipts: [], workRevision: knownRevision };
  }

  /**
   * The whole episode abandoned: running work fenced and stopped (receipts of kind `archive`, driven to their end),
   * every open task cancelled citing the one archive event, the Members' sessions closed; then the run ends.
   */
  async function archive(reason: string): Promise<TeamLifecycleResult> {
    const eventId = `archive-${uuid4()}`;
    const wasPaused = paused;
    archived = { reason, eventId };
    paused = undefined;
    publish();
    await unlessDeliveredMeanwhile('archive', () => {
      archived = undefined;
      paused = wasPaused;
    });
    const fenced = await fenceAll('archive', reason, eventId);
    const board = await asUpdateFailure(store.archiveBoard({ teamId: start.teamId, eventId, reason }));
    knownRevision = Math.max(knownRevision, board.revision);
    noteBoard(board.board, board.candidateRevision);
    assigned.length = 0;
    // Every receipt settles (released, or timeout/unknown for a person to see) before the sessions close.
    await condition(() => driving === 0);
    await Promise.all(drivers.values());
    for (const memberId of memberIds) {
      await handoffActs
        .yieldExecution({ sessionId: sessionOf(memberId), reason: `team ${start.teamId} archived: ${reason}` })
        .catch((err: unknown) => log.warn('member session not closed by the archive', { memberId, error: String(err) }));
    }
    archiveDone = true;
    publish();
    return {
      teamId: start.teamId,
      state: 'archived',
      receipts: fenced.map((r) => publicReceipt(r.receiptId)),
      cancelledTasks: board.cancelled,
      workRevision: knownRevision,
    };
  }

  function reassignProblem(
    input: unknown,
  ): { code: 'invalid_input' | 'team_archived' | 'task_not_in_progress' | 'member_not_found' | 'same_owner'; message: string } | undefined {
    const i = (input ?? {}) as Record<string, unknown>;
    if (typeof i.taskId !== 'string' || typeof i.newOwner !== 'string' || typeof i.reason !== 'string' || i.reason.trim() === '') {
      return { code: 'invalid_input', message: 'reassign needs { taskId, newOwner, reason }' };
    }
    if (archived) return { code: 'team_archived', message: `team ${start.teamId} is archived: nothing is handed off any more` };
    if (!memberIds.includes(i.newOwner)) return { code: 'member_not_found', message: `no member ${i.newOwner}; members: ${memberIds.join(', ')}` };
    const execution = executions.find((e) => e.taskId === i.taskId && e.state === 'running');
    // A task this run has never dispatched, queued or handed off may not exist at all: the handler asks the board
    // (task_not_found, or task_not_in_progress with its status). Nothing is changed either way.
    if (!execution && knowsTask(i.taskId)) return notInProgress(i.taskId);
    if (execution && i.newOwner === execution.memberId) return { code: 'same_owner', message: `task ${i.taskId} is already ${i.newOwner}'s` };
    return undefined;
  }

  function notInProgress(taskId: string, status?: string): { code: 'task_not_in_progress'; message: string } {
    const is = status === undefined ? '' : ` (it is ${status})`;
    return { code: 'task_not_in_progress', message: `task ${taskId} has no running execution${is}: only running work is handed off` };
  }

  /** Whether this run has dispatched, queued or handed off the task (so the board has it). */
  function knowsTask(taskId: string): boolean {
    return (
      executions.some((e) => e.taskId === taskId) ||
      assigned.some((a) => a.taskId === taskId) ||
      receipts.some((r) => r.oldTaskId === taskId || r.newTaskId === taskId) ||
      userCancelled.includes(taskId)
    );
  }

  /** The user's reassign: one fence transaction (before anything is asked of the old execution), then the driver. */
  async function reassign(input: { taskId: string; newOwner: string; reason: string }): Promise<ReceiptView> {
    const execution = executions.find((e) => e.taskId === input.taskId && e.state === 'running');
    if (!execution) {
      const { status } = await store.taskStatus({ teamId: start.teamId, taskId: input.taskId });
      if (status === undefined) throw orchardFailure('task_not_found', `no task ${input.taskId} in team ${start.teamId}`);
      const problem = notInProgress(input.taskId, status);
      throw orchardFailure(problem.code, problem.message);
    }
    return fence(
      execution,
      'reassign',
      input.reason,
      (r) =>
        `task ${input.taskId} reassigned from ${r.oldOwner} to ${input.newOwner} (${input.reason}): replacement ${r.newTaskId} waits for the old execution`,
      {
        taskId: `${input.taskId}-r${receipts.length + 1}`,
        owner: input.newOwner,
      },
    );
  }

  /**
   * The user's cancel. Running work: the same fence and driver as a reassign, with no replacement (the receipt
   * says when the old execution is gone). Anything else: one store transaction cancels it if it is still pending
   * (a finished task is refused, typed), and it leaves the dispatch queue.
   */
  async function cancelTask(input: CancelTaskInput): Promise<CancelTaskResult> {
    const execution = executions.find((e) => e.taskId === input.taskId && e.state === 'running');
    if (execution) {
      const receipt = await fence(
        execution,
        'cancel',
        input.reason,
        (r) => `the user cancelled task ${input.taskId} (${input.reason}) while ${r.oldOwner} worked on it: its execution is stopped, nothing replaces it`,
      );
      return { taskId: input.taskId, status: 'cancelled', workRevision: knownRevision, receipt };
    }
    const cancelled = await asUpdateFailure(
      store.cancelPendingTask({ teamId: start.teamId, eventId: `cancel-${uuid4()}`, taskId: input.taskId, reason: input.reason, kind: 'cancel' }),
    );
    knownRevision = Math.max(knownRevision, cancelled.revision);
    const queued = assigned.findIndex((a) => a.taskId === input.taskId);
    if (queued >= 0) assigned.splice(queued, 1);
    noteUserCancelled(input.taskId);
    noteEvent(`the user cancelled task ${input.taskId} (${input.reason}) before it ran`);
    assess(cancelled);
    publish();
    return { taskId: input.taskId, status: 'cancelled', workRevision: knownRevision };
  }

  /**
   * One fence transaction, committed before anything is asked of the old execution, then the driver. Whichever
   * commits first wins: a completion settled before the fence makes the fence refuse (typed), and a fence first
   * makes the late completion settle as handed off, not as evidence.
   */
  async function fence(
    execution: TaskExecutionView,
    kind: HandoffKind,
    reason: string,
    event: (receipt: HandoffState) => string,
    replacement?: { taskId: string; owner: string },
    userEventId = `${kind}-${uuid4()}`,
  ): Promise<ReceiptView> {
    // The handoff's clocks start when the user's request is accepted, not once the fence and its writes are done.
    const clocks = since('team-handoff-clocks-at-accept') ? startClocks() : undefined;
    const fencing = asUpdateFailure(
      store.fenceHandoff({
        teamId: start.teamId,
        eventId: userEventId,
        oldTaskId: execution.taskId,
        kind,
        reason,
        sessionId: execution.sessionId,
        executionId: execution.executionId,
        replacement,
      }),
    );
    // A refused fence starts no handoff: its clocks stop.
    const fenced = await fencing.catch((err: unknown) => {
      clocks?.scope.cancel();
      throw err;
    });
    knownRevision = Math.max(knownRevision, fenced.revision);
    const at = executions.findIndex((e) => e.executionId === execution.executionId);
    executions[at] = { ...executions[at], state: kind === 'reassign' ? 'handed_off' : kind === 'pause' ? 'paused' : 'cancelled' };
    // The task is frozen: its execution's workflow has nothing left to record. (The session is stopped by the driver.)
    const cancelExecution = async () => {
      if (!execution.workflowId) return;
      await getExternalWorkflowHandle(execution.workflowId)
        .cancel()
        .catch((err) => log.warn('execution workflow not cancelled', { workflowId: execution.workflowId, error: String(err) }));
    };
    // The yield is asked for as soon as the fence has committed: the execution workflow's cancel (a round trip through
    // the server, seconds when it is busy) is bookkeeping and goes beside it. Runs before this change cancelled first.
    const yieldAtFence = since('team-handoff-yield-at-fence');
    if (!yieldAtFence) await cancelExecution();
    const r = fenced.receipt;
    const receipt: HandoffState = {
      receiptId: r.receiptId,
      kind,
      oldTaskId: r.oldTaskId,
      newTaskId: r.newTaskId,
      oldOwner: r.owner,
      newOwner: replacement?.owner,
      state: r.state,
      sloMissed: r.sloMissed,
      trail: [r.state],
      sessionId: r.sessionId,
      lease: r.lease ? { worktree: r.lease.worktree, generation: r.lease.generation, holder: r.lease.holder } : undefined,
      driven: false,
    };
    receipts.push(receipt);
    noteEvent(event(receipt));
    publish();
    startDriver(receipt.receiptId, clocks);
    // The receipt as the fence left it (`requested`), whatever the driver has moved it to by the time this answers.
    const answer = publicReceipt(receipt.receiptId);
    if (yieldAtFence) await cancelExecution();
    return answer;
  }

  /** A task the user took out of scope before it ran: it never starts, even when a handoff releases it later. */
  function noteUserCancelled(taskId: string): void {
    if (!userCancelled.includes(taskId)) userCancelled.push(taskId);
    keep(userCancelled, KEPT * 4);
  }

  /**
   * A committed fact's assessment of the board (`completion_candidate.state`); a stale one (read before a fact already
   * applied) is dropped. When the board is ready and no execution is still running here, the Coordinator's next
   * request says to call org_run_complete directly: the board is closed, there is nothing to read first.
   */
  function assess(assessment: (Assessment & { board?: BoardOutcomeFacts }) | undefined): void {
    if (assessment) noteBoard(assessment.board, assessment.candidateRevision ?? assessment.revision);
    if (assessment?.candidate === undefined || certificate) return;
    if (!since('team-candidate-revision')) {
      candidate = assessment.candidate as TeamStatusView['candidate'];
      if (candidate === 'ready') noteEvent(READY_STEER);
      return;
    }
    take(assessment);
    steerIfReady();
  }

  /** The board's outcome facts, unless an answer read at a later revision was taken already. */
  function noteBoard(facts: BoardOutcomeFacts | undefined, revision: number): void {
    if (facts && (boardFacts === undefined || revision >= boardFacts.revision)) boardFacts = { revision, facts };
  }

  function take(assessment: Assessment): void {
    assessed = takeAssessment(assessed, assessment);
    candidate = assessed.state as TeamStatusView['candidate'];
  }

  /** Announces a ready board once no execution is running (each assessed revision once). */
  function steerIfReady(): void {
    if (certificate) return;
    const { announce, next } = announceReady(assessed, running());
    assessed = next;
    if (announce) noteEvent(READY_STEER);
  }

  function publicReceipt(receiptId: string): ReceiptView {
    const { sessionId: _s, lease: _l, driven: _d, ...r } = receipts.find((x) => x.receiptId === receiptId)!;
    return r;
  }

  function setReceipt(receiptId: string, change: Partial<HandoffState>): void {
    const at = receipts.findIndex((r) => r.receiptId === receiptId);
    const before = receipts[at];
    receipts[at] = { ...before, ...change, trail: change.state && change.state !== before.state ? [...before.trail, change.state] : before.trail };
    publish();
  }

  /** Moves a receipt; answers the board's candidate when the move may have closed it (a release, a resolution). */
  async function moveTo(
    receiptId: string,
    to: ReceiptView['state'],
    extra: { sloMissed?: boolean; resolution?: unknown; why?: string } = {},
  ): Promise<ReceiptMove> {
    const moved = await store.moveReceipt({ teamId: start.teamId, receiptId, to, ...extra });
    applyMove(receiptId, moved);
    return moved;
  }

  /** A receipt as the store answered a move of it. */
  function applyMove(receiptId: string, moved: ReceiptMove): void {
    knownRevision = Math.max(knownRevision, moved.revision);
    setReceipt(receiptId, { state: moved.receipt.state, sloMissed: moved.receipt.sloMissed });
  }

  /** A handoff's two durable timers; each answers true when it fired, false when the handoff settled first. */
  interface Clocks {
    readonly scope: CancellationScope;
    readonly slo: Promise<boolean>;
    readonly timeout: Promise<boolean>;
  }

  function startClocks(): Clocks {
    const scope = new CancellationScope();
    const timer = (ms: number) =>
      scope
        .run(() => sleep(ms))
        .then(
          () => true,
          () => false,
        );
    return { scope, slo: timer(handoffTimes.sloMs), timeout: timer(handoffTimes.timeoutMs) };
  }

  /** Starts a receipt's driver; the run awaits it before continuing-as-new (no driver is ever left floating). */
  function startDriver(receiptId: string, clocks: Clocks | undefined): void {
    const driver = (clocks ? driveDurably(receiptId, clocks) : drive(receiptId))
      .catch((err: unknown) => log.error('handoff driver failed', { receiptId, error: String(err) }))
      .finally(() => drivers.delete(receiptId));
    drivers.set(receiptId, driver);
  }

  /**
   * Drives one handoff from the user's request (its clocks already run): asks the old execution's chain to yield,
   * then releases the replacement once the old runtime is quiescent. At the SLO a miss is recorded; at the timeout
   * one more check tells `timeout` (known to be still there) from `unknown` (nobody could tell) and releases a
   * runtime that went quiet at the last moment. The yield runs in a scope of its own that ends when the driver
   * settles, so it never outlives its handoff. Nothing here can wedge the run: a write that fails for good settles
   * the receipt `unknown` (durably when the store takes it), which a user can resolve.
   */
  async function driveDurably(receiptId: string, clocks: Clocks): Promise<void> {
    driving += 1;
    const receipt = receipts.find((r) => r.receiptId === receiptId)!;
    const yieldScope = new CancellationScope();
    let yielding: Promise<unknown> = Promise.resolve();
    try {
      // The old execution is asked to stop at once (the fence has committed); the receipt's move is bookkeeping beside it.
      // The yield moves the receipt itself (`yielding` as it asks, `released` once it has proven the old runtime
      // quiescent): a round trip through this workflow less on the way to the release. Runs before this change moved
      // it from here.
      const movesInYield = since('team-handoff-moves-in-yield');
      const yieldCall = yieldScope.run(() =>
        handoffActs.yieldExecution({
          sessionId: receipt.sessionId,
          reason: `handoff ${receiptId}`,
          lease: receipt.lease,
          ...(movesInYield ? { receipt: { teamId: start.teamId, receiptId } } : {}),
        }),
      );
      yielding = yieldCall.catch(() => undefined);
      let yieldingMove: ReceiptMove | undefined;
      let releasedMove: ReceiptMove | undefined;
      if (!movesInYield) await moveTo(receiptId, 'yielding');
      let settled = false;
      const slo = clocks.slo.then(async (fired) => {
        if (!fired || settled) return;
        await moveTo(receiptId, 'yielding', { sloMissed: true });
        sloMisses.add(1);
        publish();
      });
      let why: string | undefined;
      const timedOut = clocks.timeout.then(() => 'timeout' as const);
      // The yield answers quiescent, or fails for good (`failed`, at once); anything else waits for the timeout.
      const yielded = yieldCall.then(
        (r) => {
          // A late answer (the handoff settled on its timeout meanwhile) changes nothing here: the settle's own move
          // hears the store's word.
          if (!settled) ({ yielding: yieldingMove, released: releasedMove } = r);
          return r.quiescent ? ('released' as const) : timedOut;
        },
        (err: unknown) => {
          if (err instanceof ActivityFailure && err.retryState === RetryState.NON_RETRYABLE_FAILURE) {
            why = failureOf(err).message;
            return 'failed' as const;
          }
          return timedOut;
        },
      );
      let outcome: 'released' | 'timeout' | 'unknown' | 'failed' = await Promise.race([yielded, timedOut]);
      if (outcome === 'timeout') {
        const proof = await handoffActs
          .checkQuiescent({ sessionId: receipt.sessionId, lease: receipt.lease })
          .catch((err: unknown) => ({ quiescent: false as const, known: false, why: err instanceof ActivityFailure ? failureOf(err).message : String(err) }));
        outcome = proof.quiescent ? 'released' : proof.known ? 'timeout' : 'unknown';
        why = proof.quiescent ? undefined : proof.why;
      }
      settled = true;
      clocks.scope.cancel();
      yieldScope.cancel();
      await slo;
      // The receipt's `yielding`, unless a newer move (the SLO's miss) came first: as the yield answered it, or — when the
      // yield did not (it failed, it still runs at the timeout, its write failed) — made here, so the trail keeps the
      // store's order (a move the yield made after all is answered as it stands).
      if (movesInYield && receipts.find((r) => r.receiptId === receiptId)?.state === 'requested') {
        if (yieldingMove) applyMove(receiptId, yieldingMove);
        else await moveTo(receiptId, 'yielding');
      }
      if (outcome === 'released' && releasedMove?.receipt.state === 'released') {
        applyMove(receiptId, releasedMove);
        release(receiptId);
        assess(releasedMove);
      } else await settleReceipt(receipt, outcome, why);
    } catch (err) {
      if (isCancellation(err)) throw err;
      clocks.scope.cancel();
      yieldScope.cancel();
      const why = err instanceof ActivityFailure ? failureOf(err).message : String(err);
      if (receipts.find((r) => r.receiptId === receiptId)?.state !== 'released') {
        await moveTo(receiptId, 'unknown', { why }).catch((again: unknown) => {
          log.warn('receipt not moved to unknown in the store', { receiptId, error: String(again) });
          setReceipt(receiptId, { state: 'unknown' });
        });
        blocked(receipt, 'unknown', why);
      }
    } finally {
      // The yield has really stopped (its cancellation is waited for) before the driver counts as done.
      await yielding;
      setReceipt(receiptId, { driven: true });
      driving -= 1;
    }
  }

  /** A driven receipt settles: released (the replacement may start), or settled for a user to resolve. */
  async function settleReceipt(receipt: HandoffState, outcome: 'released' | 'timeout' | 'unknown' | 'failed', why: string | undefined): Promise<void> {
    if (outcome === 'released') {
      const assessed = await moveTo(receipt.receiptId, 'released');
      release(receipt.receiptId);
      assess(assessed);
      return;
    }
    const moved = await moveTo(receipt.receiptId, outcome, why === undefined ? {} : { why });
    // Released meanwhile by the yield itself (its proof came as the timeout fired): the store's word stands.
    if (moved.receipt.state === 'released') {
      release(receipt.receiptId);
      assess(moved);
      return;
    }
    blocked(receipt, outcome, why);
  }

  /** The Coordinator hears that a handoff settled without a release: it waits for the user. */
  function blocked(receipt: HandoffState, state: string, why: string | undefined): void {
    const because = why === undefined ? '' : ` (${why})`;
    noteEvent(
      receipt.newTaskId
        ? `handoff ${receipt.receiptId} is ${state}${because}: replacement ${receipt.newTaskId} stays blocked until the user resolves it`
        : `handoff ${receipt.receiptId} is ${state}${because}: the cancelled execution of ${receipt.oldTaskId} is not proven stopped until the user resolves it`,
    );
  }

  /**
   * Drives one handoff: asks the old execution to yield, then releases the replacement once the old runtime is
   * quiescent. Two durable timers bound it: at the SLO a miss is recorded; at the timeout the receipt settles as
   * `timeout` (or `unknown` when the yield failed in a way that says nothing) and the replacement stays blocked
   * until a user resolves it.
   */
  async function drive(receiptId: string): Promise<void> {
    driving += 1;
    try {
      const receipt = receipts.find((r) => r.receiptId === receiptId)!;
      await moveTo(receiptId, 'yielding');
      let settled = false;
      // Only the sleeps are cancellable: a recording that has begun always completes.
      const timers = new CancellationScope();
      const slo = timers
        .run(() => sleep(handoffTimes.sloMs))
        .then(
          async () => {
            if (settled) return;
            await moveTo(receiptId, 'yielding', { sloMissed: true });
            sloMisses.add(1);
            publish();
          },
          () => undefined,
        );
      const timeout = timers.run(() => sleep(handoffTimes.timeoutMs)).then(() => 'timeout' as const);
      const yieldCall = handoffActs.yieldExecution({ sessionId: receipt.sessionId, reason: `handoff ${receiptId}`, lease: receipt.lease });
      let outcome: 'released' | 'timeout' | 'unknown' | 'failed' | 'cancelled';
      let why: string | undefined;
      if (since('team-handoff-outcomes')) {
        // The yield answers quiescent, or fails for good (`failed`, at once); anything else waits for the timeout,
        // where one more check tells a runtime known to be still there (`timeout`) from one whose state nobody
        // could learn (`unknown`), and releases one that went quiet at the last moment.
        const yielded = yieldCall.then(
          (r) => (r.quiescent ? ('released' as const) : timeout),
          (err) => {
            if (err instanceof ActivityFailure && err.retryState === RetryState.NON_RETRYABLE_FAILURE) {
              why = failureOf(err).message;
              return 'failed' as const;
            }
            return timeout;
          },
        );
        outcome = await Promise.race([yielded, timeout]).catch(() => 'cancelled' as const);
        if (outcome === 'timeout') {
          const proof = await handoffActs
            .checkQuiescent({ sessionId: receipt.sessionId, lease: receipt.lease })
            .catch((err) => ({ quiescent: false, known: false, why: failureOf(err).message }));
          outcome = proof.quiescent ? 'released' : proof.known ? 'timeout' : 'unknown';
          why = proof.quiescent ? undefined : proof.why;
        }
      } else {
        const yielded = yieldCall.then((r) => (r.quiescent ? ('released' as const) : ('unknown' as const))).catch(() => 'unknown' as const);
        outcome = await Promise.race([yielded, timeout.catch(() => 'cancelled' as const)]);
      }
      settled = true;
      timers.cancel();
      await slo;
      await settleReceipt(receipt, outcome === 'released' || outcome === 'timeout' || outcome === 'failed' ? outcome : 'unknown', why);
      setReceipt(receiptId, { driven: true });
    } finally {
      driving -= 1;
    }
  }

  /** The old execution is gone: the replacement may start with its new owner. */
  function release(receiptId: string): void {
    const receipt = receipts.find((r) => r.receiptId === receiptId)!;
    // The old owner is free, and the replacement (if any) may start.
    if (dispatchWhenDue) dispatchDue = true;
    const next =
      receipt.newTaskId && receipt.newOwner && !userCancelled.includes(receipt.newTaskId) ? { taskId: receipt.newTaskId, owner: receipt.newOwner } : undefined;
    if (!next) return noteEvent(`handoff ${receiptId} released: the old execution of ${receipt.oldTaskId} is stopped`);
    if (!assigned.some((a) => a.taskId === next.taskId)) assigned.push(next);
    noteEvent(`handoff ${receiptId} released: ${next.taskId} starts with ${next.owner}`);
  }

  async function resolveHandoff(input: { receiptId: string; action: 'keep_stopped' | 'release'; reason?: string }): Promise<ReceiptView> {
    const receipt = receipts.find((r) => r.receiptId === input.receiptId)!;
    if (input.action === 'keep_stopped') {
      if (receipt.newTaskId) {
        const cancelled = await asUpdateFailure(
          store.cancelPendingTask({
            teamId: start.teamId,
            eventId: `keep-stopped-${uuid4()}`,
            taskId: receipt.newTaskId,
            reason: input.reason ?? 'the user kept the task stopped',
            kind: 'keep_stopped',
          }),
        );
        knownRevision = Math.max(knownRevision, cancelled.revision);
        noteUserCancelled(receipt.newTaskId);
      }
      // Settled, not released: the rest of the team may deliver, but the old owner stays busy (its runtime was never
      // proven stopped) until a later `release` brings that proof.
      const assessed = await moveTo(receipt.receiptId, receipt.state, { resolution: { action: 'keep_stopped', reason: input.reason ?? null } });
      setReceipt(receipt.receiptId, { resolution: 'keep_stopped' });
      noteEvent(`handoff ${receipt.receiptId}: the user kept ${receipt.oldTaskId} stopped${receipt.newTaskId ? `; ${receipt.newTaskId} is cancelled` : ''}`);
      assess(assessed);
      return publicReceipt(receipt.receiptId);
    }
    const proof = await handoffActs.checkQuiescent({ sessionId: receipt.sessionId, lease: receipt.lease });
    if (!proof.quiescent) throw orchardFailure('old_runtime_not_quiescent', `cannot release ${receipt.receiptId}: ${proof.why}`);
    const assessed = await moveTo(receipt.receiptId, 'released', { resolution: { action: 'release', reason: input.reason ?? null } });
    setReceipt(receipt.receiptId, { resolution: 'release' });
    // After keep_stopped the replacement stays cancelled (release() skips what the user cancelled); the old owner is free.
    release(receipt.receiptId);
    assess(assessed);
    return publicReceipt(receipt.receiptId);
  }

  /** A refused activity under an update: the caller gets its typed code (the store's refusal), not "activity failed". */
  async function asUpdateFailure<T>(call: Promise<T>): Promise<T> {
    try {
      return await call;
    } catch (err) {
      if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure) throw err.cause;
      throw err;
    }
  }

  /** A request id already accepted or being accepted: its retry is answered, whatever the queue's state. */
  function isKnownMessage(requestId: string | undefined): boolean {
    return requestId !== undefined && (storing.includes(requestId) || seenRequests.some(([r]) => r === requestId));
  }

  /** Why a message of `length` characters cannot be queued now (queue cap, or this run's history budget). */
  function queueRefusal(length: number): { code: 'queue_full'; message: string } | undefined {
    if (wake.userMessages.length >= limits.maxQueuedTasks) {
      return {
        code: 'queue_full',
        message: `team ${start.teamId} has ${wake.userMessages.length} messages waiting (limit ${limits.maxQueuedTasks}): retry after the Coordinator has read some`,
      };
    }
    if (workflowInfo().historySize + 2 * length > limits.historyBudgetBytes) {
      return { code: 'queue_full', message: `this run of team ${start.teamId} is at its history budget; it continues-as-new shortly: retry then` };
    }
    return undefined;
  }

  /**
   * Reserve (an id and a place, in arrival order) → store the text → commit (the request id answers retries), or
   * release on a failed store, so a retry is a first attempt and never a duplicate of nothing.
   */
  async function accept(message: MessageInput): Promise<MessageResult> {
    if (!since('team-accept-reserved')) return acceptStoringFirst(message);
    const requestId = message.requestId;
    if (requestId !== undefined && storing.includes(requestId)) await condition(() => !storing.includes(requestId));
    const seen = requestId === undefined ? undefined : seenRequests.find(([r]) => r === requestId);
    if (seen) return { messageId: seen[1], duplicate: true };
    const messageId = `u${nextMessageSeq++}`;
    if (requestId !== undefined) storing.push(requestId);
    wake.userMessages.push({ messageId, stored: false });
    publish();
    try {
      await store.storeTasks([{ executionId, sessionId: start.teamId, taskId: messageId, task: message.text, requestId }]);
    } catch (err) {
      // In place, never replaced: other code may hold the list across an await.
      const at = wake.userMessages.findIndex((m) => m.messageId === messageId);
      if (at >= 0) wake.userMessages.splice(at, 1);
      if (requestId !== undefined) storing.splice(storing.indexOf(requestId), 1);
      publish();
      throw orchardFailure(
        'store_unavailable',
        `the message could not be stored, so it was not accepted: ${err instanceof ActivityFailure ? failureOf(err).message : String(err)}`,
      );
    }
    const at = wake.userMessages.findIndex((m) => m.messageId === messageId);
    if (at >= 0) wake.userMessages[at] = { messageId };
    if (requestId !== undefined) {
      seenRequests.push([requestId, messageId]);
      keep(seenRequests, 500);
      storing.splice(storing.indexOf(requestId), 1);
    }
    publish();
    return { messageId, duplicate: false };
  }

  /** Histories recorded before reserve → store → commit: the dedupe entry went in before the store write. */
  async function acceptStoringFirst(message: MessageInput): Promise<MessageResult> {
    const seen = message.requestId === undefined ? undefined : seenRequests.find(([r]) => r === message.requestId);
    if (seen) return { messageId: seen[1], duplicate: true };
    const messageId = `u${nextMessageSeq++}`;
    if (message.requestId !== undefined) {
      seenRequests.push([message.requestId, messageId]);
      keep(seenRequests, 500);
    }
    await store.storeTasks([{ executionId, sessionId: start.teamId, taskId: messageId, task: message.text, requestId: message.requestId }]);
    wake.userMessages.push({ messageId });
    publish();
    return { messageId, duplicate: false };
  }

  /** A user message may open a Coordinator turn: the first one waiting is stored. */
  const userReady = () => wake.userMessages.length > 0 && wake.userMessages[0].stored !== false;

  function noteEvent(line: string): void {
    wake.events.push(line);
    keep(wake.events, EVENTS_KEPT);
    dirty = true;
  }

  function view(): TeamStatusView {
    const status = archived
      ? 'archived'
      : paused
        ? 'paused'
        : coordinating || wake.userMessages.length > 0 || dirty
          ? 'coordinating'
          : certificate
            ? 'delivered'
            : 'waiting_for_org_event';
    const { outcome, because } = teamOutcome({
      certified: certificate !== undefined,
      archived: archived !== undefined,
      board: boardFacts?.facts,
      handoffs: receipts,
      quiet: status === 'waiting_for_org_event' && running() === 0 && driving === 0 && pendingSettled.length === 0 && pendingEnds.length === 0,
      completionRefused: completionRefusedAt === knownRevision,
    });
    return {
      teamId: start.teamId,
      goal: start.goal,
      status,
      ...(paused ? { paused: { reason: paused.reason } } : {}),
      ...(archived ? { archived: { reason: archived.reason, eventId: archived.eventId } } : {}),
      outcome,
      outcomeBecause: because,
      generation,
      workRevision: knownRevision,
      readRevision,
      members: members.map((m) => ({ ...m, sessionId: sessionOf(m.memberId) })),
      planApproved,
      executions,
      turns,
      replies,
      refusals,
      queuedMessages: wake.userMessages.length,
      ...(refusedSignals > 0 ? { refusedSignals } : {}),
      receipts: receipts.map(({ sessionId: _s, lease: _l, driven: _d, ...r }) => r),
      waiting: receipts.flatMap((r) =>
        r.newTaskId && r.state !== 'released' && r.resolution === undefined
          ? [{ taskId: r.newTaskId, waiting: 'waiting_for_previous_execution' as const, receiptId: r.receiptId }]
          : [],
      ),
      candidate,
      certificate,
      ...(verification ? { verification } : {}),
      summary,
      budget: budget.view(true),
    };
  }

  function publish(): void {
    const v = view();
    const desired: SearchAttributeUpdatePair[] = [
      { key: ORCHARD_KIND, value: 'team' },
      // Runs recorded before outcomes upserted their activity status here; they replay that way.
      { key: ORCHARD_STATUS, value: since('team-outcome-status') ? v.outcome : v.status },
      { key: ORCHARD_HOST, value: start.host },
      ...(receipts.some((r) => r.sloMissed) ? [{ key: ORCHARD_HANDOFF_SLO_MISSED, value: true }] : []),
    ];
    const now = workflowInfo().typedSearchAttributes;
    const changed = desired.filter((pair) => now.get(pair.key) !== pair.value);
    if (changed.length > 0) upsertSearchAttributes(changed);
    setCurrentDetails(teamDetails(v, turnsCompleted));
  }

  /** Starts every assigned task whose owner is free, once the plan is approved. One execution per member at a time. */
  async function dispatchReady(): Promise<void> {
    // Whatever becomes startable from here on asks for another dispatch (this one may have passed its task already).
    if (dispatchWhenDue) dispatchDue = false;
    if (!planApproved || paused || archived) return;
    dispatching += 1;
    try {
      await dispatchAssigned();
    } finally {
      dispatching -= 1;
    }
  }

  async function dispatchAssigned(): Promise<void> {
    for (let i = 0; i < assigned.length;) {
      // A pause or an archive accepted meanwhile: nothing more starts.
      if (paused || archived) return;
      const next = assigned[i];
      // One writer per worktree: a member is busy while it runs an execution, and while a fenced execution of its
      // own is not yet released (its session may still be tearing down in that worktree).
      const busy =
        executions.some((e) => e.memberId === next.owner && e.state === 'running') || receipts.some((r) => r.oldOwner === next.owner && r.state !== 'released');
      if (busy) {
        i++;
        continue;
      }
      // A handoff's replacement waits for its release (the store refuses to start it before): an assignment of it by
      // the Coordinator, or its re-creation, does not start it early. One the user cancelled never starts.
      const held = receipts.some((r) => r.newTaskId === next.taskId && r.state !== 'released');
      const cancelled = userCancelled.includes(next.taskId);
      if ((held || cancelled) && since('team-replacement-waits-for-release')) {
        if (cancelled) assigned.splice(i, 1);
        else i++;
        continue;
      }
      // A Member's session budget is carved at its first dispatch; one the team cannot fund waits for a raise.
      const carved = budget.limit !== undefined && !budget.holds(sessionOf(next.owner)) ? budget.carve(sessionOf(next.owner)) : undefined;
      if (carved && 'code' in carved) {
        budget.exhausted = true;
        i++;
        continue;
      }
      assigned.splice(i, 1);
      const member = members.find((m) => m.memberId === next.owner)!;
      const executionId = uuid4();
      const workflowId = taskExecutionWorkflowId(start.teamId, next.taskId, executionId);
      // Its own workflow, outliving this run (continue-as-new): it reports its end by signal, not as a child result.
      await startChild(teamTaskExecution, {
        workflowId,
        args: [
          {
            teamId: start.teamId,
            taskId: next.taskId,
            executionId,
            memberId: next.owner,
            role: member.role,
            sessionId: sessionOf(next.owner),
            repo: start.repo,
            host: start.host,
            model: start.memberModel,
            ...(carved?.limit !== undefined ? { budgetTokens: carved.limit } : {}),
          },
        ],
        parentClosePolicy: ParentClosePolicy.ABANDON,
        staticSummary: `task ${next.taskId} → ${next.owner}`,
      });
      executions.push({ executionId, workflowId, taskId: next.taskId, memberId: next.owner, sessionId: sessionOf(next.owner), state: 'running' });
      keep(executions, KEPT * 4);
      publish();
    }
  }

  /** Member session turn ends go to that member's running execution (its workflow decides whether it was its task's). */
  async function forwardEnds(): Promise<void> {
    while (pendingEnds.length > 0) {
      const notice = pendingEnds.shift()!;
      for (const execution of executions.filter((e) => e.sessionId === notice.childId && e.state === 'running' && e.workflowId)) {
        await getExternalWorkflowHandle(execution.workflowId!)
          .signal(executionTurnEndedSignal, notice)
          .catch((err) => log.warn('turn end not forwarded', { workflowId: execution.workflowId, error: String(err) }));
      }
    }
  }

  /** Executions that ended: their evidence (or failure) is on the board already; the Coordinator hears of it. */
  function applySettled(): void {
    while (pendingSettled.length > 0) {
      const settled = pendingSettled.shift()!;
      const at = executions.findIndex((e) => e.executionId === settled.executionId);
      // A fenced execution's end is the handoff driver's business, not evidence.
      // A team_closed end is never signalled (its team is gone); one that arrives anyway is no evidence.
      if (at < 0 || executions[at].state !== 'running' || settled.state === 'team_closed') continue;
      const execution = executions[at];
      knownRevision = Math.max(knownRevision, settled.revision);
      if (settled.state === 'not_started') {
        executions.splice(at, 1);
        noteEvent(`task ${execution.taskId} could not start with ${execution.memberId}: ${settled.message ?? 'refused'}`);
        publish();
        continue;
      }
      executions[at] = { ...execution, state: settled.state, sessionTaskId: settled.sessionTaskId, ...(settled.failure ? { failure: settled.failure } : {}) };
      noteBoard(settled.board, settled.candidateRevision ?? settled.revision);
      if (settled.state === 'handed_off') {
        if (certificate || settled.candidate === undefined) continue;
        if (since('team-candidate-revision')) {
          take(settled);
          steerIfReady();
        } else candidate = settled.candidate as TeamStatusView['candidate'];
        continue;
      }
      const because = settled.failure ? ` (${settled.failure.code}: ${excerpt(settled.failure.message, 200)})` : '';
      noteEvent(`task ${execution.taskId} ${settled.state} by ${execution.memberId}${because}${settled.excerpt ? `: ${excerpt(settled.excerpt, 160)}` : ''}`);
      assess(settled);
      publish();
    }
  }

  /** The opening message of a Coordinator turn: the user's words, or the events that woke it. */
  async function openingMessage(): Promise<string> {
    const user = userReady() ? wake.userMessages.shift() : undefined;
    if (user) return user.messageId;
    const messageId = `e${nextMessageSeq++}`;
    const text = [`Work facts changed (revision ${knownRevision}):`, ...wake.events.map((e) => `- ${e}`)].join('\n');
    const coalesced = { kind: 'coordinator' as const, events: wake.events.length };
    wake.events = [];
    await store.storeTasks([{ executionId, sessionId: start.teamId, taskId: messageId, task: text, coalesced }]);
    return messageId;
  }

  async function coordinatorTurn(): Promise<void> {
    const turn = turnsCompleted + 1;
    const turnId = uuid4();
    const startRevision = knownRevision;
    const certifiedBefore = certificate !== undefined;
    dirty = false;
    coordinating = true;
    publish();
    const taskId = await openingMessage();
    const keys = { sessionId: start.teamId, executionId, turnId, turn };
    let modelCalls = 0;
    let toolCalls = 0;
    let outcome: CoordinatorTurnView['outcome'] = 'step_limit';
    let finalExcerpt: string | undefined;
    try {
      for (let step = 1; step <= limits.maxStepsPerTurn; step++) {
        // A pause or an archive stops the Coordinator between steps.
        if (paused || archived) {
          outcome = 'cancelled';
          break;
        }
        modelCalls += 1;
        const answer = await model.modelStep.executeWithOptions({ summary: `Coordinator model call (turn ${turn}, step ${step})` }, [
          {
            ...keys,
            step,
            taskId: step === 1 ? taskId : undefined,
            model: start.model ?? { provider: 'default' },
            profile: 'coordinator',
            context: { title: start.goal, agent: 'coordinator', worktree: '', branch: '', roster: membersText() },
            contextChars: limits.contextChars,
            // Whether a final answer now ends the turn finished or waiting_for_org_event (see below): for the metrics.
            progressed: knownRevision !== startRevision || (certificate !== undefined && !certifiedBefore),
            ...budget.forCall(limits.maxOutputTokens ?? DEFAULT_LIMITS.maxOutputTokens!),
          },
        ]);
        const exhausted = budget.settle(answer, `orchard team budget ${start.teamId} <tokens>`);
        if (exhausted) {
          outcome = 'budget_exhausted';
          finalExcerpt = exhausted.message;
          break;
        }
        if (answer.toolCalls.length === 0) {
          outcome = 'finished';
          finalExcerpt = answer.textExcerpt;
          break;
        }
        for (const [index, call] of answer.toolCalls.entries()) {
          const ref: CallRef = { ...keys, step, callId: call.id };
          toolCalls += 1;
          await executeTool(ref, index, call.name, call.label);
        }
        await dispatchReady();
      }
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      outcome = 'failed';
      finalExcerpt = failureOf(err).message;
    }
    // A turn that committed no fact of its own and approved nothing is a wait for the next org event.
    const certifiedNow = certificate !== undefined && !certifiedBefore;
    if (outcome === 'finished' && knownRevision === startRevision && !certifiedNow) outcome = 'waiting_for_org_event';
    if (certifiedNow) {
      // The final summary cites the certificate, whatever the Coordinator wrote (or failed to write).
      const id = certificate!.certificateId;
      const said = finalExcerpt ?? `(the Coordinator's turn ended ${outcome} without a summary)`;
      summary = { certificateId: id, turn, text: said.includes(id) ? said : `Certificate ${id}. ${said}` };
    }
    turns.push({ turn, turnId, startRevision, endRevision: knownRevision, outcome, modelCalls, toolCalls, finalExcerpt });
    keep(turns, KEPT);
    turnsCompleted = turn;
    turnsThisRun += 1;
    coordinating = false;
    publish();
  }

  function membersText(): string {
    return [
      'Your members (give each task to one of them):',
      'member | role | session',
      ...members.map((m) => `${m.memberId} | ${m.role} | ${sessionOf(m.memberId)}`),
      planApproved ? 'The plan is approved: assigned tasks start with their owners.' : 'The plan is not approved yet: tasks start once you call plan_approve.',
    ].join('\n');
  }

  /** One Coordinator tool call: names outside the allowlist, and a re-read of an unchanged board, are refused here. */
  async function executeTool(ref: CallRef, index: number, name: string, label?: string): Promise<void> {
    const refuse = async (code: string, message: string) => {
      refusals.push({ tool: name, code });
      keep(refusals, KEPT);
      await store.recordCoordinatorResult({ ...ref, index, content: `error (${code}): ${message}; nothing was done`, code });
    };
    if (!isCoordinatorTool(name)) return refuse('tool_not_allowed', `${name} is not one of your tools: you only orchestrate, members do the work`);
    if (archived) return refuse('team_archived', 'the user archived the team: end your turn');
    if (paused) return refuse('team_paused', 'the user paused the team: end your turn; you are woken when it resumes');
    if (name === 'task_list' && readRevision === knownRevision) {
      return refuse(
        'coordinator_no_new_work_facts',
        `the board is unchanged since you read it at revision ${readRevision}; end your turn and you will be woken when something happens`,
      );
    }
    toolsInFlight += 1;
    // A completion that runs the verify command may take as long as that command is allowed, and then some.
    const verifying = name === 'org_run_complete' && start.verify !== undefined;
    const effects = await toolsOn.coordinatorTool
      .executeWithOptions(
        {
          summary: `Coordinator ${label ?? name}`,
          ...(verifying ? { startToCloseTimeout: (start.verify!.timeoutMs ?? DEFAULT_VERIFY_TIMEOUT_MS) + 60_000 } : {}),
        },
        [{ teamId: start.teamId, ref, index, tool: name, members: memberIds, turnsRunning: running() }],
      )
      .finally(() => (toolsInFlight -= 1));
    if (effects.certificate) {
      certificate = effects.certificate;
      candidate = 'certified';
    }
    if (effects.refused) {
      refusals.push({ tool: name, code: effects.refused });
      keep(refusals, KEPT);
    }
    if (effects.revision !== undefined) knownRevision = Math.max(knownRevision, effects.revision);
    if (effects.boardRevision !== undefined) noteBoard(effects.board, effects.boardRevision);
    // A refused completion, or a result whose verify command failed: the run needs someone to act (the Coordinator
    // has it in its tool result; a person sees it in the outcome).
    if (effects.refused === 'completion_refused' || effects.refused === 'verification_failed') completionRefusedAt = knownRevision;
    if (effects.verification) verification = effects.verification;
    if (effects.readRevision !== undefined) {
      readRevision = effects.readRevision;
      // The board may be ahead of what this run was told (an execution's start is committed by its workflow).
      knownRevision = Math.max(knownRevision, readRevision);
    }
    for (const a of effects.assigned ?? []) {
      const waiting = assigned.findIndex((x) => x.taskId === a.taskId);
      if (waiting < 0) assigned.push(a);
      // Assigned again to another member before it started: it starts with its owner on the board.
      else if (assigned[waiting].owner !== a.owner && since('team-replacement-waits-for-release')) assigned[waiting] = a;
    }
    if (effects.planApproved) planApproved = true;
    if (effects.reply) {
      replies.push(effects.reply);
      keep(replies, KEPT);
    }
  }

  // The chain's first run is this activation: a team started again after its run closed is a new generation.
  const opened = await store.openTeam({ ...start, members, activationId: info.firstExecutionRunId, ...(memberSessionIds ? { memberSessionIds } : {}) });
  if (opened.members) memberSessions = opened.members.map((m) => [m.memberId, m.sessionId] as const);
  generation = opened.generation;
  knownRevision = Math.max(knownRevision, opened.workRevision);
  if (!carried) {
    // The goal is the first user message.
    await accept({ text: start.goal, requestId: `goal/${start.teamId}` });
  }
  // A receipt whose driver had not settled when the last run ended is driven again (its clocks start anew).
  for (const r of receipts) {
    if (!r.driven && (r.state === 'requested' || r.state === 'yielding') && since('team-redrive-receipts')) startDriver(r.receiptId, startClocks());
  }
  // The worker's default budget, for a chain started without one (read once, recorded in history).
  if (!carried && start.budgetTokens === undefined && since('budget-default')) {
    const fallback = await store.resolveDefaultBudget();
    if (fallback !== null) budget.setLimit(fallback);
  }
  publish();

  // A run that has done nothing yet never hands over for its size (a budget below a fresh run's history would loop).
  const handOver = () =>
    !archived &&
    (turnsThisRun >= limits.turnsPerRun ||
      workflowInfo().continueAsNewSuggested ||
      (turnsThisRun > 0 && workflowInfo().historySize >= (limits.historyBudgetBytes * 3) / 4));
  // The Coordinator is due: a user message or a new fact, and neither a pause nor an archive in force.
  const coordinatorDue = () => !paused && !archived && !budget.exhausted && (userReady() || dirty);
  for (;;) {
    await condition(() => coordinatorDue() || dispatchDue || archiveDone || pendingEnds.length > 0 || pendingSettled.length > 0 || handOver());
    if (archiveDone) break;
    const pending = coordinatorDue() || dispatchDue || pendingEnds.length > 0 || pendingSettled.length > 0;
    // A busy team still hands over when due: everything pending (wakes, ends, settlements) is carried to the next run.
    if (pending && handOver() && since('team-continue-under-load')) break;
    if (pendingEnds.length > 0) {
      await forwardEnds();
      continue;
    }
    if (pendingSettled.length > 0) {
      applySettled();
      await dispatchReady();
      continue;
    }
    if (dispatchDue) {
      dispatchDue = false;
      await dispatchReady();
      continue;
    }
    if (coordinatorDue()) {
      await dispatchReady();
      await coordinatorTurn();
      continue;
    }
    break;
  }
  await condition(() => driving === 0 && allHandlersFinished());
  await Promise.all(drivers.values());
  if (archiveDone) {
    // The archived run ends here: its outcome (cancelled, or failed with unresolved work) is its result.
    publish();
    return view();
  }
  return continueAsNew<typeof teamRun>({
    start,
    carried: {
      executionId,
      generation,
      knownRevision,
      readRevision,
      planApproved,
      assigned,
      executions,
      wake,
      dirty,
      dispatchDue,
      nextMessageSeq,
      seenRequests,
      turns,
      turnsCompleted,
      replies,
      refusals,
      pendingEnds,
      pendingSettled,
      candidate,
      assessed,
      certificate,
      summary,
      receipts,
      userCancelled,
      answered,
      refusedSignals,
      memberSessions,
      budget: budget.carry(),
      boardFacts,
      completionRefusedAt,
      paused,
      verification,
    },
  });
}
