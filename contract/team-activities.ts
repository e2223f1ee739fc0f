/**
 * A team's activities as its workflows call them (implemented by activities/team.ts): opening the run, the
 * Coordinator's tool calls against the board, dispatching tasks to Members' sessions and settling their executions,
 * handoffs, and the user's merge. Tool arguments and results stay in Postgres: the workflow gets revisions and the
 * effects it must act on.
 */
import type { MemberSessionIds } from './member-session';
import type { BoardOutcomeFacts, HandoffKind, ModelSpec, StartTeamInput, TeamMergeResult, VerificationView, VerifyTeamResult } from './messages';
import type { CallRef } from './orchestrator-activities';

/**
 * Whether an old execution's runtime is quiescent; when it is not, `known` says whether that is known (its session
 * still runs, a process group of it is not verified gone, its lease is still current) or nobody could tell
 * (Temporal did not answer about its session).
 */
export type Quiescence = { quiescent: true } | { quiescent: false; known: boolean; why: string };

/** A receipt's move as the store answered it: the receipt now; a release or a resolution also assesses the board. */
export type ReceiptMove = { receipt: HandoffReceipt; revision: number } & Partial<BoardAssessment>;

/** A yield's answer; with its receipt given, the moves it made (`released` only when it proved the runtime quiescent). */
export type YieldAnswer = Quiescence & { yielding?: ReceiptMove; released?: ReceiptMove };

/** The old execution's lease as its handoff fenced it; `holder` (absent in receipts of older runs) names its chain. */
export interface FencedLease {
  readonly worktree: string;
  readonly generation: number;
  readonly holder?: string;
}

/** An answer that assessed the board: the completion candidate, the revision it was read at, and the outcome facts. */
export interface BoardAssessment {
  candidate: string;
  candidateRevision: number;
  board?: BoardOutcomeFacts;
}

export interface SettleInput {
  teamId: string;
  taskId: string;
  executionId: string;
  memberId: string;
  outcome: string;
  excerpt?: string;
  /** Why the Member's turn failed or its session closed (its typed code and message): stored on the failed task. */
  failure?: { code: string; message: string };
}

export type SettledAnswer = { revision: number; state: 'completed' | 'failed' | 'handed_off' } & BoardAssessment;

/** What the workflow keeps of a certificate: ids and revisions (the certificate is in Postgres). */
export interface CertificateRef {
  certificateId: string;
  generation: number;
  workRevision: number;
  taskIds: string[];
  outputIds: string[];
  /** The result branch and the commit the certificate names. */
  resultBranch?: string;
  resultHead?: string;
  /** It binds a passing run of the verify command. */
  verified?: boolean;
}

/** What a Coordinator tool call changed that the workflow acts on. */
export interface CoordinatorToolEffects {
  /** The work revision after the call, when it committed a fact. */
  revision?: number;
  /** Board revision the call read (task_list). */
  readRevision?: number;
  /** Tasks that now have an owner and wait for the plan (or for their owner to be free). */
  assigned?: { taskId: string; owner: string }[];
  planApproved?: boolean;
  reply?: string;
  /** The run was certified delivered (the certificate itself is in Postgres and in the tool result). */
  certificate?: CertificateRef;
  /** The call was refused; the code is in the tool result too. */
  refused?: string;
  /** org_run_complete ran the verify command on the result (passing or not). */
  verification?: VerificationView;
  /** After a committed fact: what the board says about the run's outcome, read at `boardRevision`. */
  board?: BoardOutcomeFacts;
  boardRevision?: number;
}

export type ReceiptState = 'requested' | 'yielding' | 'released' | 'timeout' | 'unknown' | 'failed';
/** `reassign`: the work goes on with another member; `cancel`: the user removed it from the run's scope. */
export type { HandoffKind } from './messages';

export interface HandoffReceipt {
  readonly receiptId: string;
  readonly teamId: string;
  readonly oldTaskId: string;
  /** The pending replacement (a reassign); none when the user cancelled the work outright. */
  readonly newTaskId?: string;
  readonly owner: string;
  readonly sessionId: string;
  readonly executionId: string;
  /** The old execution's lease as it was fenced: worktree, holder and the generation it held. */
  readonly lease?: { worktree: string; holder: string; generation: number };
  readonly generation: number;
  readonly state: ReceiptState;
  readonly reason: { kind: HandoffKind; reason: string; userEventId: string; newOwner?: string };
  readonly sloMissed: boolean;
  readonly resolution?: unknown;
}

export interface TeamActivities {
  /**
   * Opens the team's rows (idempotent): the run, its members and their session ids. Answers every member's stored
   * session id: the workflow uses those.
   */
  openTeam(
    start: StartTeamInput & { members: { memberId: string; role: string }[]; activationId?: string; memberSessionIds?: MemberSessionIds },
  ): Promise<{ generation: number; workRevision: number; members: { memberId: string; sessionId: string }[] }>;
  /** Executes one Coordinator tool call and writes its result to the transcript (attributed to the Coordinator's turn). */
  coordinatorTool(input: {
    teamId: string;
    ref: CallRef;
    index: number;
    tool: string;
    members: string[];
    /** Member task executions still running (a closure blocker). */
    turnsRunning?: number;
  }): Promise<CoordinatorToolEffects>;
  /** Records a tool result the workflow decided itself (a refusal before any store query). */
  recordCoordinatorResult(input: CallRef & { index: number; content: string; code?: string }): Promise<void>;
  /** Starts a task's execution: the board marks it in progress and its text goes to the owner's session. */
  dispatchTask(input: {
    teamId: string;
    taskId: string;
    executionId: string;
    memberId: string;
    role: string;
    repo: string;
    host: string;
    parent: string;
    model?: ModelSpec;
    /** The Member's session budget carved from the team's (applies when this dispatch creates the session). */
    budgetTokens?: number;
  }): Promise<{ revision: number; sessionId: string; sessionTaskId?: string }>;
  /** The fence transaction of a reassign: committed before the old execution is asked to yield. */
  fenceHandoff(input: {
    teamId: string;
    eventId: string;
    oldTaskId: string;
    kind: HandoffKind;
    reason: string;
    sessionId: string;
    executionId: string;
    replacement?: { taskId: string; owner: string };
  }): Promise<{ receipt: HandoffReceipt; revision: number }>;
  /** A receipt's next state. A release or a user's resolution may close the board: it answers the candidate too. */
  moveReceipt(input: { teamId: string; receiptId: string; to: ReceiptState; sloMissed?: boolean; resolution?: unknown; why?: string }): Promise<ReceiptMove>;
  /**
   * Asks the old execution to yield (its session is cancelled), then answers whether its runtime is quiescent. Given
   * its `receipt`, it also moves the receipt to `yielding` as it asks and to `released` once the runtime is proven
   * quiescent, answering both moves as the store answered them (the workflow waits one round trip less).
   */
  yieldExecution(input: { sessionId: string; reason: string; lease?: FencedLease; receipt?: { teamId: string; receiptId: string } }): Promise<YieldAnswer>;
  /** Proof that the old runtime is quiescent (for a user's `release` after a timeout). */
  checkQuiescent(input: { sessionId: string; lease?: FencedLease }): Promise<Quiescence>;
  /** A user's archive, after its fences: every pending task cancelled citing the event; the board takes no more writes. */
  archiveBoard(input: { teamId: string; eventId: string; reason: string }): Promise<{ revision: number; cancelled: string[] } & BoardAssessment>;
  /** A task's status on the board; `status` absent when the board has no such task. */
  taskStatus(input: { teamId: string; taskId: string }): Promise<{ status?: string }>;
  /** A user's cancel of a task that is not running, or "keep stopped" (cancels only a handoff's replacement). */
  cancelPendingTask(input: {
    teamId: string;
    eventId: string;
    taskId: string;
    reason: string;
    kind: 'keep_stopped' | 'cancel';
  }): Promise<{ revision: number } & BoardAssessment>;
  /** Returns once the team's run chain has closed, with how (a long poll on Temporal). */
  awaitTeamClosed(input: { teamId: string }): Promise<{ closed: string }>;
  /** The owner's execution ended: its evidence (or its failure), attributed to the Member's execution. */
  settleExecution(input: SettleInput): Promise<SettledAnswer>;
}

/** Team activities bound to the repository's disk (they run on the team host's queue). */
export interface TeamHostActivities {
  /** A user's merge of a delivered run: the certified result commit into the team's protected branch. */
  mergeTeamResult(input: { teamId: string; certificateId: string }): Promise<{ result: TeamMergeResult; revision?: number }>;
  /** `orchard team verify`: the certificate's verify command again on its result tree (one run per request id). */
  reverifyTeam(input: { teamId: string; certificateId: string; requestId: string }): Promise<VerifyTeamResult>;
}
