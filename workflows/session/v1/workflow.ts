import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  TimeoutFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { TimeoutType, type SearchAttributeUpdatePair } from '@temporalio/common';
import type { HostActivities, SharedActivities } from '../../../contract/activities';
import { isErrorCode } from '../../../contract/errors';
import { orchardFailure } from '../../../contract/failures';
import {
  cancelUpdate,
  hostTaskQueue,
  sendProblem,
  sendSignal,
  sendUpdate,
  statusQuery,
  transcriptRefsQuery,
  type SessionStatusView,
  type TurnRef,
} from '../../../contract/messages';
import { ORCHARD_HOST, ORCHARD_KIND, ORCHARD_PARENT, ORCHARD_STATUS } from '../../../contract/search-attributes';
import { SessionState, excerpt, type QueuedTask, type SessionWorkflowInput } from './state';

/**
 * FROZEN: the ChildSession as it ran before the `session-v2` patch. Kept only so that histories of sessions
 * started by that code replay unchanged; never edit it (new behaviour goes into ../workflow.ts). Its
 * continue-as-new starts a run of the current code, which takes the carried state over.
 */
export async function childSessionV1(input: SessionWorkflowInput): Promise<SessionStatusView> {
  const { create } = input;
  const state = new SessionState(create, input.carried);
  const { limits } = state;

  const shared = proxyActivities<SharedActivities>({
    // A model call can be slow; the heartbeat (every second while waiting) is what delivers cancellation.
    startToCloseTimeout: '10 minutes',
    heartbeatTimeout: '30 seconds',
    // 429/5xx/timeouts back off and retry; typed failures (malformed response, bad key) are non-retryable.
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 8 },
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    summary: 'model / store',
  });
  const hostOptions = {
    taskQueue: hostTaskQueue(create.host),
    // Bounded so a vanished host is learned about instead of waited on forever.
    scheduleToStartTimeout: `${limits.hostWaitSeconds} seconds`,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  } as const;
  const worktreeActs = proxyActivities<HostActivities>({
    ...hostOptions,
    startToCloseTimeout: '2 minutes',
    retry: { initialInterval: '1 second', maximumAttempts: 5 },
    summary: `worktree on ${create.host}`,
  });
  const toolActs = proxyActivities<HostActivities>({
    ...hostOptions,
    startToCloseTimeout: `${limits.bashTimeoutSeconds + 60} seconds`,
    // The runner heartbeats every second; a dead worker is noticed in seconds, not at the timeout.
    heartbeatTimeout: '15 seconds',
    // A retry never reruns a tool: it returns the recorded result or reports `unknown` (invariant 11a).
    retry: { initialInterval: '1 second', maximumAttempts: 3 },
    summary: `tool call on ${create.host}`,
  });

  let turnScope: CancellationScope | undefined;

  setHandler(sendUpdate, (send) => publish(state.enqueue(send)), {
    description: 'Queue a task for this session (a session of the first layout: it answers its task id and queue position).',
    validator: (send) => {
      const problem = sendProblem(send);
      if (problem) throw orchardFailure(problem.code, problem.message);
      if (state.closed) throw closedFailure();
    },
  });
  setHandler(
    sendSignal,
    (send) => {
      const problem = sendProblem(send) ?? (state.closed ? { code: 'session_closed', message: 'session is closed' } : undefined);
      // A signal cannot be answered: the refusal goes to the workflow log and nothing is queued.
      if (problem) return log.info('send signal refused', { code: problem.code, reason: problem.message });
      publish(state.enqueue(send));
    },
    { description: 'Queue a task without an answer (a refused one is logged, nothing is queued).' },
  );
  setHandler(
    cancelUpdate,
    async (cancel) => {
      state.cancelRequested ??= { reason: cancel.reason ?? 'cancelled by request' };
      turnScope?.cancel();
      await condition(() => state.status === 'cancelled');
      return state.view();
    },
    {
      description: 'Cancel the session: the running turn is stopped, the session closes, and its final view is the answer.',
      validator: (_cancel) => {
        if (state.closed) throw closedFailure();
      },
    },
  );
  setHandler(statusQuery, () => state.view(), { description: 'The session: status, current task, queue, last turn.' });
  setHandler(transcriptRefsQuery, () => state.transcriptRefs(), { description: 'Turn refs under which the transcript is stored in Postgres.' });

  function closedFailure() {
    return orchardFailure('session_closed', `session ${create.sessionId} is ${state.status}: create a new session`);
  }

  /** Search attributes change only when their value does (each upsert is a history event); details are free. */
  function publish<T>(result?: T): T {
    const desired: SearchAttributeUpdatePair[] = [
      { key: ORCHARD_KIND, value: 'session' },
      { key: ORCHARD_STATUS, value: state.status },
      { key: ORCHARD_HOST, value: create.host },
    ];
    if (create.parent) desired.push({ key: ORCHARD_PARENT, value: create.parent });
    const current = workflowInfo().typedSearchAttributes;
    const changed = desired.filter((pair) => current.get(pair.key) !== pair.value);
    if (changed.length > 0) upsertSearchAttributes(changed);
    setCurrentDetails(describe(state.view()));
    return result as T;
  }

  async function runTurn(task: QueuedTask, turn: number): Promise<TurnRef> {
    let steps = 0;
    let toolCalls = 0;
    const ref = (outcome: TurnRef['outcome'], extra: Partial<TurnRef> = {}): TurnRef => ({
      turn,
      taskId: task.taskId,
      outcome,
      steps,
      toolCalls,
      ...extra,
    });
    const scope = new CancellationScope();
    turnScope = scope;
    try {
      return await scope.run(async () => {
        await shared.recordTask({ sessionId: create.sessionId, turn, taskId: task.taskId, task: task.task });
        const worktree = state.worktree!;
        for (let step = 1; step <= limits.maxStepsPerTurn; step++) {
          steps = step;
          const answer = await shared.modelStep({
            sessionId: create.sessionId,
            turn,
            step,
            model: create.model ?? { provider: 'default' },
            profile: 'child',
            context: { title: create.title, agent: create.agent ?? 'coder', worktree: worktree.path, branch: worktree.branch },
          });
          if (answer.toolCalls.length === 0) return ref('finished', { finalExcerpt: answer.textExcerpt });
          for (const [index, call] of answer.toolCalls.entries()) {
            await toolActs.executeTool({
              sessionId: create.sessionId,
              turn,
              step,
              callId: call.id,
              index,
              profile: 'child',
              worktree: worktree.path,
              branch: worktree.branch,
              bashTimeoutSeconds: limits.bashTimeoutSeconds,
              lease: worktree.lease,
              isolated: create.isolated === true,
            });
            toolCalls += 1;
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

  publish();
  try {
    if (!state.worktree) {
      try {
        const info = workflowInfo();
        const prepared = await worktreeActs.prepareWorktree({
          sessionId: create.sessionId,
          repo: create.repo,
          baseRef: create.baseRef,
          holder: `${info.workflowId}@${info.firstExecutionRunId}`,
          isolated: create.isolated === true,
        });
        state.worktree = { path: prepared.worktree, branch: prepared.branch, lease: prepared.lease };
      } catch (err) {
        if (isCancellation(err) || !(err instanceof ActivityFailure)) throw err;
        const error = failureOf(err);
        state.failSetup(error);
        publish();
        await condition(allHandlersFinished);
        throw orchardFailure(isErrorCode(error.code) ? error.code : 'worktree_create_failed', error.message);
      }
    }
    for (;;) {
      if (state.status === 'progressing' && state.queue.length === 0) state.status = 'idle';
      publish();
      await condition(() => state.queue.length > 0 || state.cancelRequested !== undefined);
      if (state.cancelRequested) break;
      const next = state.beginTurn()!;
      publish();
      state.finishTurn(await runTurn(next.task, next.turn));
      publish();
      if (state.cancelRequested) break;
      if (state.turnsThisRun >= limits.turnsPerRun || workflowInfo().continueAsNewSuggested) {
        // Updates in flight finish first; anything they queued is carried into the next run.
        await condition(allHandlersFinished);
        if (state.cancelRequested) break;
        await continueAsNew<typeof childSessionV1>({ create, carried: state.carry() });
      }
    }
    await releaseWorktree();
    state.markCancelled(state.cancelRequested!.reason);
    publish();
    await condition(allHandlersFinished);
    return state.view();
  } catch (err) {
    if (isCancellation(err)) {
      // Cancelled through Temporal (Web UI, `temporal workflow cancel`): release, record it, end as cancelled.
      await CancellationScope.nonCancellable(releaseWorktree);
      state.markCancelled('cancelled through Temporal');
      publish();
    }
    throw err;
  }

  /** The session is closing: its tool activities have ended, so the lease goes back (if still ours). */
  async function releaseWorktree(): Promise<void> {
    // Sessions that started before leases existed close without this activity (their histories replay as kept).
    if (!state.worktree || !patched('release-worktree-lease')) return;
    try {
      await worktreeActs.releaseWorktree(state.worktree.lease);
    } catch (err) {
      // An unreleased lease is taken over later once its holder is provably closed; closing must not fail on it.
      log.warn('worktree lease not released', { error: String(err) });
    }
  }
}

function failureOf(err: ActivityFailure): { code: string; message: string } {
  const cause = err.cause;
  if (cause instanceof ApplicationFailure) return { code: cause.type ?? 'activity_failed', message: cause.message };
  if (cause instanceof TimeoutFailure && cause.timeoutType === TimeoutType.SCHEDULE_TO_START) {
    return { code: 'host_unavailable', message: 'no worker for the worktree host picked up the activity in time' };
  }
  return { code: 'activity_failed', message: cause?.message ?? err.message };
}

function describe(view: SessionStatusView): string {
  const lines = [
    `**${view.status}** · ${view.turnsCompleted} turn(s) · ${view.queued} queued · run ${view.runIndex}`,
    `branch \`${view.branch ?? '(preparing)'}\` on host \`${view.host}\``,
  ];
  if (view.currentTask) lines.push(`now: turn ${view.currentTask.turn} — ${view.currentTask.excerpt}`);
  if (view.lastTurn) {
    lines.push(`last: turn ${view.lastTurn.turn} ${view.lastTurn.outcome} (${view.lastTurn.steps} steps, ${view.lastTurn.toolCalls} tool calls)`);
    if (view.lastTurn.finalExcerpt) lines.push(`> ${excerpt(view.lastTurn.finalExcerpt)}`);
  }
  if (view.error) lines.push(`error: ${view.error.code} — ${view.error.message}`);
  return lines.join('\n\n');
}
