import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import {
  Client,
  Connection,
  WorkflowFailedError,
  WorkflowNotFoundError,
  QueryNotRegisteredError,
  WorkflowExecutionAlreadyStartedError,
  WorkflowUpdateFailedError,
  WithStartWorkflowOperation,
  type WorkflowHandle,
} from '@temporalio/client';
import { ApplicationFailure, TypedSearchAttributes, WorkflowIdConflictPolicy, WorkflowIdReusePolicy, type QueryDefinition } from '@temporalio/common';
import { isErrorCode } from '../contract/errors';
import {
  SESSION_WORKFLOW_TYPE,
  HOST_PREFLIGHT_WORKFLOW_TYPE,
  type HostPreflightInput,
  type Problem,
  type RepositoryCheck,
  DEFAULT_TEAM_MEMBERS,
  ORCHESTRATOR_WORKFLOW_TYPE,
  cancelUpdate,
  resolveHoldUpdate,
  type ResolveHoldInput,
  type ResolveHoldResult,
  createSessionProblem,
  messageProblem,
  messageUpdate,
  orchestratorStatusQuery,
  orchestratorStartQuery,
  startTeamProblem,
  cancelTaskUpdate,
  pauseTeamUpdate,
  resumeTeamUpdate,
  archiveTeamUpdate,
  reassignTaskUpdate,
  mergeTeamUpdate,
  verifyTeamUpdate,
  type VerifyTeamResult,
  resolveHandoffUpdate,
  type CancelTaskInput,
  type TeamLifecycleInput,
  type TeamLifecycleResult,
  type CancelTaskResult,
  type ReassignInput,
  type ReceiptView,
  type ResolveHandoffInput,
  TEAM_WORKFLOW_TYPE,
  teamWorkflowId,
  teamStatusQuery,
  teamStartQuery,
  teamMessageUpdate,
  type StartTeamInput,
  type TeamStatusView,
  type TeamMergeResult,
  startOrchestratorProblem,
  orchestratorWorkflowId,
  rosterQuery,
  type MessageInput,
  type MessageResult,
  type OrchestratorStatusView,
  type StartOrchestratorInput,
  createUpdate,
  sendProblem,
  sendSignal,
  sendUpdate,
  sessionIdFromWorkflowId,
  sessionWorkflowId,
  hostTaskQueue,
  statusQuery,
  transcriptRefsQuery,
  type CreateSessionInput,
  type SendInput,
  type SendResult,
  type SessionStatus,
  type SessionStatusView,
  type TranscriptRefs,
  type TurnRef,
  type SessionWorkflowInput,
  type OrchestratorWorkflowInput,
  type TeamWorkflowInput,
  type CreateSessionRequest,
  type CreateSessionResult,
  fundChildUpdate,
  setBudgetProblem,
  setBudgetUpdate,
  type BudgetView,
  type FundChildInput,
} from '../contract/messages';
import { temporal } from '@temporalio/proto';
import type { ChainOptions, SessionLiveness, TemporalPort } from '../contract/temporal-port';
import { ORCHARD_HOST, ORCHARD_KIND, ORCHARD_PARENT, ORCHARD_STATUS } from '../contract/search-attributes';
import { sessionBranch } from '../contract/ids';
import { mdBlocks, mdCode, mdText } from '../contract/markdown';
import {
  DEFAULT_NAMESPACE,
  TemporalConfigError,
  clientConnectionOptions,
  dataConverterFromEnv,
  loadTemporalSettings,
  type TemporalSettings,
} from './connection';
import { PayloadDecryptionError, PayloadKeyError } from './codec';
import { OrchardError } from './errors';

export { OrchardError } from './errors';

export interface OrchardClientOptions {
  /** The shared task queue the workers poll. */
  taskQueue: string;
  /** Host for sessions that do not name one: this machine's ORCHARD_HOST_ID or hostname. */
  defaultHost?: string;
}

export interface SessionSummary {
  sessionId: string;
  title: string;
  agent: string;
  host: string;
  status: SessionStatus | 'unknown';
  /** The Temporal execution status (RUNNING, COMPLETED, FAILED, …). */
  execution: string;
  startTime: Date;
}

/** An activity a workflow waits on (`pendingCalls`). */
export interface PendingCall {
  /** The activity type: `modelStep` (a model call), `executeTool`, a store call, … */
  activity: string;
  /** 1 on the first attempt; more while Temporal retries it. */
  attempt: number;
  /** Why the last attempt failed, when one did. */
  lastError?: string;
  /** When the next attempt is due, while it waits to retry. */
  nextAttemptAt?: string;
}

/** An orchestrator or a team run as `orchestrator list` / `team list` show it. */
export interface RunSummary {
  id: string;
  kind: 'orchestrator' | 'team';
  /** Its Orchard status (the `OrchardStatus` search attribute), or running/closed when it has none. */
  status: string;
  /** The Temporal execution status (RUNNING, COMPLETED, CANCELED, …). */
  execution: string;
  host: string;
  startTime: Date;
}

/** What `cancelRun` did. */
export interface CancelRunResult {
  id: string;
  kind: 'orchestrator' | 'team';
  /** The run's Temporal execution status once closed (CANCELED, or how it had closed before). */
  execution: string;
  /** It had closed before this cancel. */
  alreadyClosed: boolean;
  /** The sessions it started that were open and are now cancelled. */
  sessionsClosed: string[];
}

/** The typed client services import: every call maps Temporal errors to an OrchardError with a code. */
export class OrchardClient implements TemporalPort {
  readonly defaultHost: string;

  constructor(
    readonly temporal: Client,
    private readonly options: OrchardClientOptions,
  ) {
    this.defaultHost = options.defaultHost ?? process.env.ORCHARD_HOST_ID ?? hostname();
  }

  /**
   * Connects with the given address (and namespace, TLS, API key), or, without an address, with the settings the
   * Temporal CLI would use (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*, temporal.toml).
   */
  static async connect(options: OrchardClientOptions & Partial<TemporalSettings>): Promise<OrchardClient> {
    let settings: TemporalSettings;
    let dataConverter: ReturnType<typeof dataConverterFromEnv>;
    try {
      settings = options.address ? { ...options, namespace: options.namespace ?? DEFAULT_NAMESPACE } : loadTemporalSettings();
      // Payload encryption (ORCHARD_PAYLOAD_KEY*): bad key material is refused here, before connecting.
      dataConverter = dataConverterFromEnv();
    } catch (err) {
      if (err instanceof TemporalConfigError || err instanceof PayloadKeyError) throw new OrchardError(err.code, err.message);
      throw err;
    }
    // No address anywhere: the SDK's default, localhost:7233, where the embedded dev server listens.
    const connection = await Connection.connect(settings.address ? clientConnectionOptions({ ...settings, address: settings.address }) : {});
    return new OrchardClient(new Client({ connection, namespace: settings.namespace, ...(dataConverter ? { dataConverter } : {}) }), options);
  }

  async close(): Promise<void> {
    await this.temporal.connection.close();
  }

  /**
   * Whether a worker polls `host`'s queue (`orchard-host-<host>`) for worktree activities — now or within the last few
   * minutes, as Temporal remembers pollers. A session, orchestrator or team on a host nobody serves would wait for it.
   */
  async hostServed(host: string): Promise<boolean> {
    const response = await this.temporal.workflowService.describeTaskQueue({
      namespace: this.temporal.options.namespace,
      taskQueue: { name: hostTaskQueue(host), kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
      taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    });
    return (response.pollers ?? []).length > 0;
  }

  /**
   * Asks `host`'s worker to check a repository (and a scenario file) there, as `session create` checks one on this
   * host before anything starts: the problem it finds (`repository_not_found`, `invalid_input` for a base that names
   * no commit, `scenario_invalid`, `host_unavailable` when its worker does not take the check in time), or undefined.
   * A short workflow on the shared queue runs the check on the host's queue; it creates nothing else.
   */
  async checkOnHost(host: string, check: RepositoryCheck, { hostWaitSeconds = 30 }: { hostWaitSeconds?: number } = {}): Promise<Problem | undefined> {
    const input: HostPreflightInput = { host, check, hostWaitSeconds };
    const problem = await this.temporal.workflow.execute<(i: HostPreflightInput) => Promise<Problem | null>>(HOST_PREFLIGHT_WORKFLOW_TYPE, {
      workflowId: `preflight/${host}/${randomUUID()}`,
      taskQueue: this.options.taskQueue,
      args: [input],
      workflowExecutionTimeout: `${hostWaitSeconds + 180} seconds`,
      typedSearchAttributes: new TypedSearchAttributes([
        { key: ORCHARD_KIND, value: 'preflight' },
        { key: ORCHARD_HOST, value: host },
      ]),
      staticSummary: `check ${check.repo} on host ${host}`,
    });
    return problem ?? undefined;
  }

  /** Binds `signal` to every Temporal call `work` makes on this client (an activity's cancellation, for one). */
  withAbortSignal<T>(signal: AbortSignal, work: () => Promise<T>): Promise<T> {
    return this.temporal.withAbortSignal(signal, work);
  }

  /**
   * Find-or-start `session/<id>`. A running session is bound, never duplicated: the task, if any, is sent to
   * it. A closed one gets a new run on the same worktree and branch (its lease is taken over only when the old
   * run is provably gone; otherwise the new run fails with `worktree_liveness_unknown`).
   */
  async createSession(request: CreateSessionRequest): Promise<CreateSessionResult> {
    const requestId = request.requestId ?? randomUUID();
    const { context, parentConversation, ...create } = request;
    const input: CreateSessionInput = { ...create, host: request.host ?? this.defaultHost, requestId };
    const problem = createSessionProblem({ ...input, context, parentConversation });
    if (problem) throw new OrchardError(problem.code, problem.message);
    // The task (and the starting context) travel in the update, not in the start input: stored once, and
    // continue-as-new never carries them again.
    const args: SessionWorkflowInput = { create: { ...input, task: undefined } };
    const searchAttributes = [
      { key: ORCHARD_KIND, value: 'session' },
      { key: ORCHARD_STATUS, value: 'progressing' },
      { key: ORCHARD_HOST, value: input.host },
      ...(input.parent ? [{ key: ORCHARD_PARENT, value: input.parent }] : []),
    ];
    // One idempotent call (update-with-start): starts the session unless it runs, then binds this request to it.
    const start = new WithStartWorkflowOperation(SESSION_WORKFLOW_TYPE, {
      workflowId: sessionWorkflowId(input.sessionId),
      taskQueue: this.options.taskQueue,
      args: [args],
      workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
      workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      typedSearchAttributes: new TypedSearchAttributes(searchAttributes),
      memo: { title: input.title, agent: input.agent ?? 'coder', host: input.host, repo: input.repo },
      staticSummary: `session ${mdText(input.sessionId)}: ${mdText(input.title, 160)}`,
      staticDetails: mdBlocks([
        `**session** ${mdText(input.title)} · agent ${mdCode(input.agent ?? 'coder')}`,
        `repo ${mdCode(input.repo)} on host ${mdCode(input.host)}, branch ${mdCode(sessionBranch(input.sessionId))}`,
        input.parent ? `parent ${mdCode(input.parent)}` : 'started directly (no orchestrator)',
      ]),
    });
    const result = await this.mapErrors(input.sessionId, () =>
      this.temporal.workflow.executeUpdateWithStart(createUpdate, {
        args: [{ requestId, task: input.task, from: input.parent, context, parentConversation }],
        updateId: requestId,
        startWorkflowOperation: start,
      }),
    );
    const message =
      result.outcome === 'created'
        ? `created session ${input.sessionId}`
        : `session ${input.sessionId} is already running on its worktree: bound to it, no second agent started` +
          (input.task ? '; the task was sent to it' : '');
    return { outcome: result.outcome, session: result.session, task: result.task, requestId, message };
  }

  /** Starts `orchestrator/<id>` (or finds it running): the session that routes work into its children. */
  async startOrchestrator(input: Omit<StartOrchestratorInput, 'host'> & { host?: string }): Promise<void> {
    const start: StartOrchestratorInput = { ...input, host: input.host ?? this.defaultHost };
    const problem = startOrchestratorProblem(start);
    if (problem) throw new OrchardError(problem.code, problem.message);
    const args: OrchestratorWorkflowInput = { start };
    const workflowId = orchestratorWorkflowId(start.orchestratorId);
    await this.refuseOtherSettings(workflowId, orchestratorStartQuery, { ...input, host: start.host });
    await this.startOrFind(ORCHESTRATOR_WORKFLOW_TYPE, workflowId, args, {
      kind: 'orchestrator',
      host: start.host,
      summary: `orchestrator ${mdText(start.orchestratorId)}${start.title ? `: ${mdText(start.title, 160)}` : ''}`,
      details: mdBlocks([
        `**orchestrator** ${mdText(start.title ?? start.orchestratorId)}`,
        `repo ${mdCode(start.repo)} on host ${mdCode(start.host)}`,
        `routes work into child sessions (\`session/<child>\`); talk to it with ${mdCode(`orchard orchestrator send ${start.orchestratorId} <message>`)}`,
      ]),
    });
  }

  /** Starts `team/<id>` (or finds it running): a Coordinator and its Members on one repository, toward a goal. */
  async startTeam(input: Omit<StartTeamInput, 'host'> & { host?: string }): Promise<void> {
    const start: StartTeamInput = { ...input, host: input.host ?? this.defaultHost };
    const problem = startTeamProblem(start);
    if (problem) throw new OrchardError(problem.code, problem.message);
    const args: TeamWorkflowInput = { start };
    const workflowId = teamWorkflowId(start.teamId);
    await this.refuseOtherSettings(workflowId, teamStartQuery, { ...input, host: start.host });
    await this.startOrFind(TEAM_WORKFLOW_TYPE, workflowId, args, {
      kind: 'team',
      host: start.host,
      summary: `team ${mdText(start.teamId)}: ${mdText(start.goal, 120)}`,
      details: mdBlocks([
        `**team run** · goal: ${mdText(start.goal, 500)}`,
        `repo ${mdCode(start.repo)} on host ${mdCode(start.host)}`,
        `members: ${(start.members ?? DEFAULT_TEAM_MEMBERS).map((m) => `${mdCode(m.memberId)} (${mdText(m.role)})`).join(', ')}`,
        `talk to its Coordinator with ${mdCode(`orchard team send ${start.teamId} <message>`)}`,
      ]),
    });
  }

  /**
   * A start of a running orchestrator or team run is idempotent only with the settings it runs with: each setting the
   * request gives must equal the running one's, or the start is refused (`already_running_with`, naming each
   * difference) and nothing changes. A run from before the `start` query cannot say, and is found as before.
   */
  private async refuseOtherSettings<S extends object>(workflowId: string, query: QueryDefinition<S>, requested: S): Promise<void> {
    const handle = this.temporal.workflow.getHandle(workflowId);
    let running: S;
    try {
      if ((await handle.describe()).status.name !== 'RUNNING') return;
      running = await whenScheduled(() => handle.query(query));
    } catch (err) {
      if (err instanceof WorkflowNotFoundError || isNotFound(err) || err instanceof QueryNotRegisteredError) return;
      throw err;
    }
    const differences = settingsDifferences(running, requested);
    if (differences.length > 0) {
      throw new OrchardError(
        'already_running_with',
        `${workflowId} is running with other settings (${differences.join('; ')}): start it again with the settings it runs with, ` +
          'or cancel it and start anew',
      );
    }
  }

  /** Starts a long-lived workflow on the shared queue, or leaves the running one with that id as it is. */
  private async startOrFind(
    type: string,
    workflowId: string,
    args: unknown,
    meta: { kind: string; host: string; summary: string; details: string },
  ): Promise<void> {
    try {
      await this.temporal.workflow.start(type, {
        workflowId,
        taskQueue: this.options.taskQueue,
        args: [args],
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
        typedSearchAttributes: new TypedSearchAttributes([
          { key: ORCHARD_KIND, value: meta.kind },
          { key: ORCHARD_HOST, value: meta.host },
        ]),
        // The Web UI shows these on the workflow's page (as Markdown): what it is, on which repository and host, toward what.
        staticSummary: meta.summary,
        staticDetails: meta.details,
      });
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
  }

  async teamStatus(teamId: string): Promise<TeamStatusView> {
    return this.teamCall(teamId, (h) => whenScheduled(() => h.query(teamStatusQuery)));
  }

  /** A user message to a team's Coordinator (an update: answered once accepted, with its id). */
  async teamMessage(teamId: string, input: MessageInput): Promise<MessageResult> {
    const problem = messageProblem(input);
    if (problem) throw new OrchardError(problem.code, problem.message);
    // The team deduplicates request ids itself (across continue-as-new too): a retry after a lost response is
    // answered with the first message's id, marked a duplicate.
    const message = { ...input, requestId: input.requestId ?? randomUUID() };
    return this.teamCall(teamId, (h) => h.executeUpdate(teamMessageUpdate, { args: [message] }));
  }

  /** A call to `team/<id>`: a refused update keeps its code, a team that does not exist is `team_not_found`. */
  private async teamCall<T>(teamId: string, fn: (handle: WorkflowHandle) => Promise<T>): Promise<T> {
    try {
      return await fn(this.temporal.workflow.getHandle(teamWorkflowId(teamId)));
    } catch (err) {
      rethrowUpdateRefusal(err);
      if (err instanceof WorkflowNotFoundError || isNotFound(err)) {
        // An update to a run that has ended (an archived team, a cancelled one) is "not found" to Temporal too.
        const closed = await this.temporal.workflow
          .getHandle(teamWorkflowId(teamId))
          .describe()
          .then((d) => (d.status.name === 'RUNNING' ? undefined : d.status.name.toLowerCase()))
          .catch(() => undefined);
        if (closed) throw new OrchardError('team_not_running', `team ${teamId} has ended (${closed}): it takes no more requests`);
        throw new OrchardError('team_not_found', `no team ${teamId}: start it with \`orchard team start ${teamId} --repo <path> --goal <text>\``);
      }
      throw err;
    }
  }

  /**
   * Reassigns a running task (a handoff): answered with the receipt once the fence has committed. The request id (one
   * is made when absent) is the update id, and the team remembers it: a retry after a lost response answers the same
   * receipt instead of a refusal for work that was already handed off.
   */
  async reassignTask(teamId: string, input: ReassignInput): Promise<ReceiptView> {
    const request = { ...input, requestId: input.requestId ?? randomUUID() };
    return this.teamCall(teamId, (h) => h.executeUpdate(reassignTaskUpdate, { args: [request], updateId: request.requestId }));
  }

  /** The user removes a task from the run's scope (running work is fenced and stopped, with a receipt); idempotent by request id. */
  async cancelTask(teamId: string, input: CancelTaskInput): Promise<CancelTaskResult> {
    const request = { ...input, requestId: input.requestId ?? randomUUID() };
    return this.teamCall(teamId, (h) => h.executeUpdate(cancelTaskUpdate, { args: [request], updateId: request.requestId }));
  }

  /**
   * A user's pause, resume or archive of a whole team run; idempotent by request id (a retry answers the first).
   * Refused (typed, nothing changed): `team_paused`, `team_not_paused`, `team_archived`, `run_delivered`.
   */
  async teamLifecycle(teamId: string, action: 'pause' | 'resume' | 'archive', input: TeamLifecycleInput): Promise<TeamLifecycleResult> {
    const request = { ...input, requestId: input.requestId ?? randomUUID() };
    const definition = { pause: pauseTeamUpdate, resume: resumeTeamUpdate, archive: archiveTeamUpdate }[action];
    return this.teamCall(teamId, (h) => h.executeUpdate(definition, { args: [request], updateId: request.requestId }));
  }

  /** Resolves a handoff that timed out: keep_stopped, or release with proof the old runtime is quiescent; idempotent by request id. */
  async resolveHandoff(teamId: string, input: ResolveHandoffInput): Promise<ReceiptView> {
    const request = { ...input, requestId: input.requestId ?? randomUUID() };
    return this.teamCall(teamId, (h) => h.executeUpdate(resolveHandoffUpdate, { args: [request], updateId: request.requestId }));
  }

  /**
   * Merges a delivered team's result into its protected branch (a user action): refused `not_delivered` without a
   * certificate; `checkout_dirty` when the branch is checked out with uncommitted changes; `merge_conflict` when the
   * branch moved since certification and no longer merges. A repeat answers the same result and changes nothing.
   */
  async mergeTeam(teamId: string, options: { requestId?: string } = {}): Promise<TeamMergeResult> {
    return this.teamCall(teamId, (h) => h.executeUpdate(mergeTeamUpdate, { updateId: options.requestId ?? randomUUID() }));
  }

  /**
   * Runs the delivered team's verify command again on its certified tree (`orchard team verify`): whether it still
   * passes and whether its output matches the certified digest. Refused `not_delivered` without a certificate,
   * `verification_not_configured` when the certificate binds no verification. One run per request id.
   */
  async verifyTeam(teamId: string, options: { requestId?: string } = {}): Promise<VerifyTeamResult> {
    const requestId = options.requestId ?? randomUUID();
    return this.teamCall(teamId, (h) => h.executeUpdate(verifyTeamUpdate, { args: [{ requestId }], updateId: requestId }));
  }

  /** A user message to an orchestrator (an update: answered once it is accepted, with its id). */
  async message(orchestratorId: string, input: MessageInput): Promise<MessageResult> {
    const problem = messageProblem(input);
    if (problem) throw new OrchardError(problem.code, problem.message);
    const message = { ...input, requestId: input.requestId ?? randomUUID() };
    // No update id: the workflow deduplicates request ids itself (across continue-as-new too), so a repeat is
    // answered `duplicate: true` with the first message's id instead of a replay of the first answer.
    return this.orchestratorCall(orchestratorId, (h) => h.executeUpdate(messageUpdate, { args: [message] }));
  }

  async orchestratorStatus(orchestratorId: string): Promise<OrchestratorStatusView> {
    return this.orchestratorCall(orchestratorId, (h) => whenScheduled(() => h.query(orchestratorStatusQuery)));
  }

  async roster(orchestratorId: string): Promise<string> {
    return this.orchestratorCall(orchestratorId, (h) => whenScheduled(() => h.query(rosterQuery)));
  }

  /**
   * Waits until the orchestrator has finished the turn that answered `messageId` (the turn whose `taskId` is the
   * message id) and returns it with the status it was read from. A client-side wait: it asks the status query
   * every `intervalMs`. The status keeps the most recent turns only, so wait soon after sending.
   */
  async waitForMessageTurn(
    orchestratorId: string,
    messageId: string,
    { timeoutMs = 120_000, intervalMs = 200 }: { timeoutMs?: number; intervalMs?: number } = {},
  ): Promise<{ turn: TurnRef; status: OrchestratorStatusView }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const status = await this.orchestratorStatus(orchestratorId);
      const turn = status.turns.find((t) => t.taskId === messageId);
      if (turn) return { turn, status };
      if (Date.now() > deadline) {
        throw new OrchardError(
          'wait_timeout',
          `orchestrator ${orchestratorId} has not finished the turn for message ${messageId} after ${timeoutMs} ms ` +
            `(${status.status}, ${status.queued} queued); check it with \`orchard orchestrator status ${orchestratorId}\``,
        );
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  }

  private async orchestratorCall<T>(orchestratorId: string, fn: (handle: WorkflowHandle) => Promise<T>): Promise<T> {
    const handle = this.temporal.workflow.getHandle(orchestratorWorkflowId(orchestratorId));
    try {
      return await fn(handle);
    } catch (err) {
      rethrowUpdateRefusal(err);
      if (err instanceof WorkflowNotFoundError || isNotFound(err)) {
        const closed = await handle.describe().then(
          (d) => d.status.name !== 'RUNNING',
          () => false,
        );
        if (closed) throw new OrchardError('orchestrator_closed', `orchestrator ${orchestratorId} is closed: start a new one`);
        throw new OrchardError(
          'orchestrator_not_found',
          `no orchestrator ${orchestratorId}: start it with \`orchard orchestrator start ${orchestratorId} --repo <path>\``,
        );
      }
      throw err;
    }
  }

  /** Queues a task (an update: the answer says where it sits, a refusal says why). */
  async send(sessionId: string, input: SendInput | string): Promise<SendResult> {
    const send = normalizeSend(input);
    // No update id: the session deduplicates request ids itself (across continue-as-new too), so a repeat is answered
    // `duplicate: true` with the first task's id. With the request id as update id, Temporal would replay the first
    // answer (`duplicate: false`) within a run instead.
    return this.call(sessionId, (handle) => handle.executeUpdate(sendUpdate, { args: [send] }));
  }

  /** Fire-and-forget send, for services that cannot wait; invalid input is refused here, before signalling. */
  async signalSend(sessionId: string, input: SendInput | string): Promise<void> {
    const send = normalizeSend(input);
    await this.call(sessionId, (handle) => handle.signal(sendSignal, send));
  }

  async status(sessionId: string): Promise<SessionStatusView> {
    return this.call(sessionId, (handle) => whenScheduled(() => handle.query(statusQuery)));
  }

  /**
   * The activities the session's workflow waits on now, as Temporal sees them: which (model call, tool call, store),
   * the attempt, and the error of the last failed attempt with when the next one is due — a model endpoint that is
   * down shows here while `status` still reads `progressing`.
   */
  async pendingCalls(sessionId: string): Promise<PendingCall[]> {
    const description = await this.call(sessionId, (handle) => handle.describe());
    return (description.raw.pendingActivities ?? []).map((p) => {
      const next = p.nextAttemptScheduleTime?.seconds;
      return {
        activity: p.activityType?.name ?? 'unknown',
        attempt: p.attempt ?? 1,
        ...(p.lastFailure?.message ? { lastError: p.lastFailure.message } : {}),
        ...(next ? { nextAttemptAt: new Date(Number(next) * 1000).toISOString() } : {}),
      };
    });
  }

  /**
   * Whether a session's workflow is alive, as Temporal sees it now: `alive` while running, `dead` once closed or
   * when there is none, `unknown` when Temporal could not be asked.
   */
  async sessionLiveness(sessionId: string, options: ChainOptions = {}): Promise<SessionLiveness> {
    return livenessOf(this.handle(sessionId), options.chain);
  }

  /**
   * Resolves once the session's execution chain (`chain`: its first run id, followed across continue-as-new) has
   * closed, however it closed, or was never there: a long poll on Temporal, ended early by `options.signal`.
   */
  async sessionClosed(sessionId: string, options: ChainOptions & { chain: string }): Promise<void> {
    await this.closeOf(this.temporal.workflow.getHandle(sessionWorkflowId(sessionId), options.chain), options.signal);
  }

  /**
   * Waits for a workflow chain to close (a long poll on its result): COMPLETED, FAILED (failed, cancelled or
   * terminated: its result rejects) or NOT_FOUND; throws when `signal` ends the wait first, or on a fault.
   */
  private async closeOf(handle: WorkflowHandle, signal?: AbortSignal): Promise<'COMPLETED' | 'FAILED' | 'NOT_FOUND'> {
    try {
      await (signal ? this.temporal.withAbortSignal(signal, () => handle.result()) : handle.result());
      return 'COMPLETED';
    } catch (err) {
      if (signal?.aborted) throw err;
      if (err instanceof WorkflowNotFoundError || isNotFound(err)) return 'NOT_FOUND';
      if (err instanceof WorkflowFailedError) return 'FAILED';
      throw err;
    }
  }

  /**
   * Resolves once the team's run chain (`team/<id>`, across continue-as-new) has closed, however it closed
   * (completed, failed, cancelled, terminated), with how; a long poll on Temporal, ended early by `signal`.
   */
  async teamClosed(teamId: string, signal: AbortSignal): Promise<string> {
    const handle = this.temporal.workflow.getHandle(teamWorkflowId(teamId));
    const how = await this.closeOf(handle, signal);
    // Failed, cancelled or terminated: which one, as Temporal tells it.
    return how === 'FAILED' ? ((await handle.describe().catch(() => undefined))?.status.name ?? 'CLOSED') : how;
  }

  /** Whether a team's run (`team/<id>`) is alive, as for a session. */
  async teamLiveness(teamId: string): Promise<SessionLiveness> {
    return livenessOf(this.temporal.workflow.getHandle(teamWorkflowId(teamId)));
  }

  async transcriptRefs(sessionId: string): Promise<TranscriptRefs> {
    return this.call(sessionId, (handle) => whenScheduled(() => handle.query(transcriptRefsQuery)));
  }

  /**
   * Raises (or sets) the session's token budget; a session that waited for budget runs its queue again. A budget carved
   * from an orchestrator or team is raised out of that parent's (`budget_insufficient` when it has too little left).
   */
  async setBudget(sessionId: string, limit: number, requestId: string = randomUUID()): Promise<BudgetView> {
    const input = { limit, requestId };
    const problem = setBudgetProblem(input);
    if (problem) throw new OrchardError(problem.code, problem.message);
    return this.call(sessionId, (handle) => handle.executeUpdate(setBudgetUpdate, { args: [input] }));
  }

  /** Raises (or sets) an orchestrator's token budget, out of which its children's budgets are carved. */
  async setOrchestratorBudget(orchestratorId: string, limit: number, requestId: string = randomUUID()): Promise<BudgetView> {
    const input = { limit, requestId };
    const problem = setBudgetProblem(input);
    if (problem) throw new OrchardError(problem.code, problem.message);
    return this.orchestratorCall(orchestratorId, (handle) => handle.executeUpdate(setBudgetUpdate, { args: [input] }));
  }

  /** Raises (or sets) a team's token budget, out of which its Members' budgets are carved. */
  async setTeamBudget(teamId: string, limit: number, requestId: string = randomUUID()): Promise<BudgetView> {
    const input = { limit, requestId };
    const problem = setBudgetProblem(input);
    if (problem) throw new OrchardError(problem.code, problem.message);
    return this.teamCall(teamId, (handle) => handle.executeUpdate(setBudgetUpdate, { args: [input] }));
  }

  /** Asks a parent (orchestrator or team workflow id) to carve a child's raise from its budget. */
  async fundChild(parentWorkflowId: string, input: FundChildInput): Promise<BudgetView> {
    try {
      return await this.temporal.workflow.getHandle(parentWorkflowId).executeUpdate(fundChildUpdate, { args: [input] });
    } catch (err) {
      rethrowUpdateRefusal(err);
      if (err instanceof WorkflowNotFoundError || isNotFound(err)) {
        throw new OrchardError('budget_insufficient', `${parentWorkflowId}, which funds this budget, is not running: it cannot fund a raise`);
      }
      throw err;
    }
  }

  /** Resolves the session's verification hold (a user's decision, recorded with `by` and `note`). */
  async resolveHold(sessionId: string, input: ResolveHoldInput = {}): Promise<ResolveHoldResult> {
    return this.call(sessionId, (handle) => handle.executeUpdate(resolveHoldUpdate, { args: [input] }));
  }

  /**
   * Cancels the session. With `chain`, only the execution chain that started with that run is cancelled: when another
   * chain of the same id runs now (the session was closed and created again), it is left alone and the answer is
   * `session_closed`.
   */
  async cancel(sessionId: string, reason?: string, options: ChainOptions = {}): Promise<SessionStatusView> {
    const bounded = <T>(fn: () => Promise<T>) => (options.signal ? this.temporal.withAbortSignal(options.signal, fn) : fn());
    if (options.chain === undefined) return this.call(sessionId, (handle) => bounded(() => handle.executeUpdate(cancelUpdate, { args: [{ reason }] })));
    const live = await livenessOf(this.handle(sessionId), options.chain);
    if (live.liveness === 'dead')
      throw new OrchardError('session_closed', `session ${sessionId}'s execution chain ${options.chain} is closed (${live.execution})`);
    const handle = this.temporal.workflow.getHandle(sessionWorkflowId(sessionId), undefined, { firstExecutionRunId: options.chain });
    return this.mapErrors(sessionId, () => bounded(() => handle.executeUpdate(cancelUpdate, { args: [{ reason }] })));
  }

  /**
   * Waits until the session has nothing running or queued (idle, failed, cancelled). A client-side wait
   * for scripts and tests: it asks the status query every `intervalMs`.
   */
  async waitUntilSettled(
    sessionId: string,
    { timeoutMs = 120_000, intervalMs = 200, afterTurn = 0 }: { timeoutMs?: number; intervalMs?: number; afterTurn?: number } = {},
  ): Promise<SessionStatusView> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const view = await this.status(sessionId);
      const settled = view.status !== 'progressing' && view.queued === 0 && !view.currentTask;
      if (settled && view.turnsCompleted >= afterTurn) return view;
      if (view.status === 'closed') return view;
      // Its budget refused a call: what is queued waits for `setBudget`, which no amount of waiting here brings.
      if (view.budget?.exhausted && !view.currentTask) return view;
      if (Date.now() > deadline) {
        throw new OrchardError('internal', `session ${sessionId} still ${view.status} after ${timeoutMs} ms`);
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  }

  async list({ limit = 100 }: { limit?: number } = {}): Promise<SessionSummary[]> {
    const out: SessionSummary[] = [];
    for await (const wf of this.temporal.workflow.list({ query: `OrchardKind = 'session'` })) {
      const memo = (wf.memo ?? {}) as Record<string, string>;
      out.push({
        sessionId: sessionIdFromWorkflowId(wf.workflowId) ?? wf.workflowId,
        title: memo.title ?? '',
        agent: memo.agent ?? '',
        host: memo.host ?? '',
        status: (wf.typedSearchAttributes.get(ORCHARD_STATUS) as SessionStatus | undefined) ?? 'unknown',
        execution: wf.status.name,
        startTime: wf.startTime,
      });
      if (out.length >= limit) break;
    }
    return out;
  }

  /** Orchestrators or team runs (newest first, from Temporal visibility): id, Orchard status, Temporal execution status. */
  async listRuns(kind: 'orchestrator' | 'team', { limit = 100 }: { limit?: number } = {}): Promise<RunSummary[]> {
    const out: RunSummary[] = [];
    const prefix = kind === 'orchestrator' ? orchestratorWorkflowId('') : teamWorkflowId('');
    for await (const wf of this.temporal.workflow.list({ query: `OrchardKind = '${kind}'` })) {
      out.push({
        id: wf.workflowId.startsWith(prefix) ? wf.workflowId.slice(prefix.length) : wf.workflowId,
        kind,
        status: wf.typedSearchAttributes.get(ORCHARD_STATUS) ?? (wf.status.name === 'RUNNING' ? 'running' : 'closed'),
        execution: wf.status.name,
        host: wf.typedSearchAttributes.get(ORCHARD_HOST) ?? '',
        startTime: wf.startTime,
      });
      if (out.length >= limit) break;
    }
    return out;
  }

  /**
   * Cancels an orchestrator or a team run and closes the sessions it started (its children, its Members): the run is
   * cancelled through Temporal and waited for until it has closed, then every session whose parent it is and that is
   * still open is cancelled with `reason`. Idempotent: a repeat finds the run closed and closes whatever session is
   * still open; a run that never existed is `orchestrator_not_found` / `team_not_found`.
   */
  async cancelRun(kind: 'orchestrator' | 'team', id: string, options: { reason?: string; timeoutMs?: number } = {}): Promise<CancelRunResult> {
    const workflowId = kind === 'orchestrator' ? orchestratorWorkflowId(id) : teamWorkflowId(id);
    const handle = this.temporal.workflow.getHandle(workflowId);
    let description: Awaited<ReturnType<WorkflowHandle['describe']>>;
    try {
      description = await handle.describe();
    } catch (err) {
      if (err instanceof WorkflowNotFoundError || isNotFound(err)) {
        throw new OrchardError(kind === 'orchestrator' ? 'orchestrator_not_found' : 'team_not_found', `no ${kind} ${id}`);
      }
      throw err;
    }
    const wasRunning = description.status.name === 'RUNNING';
    // The children the orchestrator's ledger knows, asked before it closes (visibility may not show a new one yet).
    const known =
      kind === 'orchestrator' && wasRunning
        ? await whenScheduled(() => handle.query(orchestratorStatusQuery)).then(
            (view) => view.children.map((c) => c.childId),
            () => [] as string[],
          )
        : [];
    const deadline = Date.now() + (options.timeoutMs ?? 60_000);
    const untilClosed = async (h: WorkflowHandle, what: string) => {
      while ((await h.describe()).status.name === 'RUNNING') {
        if (Date.now() > deadline) throw new OrchardError('wait_timeout', `${what} was asked to cancel and has not closed yet: run the cancel again`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    if (wasRunning) {
      await handle.cancel();
      await untilClosed(handle, workflowId);
    }
    const open = new Set(known);
    for await (const wf of this.temporal.workflow.list({
      query: `OrchardKind = 'session' AND OrchardParent = '${workflowId}' AND ExecutionStatus = 'Running'`,
    })) {
      open.add(sessionIdFromWorkflowId(wf.workflowId) ?? wf.workflowId);
    }
    const sessionsClosed: string[] = [];
    for (const sessionId of [...open].sort()) {
      try {
        await this.cancel(sessionId, options.reason ?? `${kind} ${id} was cancelled`);
        // Accepted is not closed: the session stops its running command and closes; the answer waits for that.
        await untilClosed(this.handle(sessionId), `session ${sessionId}`);
        sessionsClosed.push(sessionId);
      } catch (err) {
        if (!(err instanceof OrchardError && (err.code === 'session_closed' || err.code === 'session_not_found'))) throw err;
      }
    }
    const execution = (await handle.describe()).status.name;
    return { id, kind, execution, alreadyClosed: !wasRunning, sessionsClosed };
  }

  private handle(sessionId: string): WorkflowHandle {
    return this.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  }

  /** Runs a call on the session's workflow and turns Temporal's errors into typed ones. */
  private async call<T>(sessionId: string, fn: (handle: WorkflowHandle) => Promise<T>): Promise<T> {
    const handle = this.handle(sessionId);
    return this.mapErrors(sessionId, () => fn(handle));
  }

  private async mapErrors<T>(sessionId: string, fn: () => Promise<T>): Promise<T> {
    const handle = this.handle(sessionId);
    try {
      return await fn();
    } catch (err) {
      rethrowUpdateRefusal(err);
      if (err instanceof WorkflowNotFoundError || isNotFound(err)) {
        // A send to a finished workflow execution is "not found" to Temporal; tell the caller which it is.
        const closed = await handle.describe().then(
          (d) => d.status.name !== 'RUNNING',
          () => false,
        );
        if (closed) throw new OrchardError('session_closed', `session ${sessionId} is closed: create a new session`);
        throw new OrchardError('session_not_found', `no session ${sessionId}: check the id with \`orchard session list\``);
      }
      throw err;
    }
  }
}

/** Alive while the workflow runs, dead once closed or when there is none, unknown when Temporal could not be asked. */
async function livenessOf(handle: WorkflowHandle, chain?: string): Promise<SessionLiveness> {
  try {
    const d = await handle.describe();
    const host = d.typedSearchAttributes.get(ORCHARD_HOST);
    const firstRunId = d.raw.workflowExecutionInfo?.firstRunId;
    if (chain !== undefined && firstRunId && firstRunId !== chain) {
      // Another chain of the same workflow id runs now: the one asked about is over.
      return { liveness: 'dead', execution: 'SUPERSEDED', runtime: `${d.workflowId}: chain ${chain} is over; chain ${firstRunId} runs now` };
    }
    return {
      liveness: d.status.name === 'RUNNING' ? 'alive' : 'dead',
      execution: d.status.name,
      runtime: `${d.workflowId} run ${d.runId}${host ? ` on host ${host}` : ''}, started ${d.startTime.toISOString()}`,
    };
  } catch (err) {
    if (err instanceof WorkflowNotFoundError || isNotFound(err)) return { liveness: 'dead', execution: 'NOT_FOUND', runtime: 'no workflow' };
    return { liveness: 'unknown', execution: 'UNKNOWN', runtime: `Temporal did not answer: ${String((err as Error)?.message ?? err)}` };
  }
}

/**
 * A query that reached a run whose first workflow task is not scheduled yet (just after a continue-as-new) fails
 * FAILED_PRECONDITION; the run answers once a worker has taken that task, which on a busy worker can take a while
 * (seen: over 10 s on a loaded 2-core machine). Asked again for up to 60 s; any other error at once.
 */
async function whenScheduled<T>(query: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      return await query();
    } catch (err) {
      const cause = (err as { cause?: { code?: number; details?: string } }).cause;
      const notYet = cause?.code === 9 && /not scheduled yet/i.test(String(cause.details ?? ''));
      if (!notYet || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/**
 * A refused update (its validator or handler failed it with a typed failure) becomes the OrchardError of its code; so
 * does a payload this client cannot decrypt (its key id is not configured here, or the key is wrong).
 */
function rethrowUpdateRefusal(err: unknown): void {
  if (err instanceof PayloadDecryptionError) throw new OrchardError(err.code, err.message);
  if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure) {
    const code = err.cause.type;
    throw new OrchardError(isErrorCode(code) ? code : 'internal', err.cause.message);
  }
}

function normalizeSend(input: SendInput | string): SendInput {
  const send: SendInput = typeof input === 'string' ? { task: input } : input;
  const problem = sendProblem(send);
  if (problem) throw new OrchardError(problem.code, problem.message);
  // A request id on every send lets a retried call (network blip) be acknowledged once.
  return { ...send, requestId: send.requestId ?? randomUUID() };
}

/** Each setting `requested` gives (not undefined) whose value differs from `running`'s, as `name: running X, asked Y`. */
export function settingsDifferences<S extends object>(running: S, requested: S): string[] {
  const shown = (value: unknown): string => {
    const text = value === undefined ? 'unset' : JSON.stringify(value);
    return text.length > 80 ? `${text.slice(0, 77)}...` : text;
  };
  return Object.entries(requested)
    .filter(([key, value]) => value !== undefined && canonicalJson(value) !== canonicalJson((running as Record<string, unknown>)[key]))
    .map(([key, value]) => `${key}: running ${shown((running as Record<string, unknown>)[key])}, asked ${shown(value)}`);
}

/** JSON with object keys sorted, so two settings that differ only in key order compare equal. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b))) : v,
  );
}

function isNotFound(err: unknown): boolean {
  const e = err as { code?: number; cause?: { code?: number } };
  return e?.code === 5 || e?.cause?.code === 5; // gRPC NOT_FOUND
}
