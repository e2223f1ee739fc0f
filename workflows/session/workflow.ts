import {
  ActivityFailure,
  CancellationScope,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import type { HostActivities, SharedActivities } from '../../contract/activities';
import { DISPATCH_OPTIONS, MODEL_ACTIVITY_OPTIONS, STORE_LOCAL_OPTIONS, STORE_OPTIONS, failureOf, hostActivityOptions } from '../activity-options';
import { isErrorCode } from '../../contract/errors';
import { orchardFailure } from '../../contract/failures';
import {
  cancelUpdate,
  DEFAULT_LIMITS,
  resolveHoldUpdate,
  setBudgetProblem,
  setBudgetUpdate,
  childTurnEndedSignal,
  createRequestProblem,
  createUpdate,
  hasStartingContext,
  sendProblem,
  sendSignal,
  sendUpdate,
  sessionStatusOf,
  statusQuery,
  teamFactSignal,
  teamWorkflowId,
  transcriptRefsQuery,
  type ChildTurnEnded,
  type MemberMessageFact,
  type CreateRequest,
  type CreateResult,
  type Problem,
  type SendInput,
  type SendResult,
  type SessionLimits,
  type SessionStatusView,
  type TaskRecord,
  type TurnRef,
} from '../../contract/messages';
import { ORCHARD_HOST, ORCHARD_KIND, ORCHARD_PARENT, ORCHARD_STATUS, ORCHARD_UNCONFINED } from '../../contract/search-attributes';
import { leaseHolder } from '../../contract/ids';
import { SessionState, excerpt, isCurrentCarried, type NewTask, type QueuedTask, type SessionWorkflowInput } from './state';
import { childSessionV1 } from './v1/workflow';
import { sessionDetails } from '../current-details';
import { patchEpoch } from '../patch-epoch';

/**
 * One agent session in its own worktree: a turn per relayed task (model → tools → model … until the model
 * stops or the step limit), idle and open between tasks, continue-as-new at a turn or history bound.
 *
 * Every stored effect is keyed by this execution chain's id and each turn attempt's id (both minted here with
 * uuid4), so a re-created session or a reset runs its new work, and a replay finds what it already did.
 */
export async function childSession(input: SessionWorkflowInput): Promise<SessionStatusView> {
  // Every patch below, as one marker for runs that begin on this code (workflows/patch-epoch.ts).
  const since = patchEpoch('session-patches-2026-12');
  // Histories of sessions started before this code replay on the frozen code they ran.
  if (!since('session-v2')) return childSessionV1(input as Parameters<typeof childSessionV1>[0]);

  const { create } = input;
  const state = new SessionState(create, input.carried, uuid4);
  const info = workflowInfo();
  const holder = leaseHolder(info.workflowId, info.firstExecutionRunId, info.namespace);

  // Store writes and the limits are regular activities: handlers (send, create) run beside the main loop, and
  // local activities that overlap are resolved one activation at a time live but together on replay, which
  // reorders the coroutines' commands (a nondeterminism error). An activity's completion is a history event,
  // delivered in the same workflow task both times. Histories recorded before this patch keep local activities.
  const storeAsActivities = since('session-store-activities');
  const storeActs = storeAsActivities
    ? proxyActivities<SharedActivities>({ ...STORE_OPTIONS, summary: 'session store' })
    : proxyLocalActivities<SharedActivities>({ ...STORE_LOCAL_OPTIONS, summary: 'session store' });
  // A task's text then reaches history twice, in the message that brought it and in the store activity's input (a
  // local activity's input is not recorded): the history budget counts both.
  const textCopies = storeAsActivities ? 2 : 1;
  const shared = proxyActivities<SharedActivities>({ ...MODEL_ACTIVITY_OPTIONS, summary: 'model call' });
  // A user's hold resolution: one Postgres row.
  const holdActs = proxyActivities<SharedActivities>({ ...STORE_OPTIONS, summary: 'resolve hold' });
  // A raise carved from the parent: its `fundChild` update, through Temporal.
  const budgetActs = proxyActivities<SharedActivities>({ ...DISPATCH_OPTIONS, summary: 'budget from parent' });
  // Built once the limits are resolved (they bound the host activities' timeouts).
  let hostActs: ReturnType<typeof activitiesFor> | undefined;

  let turnScope: CancellationScope | undefined;
  let prepScope: CancellationScope | undefined;

  setHandler(sendUpdate, (send) => accept(send), {
    description: 'Queue a task for this session (answers its task id and queue position; a repeated requestId queues nothing).',
    validator: (send) => {
      // A duplicate queues nothing, so it is answered whatever the queue's state (until the session has closed).
      const problem = sendProblem(send) ?? (state.duplicateOf(send.requestId) ? undefined : refusal(send.task.length));
      if (problem) throw orchardFailure(problem.code, problem.message);
    },
  });
  setHandler(
    createUpdate,
    async (request): Promise<CreateResult> => {
      const outcome = request.requestId === create.requestId ? 'created' : 'bound';
      // The chain's starting context is stored before its first task is queued, so no turn starts without it.
      if (outcome === 'created' && hasStartingContext(request) && !state.duplicateOf(request.requestId)) await storeStartingContext(request);
      let task: SendResult | undefined;
      if (request.task !== undefined) task = await accept({ task: request.task, requestId: request.requestId, from: request.from });
      else if (!state.duplicateOf(request.requestId)) state.remember(request.requestId, '');
      return { outcome, task, session: state.view() };
    },
    {
      description: 'Update-with-start target of `createSession`: binds the caller to this session, queuing its first task once.',
      validator: (request) => {
        const duplicate = request && typeof request === 'object' && state.duplicateOf(request.requestId);
        const problem =
          createRequestProblem(request) ??
          (duplicate ? undefined : (contextRefusal(request) ?? refusal((request.task?.length ?? 0) + (request.context?.length ?? 0))));
        if (problem) throw orchardFailure(problem.code, problem.message);
      },
    },
  );
  setHandler(
    sendSignal,
    async (send) => {
      const problem = sendProblem(send) ?? refusal(typeof send?.task === 'string' ? send.task.length : 0);
      // A signal cannot be answered: the refusal is recorded in the session's status and the workflow log.
      if (problem) {
        state.refuseSignal(problem.code, send ?? {});
        log.info('send signal refused', { code: problem.code, reason: problem.message });
        publish();
        return;
      }
      await accept(send).catch((err: unknown) => {
        state.refuseSignal('store_unavailable', send);
        log.warn('send signal could not be stored', { error: String(err) });
      });
    },
    { description: 'Fire-and-forget `send`: queued like the update; a refusal is recorded in `status().refusedSignals`.' },
  );
  setHandler(
    cancelUpdate,
    async (cancel) => {
      state.requestCancel(cancel.reason ?? 'cancelled by request');
      const stopping = turnScope !== undefined && hostActs !== undefined;
      turnScope?.cancel();
      prepScope?.cancel();
      publish();
      // The turn's running command is stopped on its host at once: the activity's cancellation (requested above, so
      // it is recorded first) would reach it only with its next heartbeat. Runs before this change waited for that.
      if (stopping && since('session-stop-commands-on-cancel')) stopRunningCommands();
      // Not cut short by a Temporal cancellation of the workflow: that closes the session too, then this answers.
      await CancellationScope.nonCancellable(() => condition(() => state.finished));
      return state.view();
    },
    {
      description: 'Cancel the session: stops its running command, ends queued tasks as cancelled, releases its worktree.',
      validator: (_cancel) => {
        if (state.finished) throw orchardFailure('session_closed', `session ${create.sessionId} is ${state.status}: create a new session`);
      },
    },
  );
  setHandler(
    resolveHoldUpdate,
    async (input) => {
      const worktree = state.worktree!;
      const resolved = await holdActs.resolveVerificationHold({ worktree: worktree.lease.worktree, by: input?.by || 'user', note: input?.note });
      if (state.worktree) state.worktree = { ...state.worktree, held: undefined };
      publish();
      if (!resolved) throw orchardFailure('invalid_input', `session ${create.sessionId} has no open verification hold on ${worktree.path}`);
      return resolved;
    },
    {
      description: 'Resolve a verification hold: a user has dealt with the change a command made; commands run in the worktree again.',
      validator: (input) => {
        if (input !== undefined && (typeof input !== 'object' || input === null)) throw orchardFailure('invalid_input', 'resolveHold takes { by?, note? }');
        for (const key of ['by', 'note'] as const) {
          const value = input?.[key];
          if (value !== undefined && (typeof value !== 'string' || value.length > 2000)) {
            throw orchardFailure('invalid_input', `resolveHold: ${key} must be a string of at most 2000 characters`);
          }
        }
        if (!state.worktree) throw orchardFailure('invalid_input', `session ${create.sessionId} has no worktree, so nothing is held`);
      },
    },
  );
  // One raise at a time: a funded child's raise is carved from its parent (an activity) before the limit moves.
  let budgetBusy = false;
  setHandler(
    setBudgetUpdate,
    async (input) => {
      await condition(() => !budgetBusy);
      if (state.budget.seen(input.requestId)) return state.budget.view();
      const problem = budgetRefusal(input.limit);
      if (problem) throw orchardFailure(problem.code, problem.message);
      budgetBusy = true;
      try {
        const raise = state.budget.limit === undefined ? input.limit : input.limit - state.budget.limit;
        if (state.budget.fundedBy !== undefined && raise > 0) {
          const funded = await budgetActs.fundFromParent({
            parent: state.budget.fundedBy,
            childId: create.sessionId,
            limit: input.limit,
            requestId: input.requestId,
          });
          if (!funded.ok) throw orchardFailure(isErrorCode(funded.code) ? funded.code : 'budget_insufficient', funded.message);
        }
        state.budget.setLimit(input.limit);
        state.budget.remember(input.requestId);
        publish();
        return state.budget.view();
      } finally {
        budgetBusy = false;
      }
    },
    {
      description: "Raises or sets the session's token budget (a budget carved from a parent grows out of the parent's); queued tasks waiting for budget run.",
      validator: (input) => {
        const problem = setBudgetProblem(input) ?? (state.budget.seen(input.requestId) ? undefined : budgetRefusal(input.limit));
        if (problem) throw orchardFailure(problem.code, problem.message);
      },
    },
  );
  setHandler(statusQuery, () => state.view(), { description: 'The session: status, current task, queue, task records, limits.' });
  setHandler(transcriptRefsQuery, () => state.transcriptRefs(), {
    description: 'Turn refs (turn ids) under which the transcript is stored in Postgres.',
  });

  /** A create that binds to this running chain cannot give it a starting context: its conversation exists already. */
  function contextRefusal(request: CreateRequest): Problem | undefined {
    if (request.requestId === create.requestId || !hasStartingContext(request)) return undefined;
    return {
      code: 'context_conflict',
      message: `session ${create.sessionId} is already running with its own conversation: a starting context applies only to the create that starts a session; send what it needs as a task`,
    };
  }

  /** Stores the chain's starting context (a bound the parent's transcript lacks is refused, nothing queued). */
  async function storeStartingContext(request: CreateRequest): Promise<void> {
    try {
      await CancellationScope.nonCancellable(() =>
        storeActs.storeStartingContext({
          executionId: state.executionId,
          sessionId: create.sessionId,
          requestId: request.requestId,
          handoff: request.context,
          parentConversation: request.parentConversation,
        }),
      );
    } catch (err) {
      const failure = err instanceof ActivityFailure ? failureOf(err) : { code: 'store_unavailable', message: String(err) };
      throw orchardFailure(
        isErrorCode(failure.code) ? failure.code : 'store_unavailable',
        `the starting context was not stored, so nothing was queued: ${failure.message}`,
      );
    }
  }

  /** Why the budget cannot be set to `limit` now (also read by the validator, so it writes nothing). */
  function budgetRefusal(limit: number) {
    if (state.closed || state.closing)
      return { code: 'session_closed' as const, message: `session ${create.sessionId} is ${state.status}: its budget is final` };
    return state.budget.setProblem(limit);
  }

  /**
   * Stops the turn's running command on its host at once (a cancelled command activity learns of its cancellation only
   * with its next heartbeat, and a quiet command beats every few seconds). Not awaited: it only hastens what the
   * cancellation does anyway, so the close never waits for it (a host that is slow to take it, or an older worker
   * without it, fails it once and is done).
   */
  function stopRunningCommands(): void {
    void CancellationScope.nonCancellable(() => hostActs!.stop.stopCommands({ holder: state.worktree?.lease.holder ?? holder })).catch((err: unknown) =>
      log.info('running commands not stopped at once; the cancellation reaches them with a heartbeat', { error: String(err) }),
    );
  }

  /** Why a task of `length` characters cannot be accepted now (also read by validators, so it writes nothing). */
  function refusal(length: number) {
    return state.refusalOf(length * textCopies, workflowInfo().historySize);
  }

  /** Accepts a task: answers at once for a duplicate, else queues it and stores its text before it may run. */
  async function accept(send: SendInput): Promise<SendResult> {
    const duplicate = state.duplicateOf(send.requestId);
    if (duplicate) return duplicate;
    const { ack, task } = state.reserve(send);
    publish();
    try {
      await store([task]);
    } catch (err) {
      state.unreserve(task.taskId);
      publish();
      throw orchardFailure('store_unavailable', `the task could not be stored, so it was not queued: ${String(err)}`);
    }
    if (state.cancelRequested) {
      // The cancel was accepted while this task's text was being stored: it is recorded as cancelled, never run.
      // The close may already have ended it while its row was still being inserted (that end then changed no row):
      // its end is written again now that the row exists.
      const ended =
        state.endAdmittedLate(task.taskId, state.cancelRequested.reason) ?? (since('session-late-store-ends') ? state.endedRecord(task.taskId) : undefined);
      if (ended) await recordEnds([ended]);
      publish();
      return { ...ack, status: sessionStatusOf(state.status, state.closed), taskState: 'cancelled' };
    }
    state.markStored(task.taskId);
    publish();
    return ack;
  }

  async function store(tasks: NewTask[]): Promise<void> {
    // An accepted task is stored even when the workflow is being cancelled: it then ends as cancelled, recorded.
    await CancellationScope.nonCancellable(() =>
      storeActs.storeTasks(tasks.map((t) => ({ ...t, executionId: state.executionId, sessionId: create.sessionId }))),
    );
  }

  /** Terminal task states go to Postgres too; the workflow's own record is already updated. */
  async function recordEnds(records: TaskRecord[]): Promise<void> {
    if (records.length === 0) return;
    await CancellationScope.nonCancellable(() =>
      storeActs.endTasks({
        executionId: state.executionId,
        ends: records.map((r) => ({ taskId: r.taskId, state: r.state as 'done' | 'failed' | 'cancelled', outcome: r.outcome, reason: r.reason })),
      }),
    ).catch((err: unknown) => log.warn('task end states not stored', { error: String(err) }));
  }

  /** Search attributes change only when their value does (each upsert is a history event); details are free. */
  function publish(): void {
    const desired: SearchAttributeUpdatePair[] = [
      { key: ORCHARD_KIND, value: 'session' },
      { key: ORCHARD_STATUS, value: sessionStatusOf(state.status, state.closed) },
      { key: ORCHARD_HOST, value: create.host },
    ];
    if (create.parent) desired.push({ key: ORCHARD_PARENT, value: create.parent });
    // Only ever set, never false: `OrchardUnconfined = true` lists every isolated child running with the guard alone.
    if (state.worktree?.unconfined) desired.push({ key: ORCHARD_UNCONFINED, value: true });
    const current = workflowInfo().typedSearchAttributes;
    const changed = desired.filter((pair) => current.get(pair.key) !== pair.value);
    if (changed.length > 0) upsertSearchAttributes(changed);
    setCurrentDetails(sessionDetails(state.view()));
  }

  function activitiesFor(limits: SessionLimits) {
    // Bounded so a vanished host is learned about instead of waited on forever; everything else is retried.
    const hostOptions = hostActivityOptions(create.host, limits.hostWaitSeconds);
    return {
      worktree: proxyActivities<HostActivities>({
        ...hostOptions,
        startToCloseTimeout: '2 minutes',
        // Preparation heartbeats every second: a dead worker is noticed in seconds and a cancel reaches it.
        heartbeatTimeout: '15 seconds',
        summary: `worktree on ${create.host}`,
      }),
      // A cancel's stop of the running command: one attempt, soon or never (the heartbeat delivers the cancel anyway).
      stop: proxyActivities<HostActivities>({
        ...hostOptions,
        scheduleToStartTimeout: '5 seconds',
        startToCloseTimeout: '10 seconds',
        retry: { maximumAttempts: 1 },
        summary: `stop commands on ${create.host}`,
      }),
      tool: proxyActivities<HostActivities>({
        ...hostOptions,
        startToCloseTimeout: `${limits.bashTimeoutSeconds + 60} seconds`,
        // The runner heartbeats every second; a dead worker is noticed in seconds, not at the timeout.
        heartbeatTimeout: '15 seconds',
        // A retry never reruns a mutating tool: it returns the recorded result or reports `unknown` (invariant 11a).
        summary: `tool call on ${create.host}`,
      }),
    };
  }

  async function runTurn(task: QueuedTask, turn: number, turnId: string): Promise<TurnRef> {
    const acts = hostActs!;
    let steps = 0;
    let toolCalls = 0;
    const ref = (outcome: TurnRef['outcome'], extra: Partial<TurnRef> = {}): TurnRef => ({
      turn,
      turnId,
      taskId: task.taskId,
      outcome,
      steps,
      toolCalls,
      ...extra,
    });
    const keys = { sessionId: create.sessionId, executionId: state.executionId, turnId, turn };
    // A team's Member is offered its message to the Coordinator too; every other session the child tools.
    const profile = create.team ? 'member' : 'child';
    const scope = new CancellationScope();
    turnScope = scope;
    try {
      return await scope.run(async () => {
        const worktree = state.worktree!;
        for (let step = 1; step <= state.limits.maxStepsPerTurn; step++) {
          steps = step;
          const answer = await shared.modelStep.executeWithOptions({ summary: `model call (turn ${turn}, step ${step})` }, [
            {
              ...keys,
              step,
              taskId: step === 1 ? task.taskId : undefined,
              model: create.model ?? { provider: 'default' },
              profile,
              context: { title: create.title, agent: create.agent ?? 'coder', worktree: worktree.path, branch: worktree.branch },
              contextChars: state.limits.contextChars,
              ...state.budget.forCall(state.limits.maxOutputTokens ?? DEFAULT_LIMITS.maxOutputTokens!),
            },
          ]);
          const exhausted = state.budget.settle(answer, `orchard session budget ${create.sessionId} <tokens>`);
          if (exhausted) return ref('budget_exhausted', { error: exhausted });
          if (answer.toolCalls.length === 0) return ref('finished', { finalExcerpt: answer.textExcerpt });
          for (const [index, call] of answer.toolCalls.entries()) {
            // The Web UI names the call (`bash: git status`); its heartbeat details carry the command's recent output.
            const result = await acts.tool.executeTool.executeWithOptions({ summary: call.label ?? call.name }, [
              {
                ...keys,
                step,
                callId: call.id,
                index,
                profile,
                worktree: worktree.path,
                branch: worktree.branch,
                bashTimeoutSeconds: state.limits.bashTimeoutSeconds,
                lease: worktree.lease,
                isolated: create.isolated === true,
                ...(create.team ? { team: create.team } : {}),
              },
            ]);
            toolCalls += 1;
            // A session from before the confined layout: the host moved its branch to orchard/<id>/work.
            if (result.branch && state.worktree && result.branch !== state.worktree.branch) {
              state.worktree = { ...state.worktree, branch: result.branch };
              publish();
            }
            if (result.held && state.worktree && !state.worktree.held) {
              state.worktree = { ...state.worktree, held: true };
              publish();
            }
            if (result.message && create.team) await tellTeam(create.team.teamId, result.message);
          }
        }
        return ref('step_limit');
      });
    } catch (err) {
      if (isCancellation(err) && state.cancelRequested && !CancellationScope.current().consideredCancelled) {
        return ref('cancelled');
      }
      if (isCancellation(err) || !(err instanceof ActivityFailure)) throw err;
      return ref('failed', { error: failureOf(err) });
    } finally {
      turnScope = undefined;
    }
  }

  /**
   * A child's turn end reaches its orchestrator durably (a signal, deduplicated there on child and turn id). A
   * parent that is gone does not stop the child: its work stands, and it stays routable by id.
   */
  async function notifyParent(ref: TurnRef): Promise<void> {
    if (!create.parent || !since('notify-parent')) return;
    const notice: ChildTurnEnded = {
      childId: create.sessionId,
      turnId: ref.turnId!,
      taskId: ref.taskId,
      outcome: ref.outcome,
      excerpt: ref.finalExcerpt && excerpt(ref.finalExcerpt, 280),
      queued: state.queue.length,
      ...(ref.error ? { error: { code: ref.error.code, message: excerpt(ref.error.message, 500) } } : {}),
      budget: state.budget.report(),
    };
    await CancellationScope.nonCancellable(() => getExternalWorkflowHandle(create.parent!).signal(childTurnEndedSignal, notice)).catch((err: unknown) =>
      log.warn('turn end not delivered to the parent', { parent: create.parent, error: String(err) }),
    );
  }

  /**
   * A Member's message was accepted into its team's Inbox: the team is signalled once (this command is in the
   * session's history, so a replay does not send it again), even while the turn is being cancelled — the message
   * stands. A team that is gone does not fail the turn.
   */
  async function tellTeam(teamId: string, message: MemberMessageFact & { revision: number }): Promise<void> {
    const { revision, ...fact } = message;
    await CancellationScope.nonCancellable(() => getExternalWorkflowHandle(teamWorkflowId(teamId)).signal(teamFactSignal, { revision, message: fact })).catch(
      (err: unknown) => log.warn('member message not signalled to the team', { teamId, error: String(err) }),
    );
  }

  /** Whether this run should hand over to a fresh one (history and turn bounds; Temporal's suggestion). */
  function shouldContinueAsNew(): boolean {
    const now = workflowInfo();
    // A run that has done nothing yet never hands over for its size (a budget smaller than a fresh run's history
    // would otherwise continue-as-new forever).
    const busy = state.turnsThisRun + state.acceptedThisRun > 0;
    return (
      state.turnsThisRun >= state.limits.turnsPerRun || now.continueAsNewSuggested || (busy && now.historySize >= (state.limits.historyBudgetBytes * 3) / 4)
    );
  }

  /**
   * Ends the session: every task still queued gets its terminal state, the worktree lease goes back (if still
   * ours), waiting handlers are answered, and only then does the run end.
   */
  async function close(status: 'cancelled' | 'failed', reason: string, error?: { code: string; message: string }): Promise<void> {
    await CancellationScope.nonCancellable(async () => {
      await recordEnds(state.endQueued(status, reason));
      await releaseWorktree();
      state.markClosed(status, reason);
      publish();
      await notifyParentClosed(status, reason, error);
      await condition(allHandlersFinished);
    });
  }

  /** `close` for a turn the cancel cut short: its end and the close's own steps at once (the parent still hears in order). */
  async function closeAfterCancelledTurn(ended: TaskRecord, ref: TurnRef): Promise<void> {
    const reason = state.cancelRequested!.reason;
    await CancellationScope.nonCancellable(async () => {
      await Promise.all([recordEnds([ended, ...state.endQueued('cancelled', reason)]), releaseWorktree()]);
      state.markClosed('cancelled', reason);
      publish();
      // A team forwards either notice to the member's execution whichever comes first: it hears both at once. An
      // orchestrator's roster counts the turn before the close: it hears them in that order.
      if (create.team) await Promise.all([notifyParent(ref), notifyParentClosed('cancelled', reason)]);
      else {
        await notifyParent(ref);
        await notifyParentClosed('cancelled', reason);
      }
      await condition(allHandlersFinished);
    });
  }

  /** The session closed (cancelled or failed, maybe while idle): its orchestrator takes it off the roster. */
  async function notifyParentClosed(status: 'cancelled' | 'failed', reason: string, error?: { code: string; message: string }): Promise<void> {
    if (!create.parent || !since('notify-parent-close')) return;
    const notice: ChildTurnEnded = {
      childId: create.sessionId,
      // One close per execution chain: a redelivered close notice counts once.
      turnId: `closed/${state.executionId}`,
      taskId: '',
      outcome: status,
      excerpt: excerpt(reason, 280),
      queued: 0,
      closed: true,
      ...(error ? { error: { code: error.code, message: excerpt(error.message, 500) } } : {}),
      budget: state.budget.report(),
    };
    await getExternalWorkflowHandle(create.parent)
      .signal(childTurnEndedSignal, notice)
      .catch((err: unknown) => log.warn('close not delivered to the parent', { parent: create.parent, error: String(err) }));
  }

  /** The session is closing: its tool activities have ended, so the lease goes back (if still ours). */
  async function releaseWorktree(): Promise<void> {
    if (!hostActs) return;
    try {
      await hostActs.worktree.releaseSessionWorktree({ holder, lease: state.worktree?.lease });
    } catch (err) {
      // An unreleased lease is taken over later once its holder is provably closed; closing must not fail on it.
      log.warn('worktree lease not released', { error: String(err) });
    }
  }

  // Cancelled through Temporal (the Web UI, `temporal workflow cancel`) while a command runs: stopped at once too, as
  // a cancel update stops it. Runs before this change left it to the command's next heartbeat.
  void CancellationScope.current().cancelRequested.catch(() => {
    if (turnScope !== undefined && hostActs !== undefined && !state.cancelRequested && since('session-stop-commands-on-workflow-cancel')) {
      stopRunningCommands();
    }
  });
  publish();
  try {
    if (!isCurrentCarried(input.carried)) {
      // Resolved once per chain and recorded in history: a replay never reads the worker's environment.
      state.limits = await storeActs.resolveSessionLimits(create.limits);
      // The worker's default budget, for a chain started without one (read once, recorded in history).
      if (create.budgetTokens === undefined && since('budget-default')) {
        const fallback = await storeActs.resolveDefaultBudget();
        if (fallback !== null) state.budget.setLimit(fallback);
      }
      const first: NewTask[] = [...state.inherited];
      if (!input.carried && create.task) {
        const { task } = state.reserve({ task: create.task, requestId: create.requestId, from: create.parent });
        first.push(task);
      }
      // Nothing to store is no activity (the local activities of older histories were called regardless).
      if (first.length > 0 || !storeAsActivities) await store(first);
      for (const t of first) state.markStored(t.taskId);
    }
    hostActs = activitiesFor(state.limits);

    if (!state.worktree && !state.cancelRequested) {
      const scope = new CancellationScope();
      prepScope = scope;
      try {
        const prepared = await scope.run(() =>
          hostActs!.worktree.prepareWorktree({
            sessionId: create.sessionId,
            repo: create.repo,
            baseRef: create.baseRef,
            holder,
            isolated: create.isolated === true,
          }),
        );
        state.worktree = {
          path: prepared.worktree,
          branch: prepared.branch,
          lease: prepared.lease,
          ...(prepared.unconfined ? { unconfined: true } : {}),
        };
      } catch (err) {
        const cancelledByUs = isCancellation(err) && state.cancelRequested && !CancellationScope.current().consideredCancelled;
        if (!cancelledByUs && (isCancellation(err) || !(err instanceof ActivityFailure))) throw err;
        if (!state.cancelRequested) {
          const error = failureOf(err as ActivityFailure);
          state.failSetup(error);
          await close('failed', `the session could not start: ${error.message}`, error);
          throw orchardFailure(isErrorCode(error.code) ? error.code : 'worktree_create_failed', error.message);
        }
      } finally {
        prepScope = undefined;
      }
    }

    for (;;) {
      if (state.status === 'progressing' && state.queue.length === 0 && !state.current) state.status = 'idle';
      publish();
      await condition(() => state.runnable || state.cancelRequested !== undefined || shouldContinueAsNew());
      if (state.cancelRequested) break;
      if (!state.runnable) {
        // Idle with a bound reached: updates in flight finish first; anything they queued is carried over.
        await condition(allHandlersFinished);
        if (state.cancelRequested) break;
        await continueAsNew<typeof childSession>({ create: { ...create, task: undefined }, carried: state.carry() });
      }
      const next = state.beginTurn(uuid4())!;
      publish();
      const ref = await runTurn(next.task, next.turn, next.turnId);
      const ended = state.finishTurn(ref);
      if (state.cancelRequested && since('session-close-cancelled-turn-at-once')) {
        // Cancelled mid-turn (a handoff waits on this close): the turn's end, the queued tasks' ends and the lease's
        // release go out together, then the parent hears of the turn and of the close. Runs recorded before this
        // change stored the turn's end, told the parent, and only then closed, one step after another.
        await closeAfterCancelledTurn(ended, ref);
        return state.view();
      }
      await recordEnds([ended]);
      publish();
      await notifyParent(ref);
      if (state.cancelRequested) break;
      if (shouldContinueAsNew()) {
        await condition(allHandlersFinished);
        if (state.cancelRequested) break;
        await continueAsNew<typeof childSession>({ create: { ...create, task: undefined }, carried: state.carry() });
      }
    }
    await close('cancelled', state.cancelRequested!.reason);
    return state.view();
  } catch (err) {
    if (isCancellation(err)) {
      // Cancelled through Temporal (Web UI, `temporal workflow cancel`): the same close, then end as cancelled.
      state.requestCancel('cancelled through Temporal');
      if (state.current)
        await recordEnds([
          state.finishTurn({
            turn: state.current.turn,
            turnId: state.current.turnId,
            taskId: state.current.taskId,
            outcome: 'cancelled',
            steps: 0,
            toolCalls: 0,
          }),
        ]);
      await close('cancelled', 'cancelled through Temporal');
    }
    throw err;
  }
}
