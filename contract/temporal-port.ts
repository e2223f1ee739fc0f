/**
 * What activities need from Temporal, and nothing more: start a session (bound to its execution chain) and send to
 * it, cancel it, ask whether it is alive, wait for a team's run chain to close, and bind an activity's cancellation to
 * what it waits on. The worker provides it on its own connection and task queue (`OrchardClient` implements it);
 * activities never import the client. Refusals are thrown as `OrchardError` with a code (contract/errors.ts), which
 * activities match on. Whether a team's run or a lease holder is alive reaches host activities as functions of their
 * own (`teamLiveness`, `holderLiveness` in their deps).
 */
import type { BudgetView, CreateSessionRequest, CreateSessionResult, FundChildInput, SendInput, SendResult, SessionStatusView } from './messages';

/** A session's execution chain: the run id it started with (a lease holder names it). */
export interface ChainOptions {
  readonly chain?: string;
  /** Abandons the call (an activity that was cancelled): no request of it outlives its caller. */
  readonly signal?: AbortSignal;
}

export interface SessionLiveness {
  readonly liveness: 'alive' | 'dead' | 'unknown';
  /** Temporal's execution status (RUNNING, COMPLETED, …), NOT_FOUND, or UNKNOWN. */
  readonly execution: string;
  /** Where and since when it runs: workflow id, run id, host. */
  readonly runtime: string;
}

export interface TemporalPort {
  /** Find-or-start `session/<id>`: a running session is bound, never duplicated; the request id makes a retry create once. */
  createSession(request: CreateSessionRequest): Promise<CreateSessionResult>;
  /** Queues a task on the session (its update answers where it sits; a refusal says why). */
  send(sessionId: string, input: SendInput): Promise<SendResult>;
  /** Cancels the session; with `chain`, only that execution chain (a later one is left alone: `session_closed`). */
  cancel(sessionId: string, reason?: string, options?: ChainOptions): Promise<SessionStatusView>;
  /** Whether a session's workflow (of one execution chain, with `chain`) is alive, as Temporal sees it now. */
  sessionLiveness(sessionId: string, options?: ChainOptions): Promise<SessionLiveness>;
  /**
   * Resolves once the session's execution chain (`chain`, from its first run, across continue-as-new) has closed,
   * however it closed, or was never there; a long poll on Temporal, ended early by `signal`.
   */
  sessionClosed(sessionId: string, options: ChainOptions & { chain: string }): Promise<void>;
  /** Resolves once the team's run chain has closed, however it closed, with how; ended early by `signal`. */
  teamClosed(teamId: string, signal: AbortSignal): Promise<string>;
  /** Asks a parent (orchestrator or team workflow id) to carve a child's raise from its budget (`fundChild`). */
  fundChild(parentWorkflowId: string, input: FundChildInput): Promise<BudgetView>;
  /** Binds `signal` to every Temporal call `work` makes: a cancelled activity abandons what it waits on. */
  withAbortSignal<T>(signal: AbortSignal, work: () => Promise<T>): Promise<T>;
}
