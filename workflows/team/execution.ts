import {
  ActivityFailure,
  CancellationScope,
  condition,
  getExternalWorkflowHandle,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { HostActivities, SharedActivities } from '../../contract/activities';
import { DISPATCH_OPTIONS, WATCH_OPTIONS, failureOf } from '../activity-options';
import {
  executionTurnEndedSignal,
  hostTaskQueue,
  taskExecutionQuery,
  taskExecutionSettledSignal,
  teamWorkflowId,
  type ChildTurnEnded,
  type TaskExecutionInput,
  type TaskExecutionSettled,
} from '../../contract/messages';
import { ORCHARD_HOST, ORCHARD_KIND, ORCHARD_PARENT, ORCHARD_STATUS } from '../../contract/search-attributes';
import { executionDetails } from '../current-details';
import { patchEpoch } from '../patch-epoch';

/**
 * One task execution (`team/<team>/task/<task>/<execution>`, issue 9): a workflow of its own, started by the team
 * run, so every dispatch of a task to a Member is visible and steerable in the Web UI apart from the team. It
 * marks the task in progress and hands its text to the Member's session (which works in its own worktree under
 * its lease), waits — without a timer or a poll — for that session's turn on this task to end (the team forwards
 * the session's turn-end notices), settles the end as the Member's evidence or failure, and tells the team.
 *
 * A handoff cancels it after the fence has committed: it then ends cancelled and records nothing (the fence froze
 * the task; any late end of the old execution is not evidence).
 */
export async function teamTaskExecution(input: TaskExecutionInput): Promise<TaskExecutionSettled> {
  // Every patch below, as one marker for runs that begin on this code (workflows/patch-epoch.ts).
  const since = patchEpoch('execution-patches-2026-12');
  // Dispatch and settlement wait on Temporal and git: they heartbeat, and infrastructure faults are retried.
  const acts = proxyActivities<SharedActivities>({ ...DISPATCH_OPTIONS, summary: `task ${input.taskId}` });
  // Settling reads the Member's head in the team's repository: on its host's queue, waiting for that host (visible
  // as a scheduled activity) rather than reading the wrong disk. Runs before this change settled on the shared queue.
  const settleOn = since('team-git-on-host')
    ? proxyActivities<HostActivities>({ ...DISPATCH_OPTIONS, taskQueue: hostTaskQueue(input.host), summary: `settle ${input.taskId} on ${input.host}` })
    : acts;
  const team = getExternalWorkflowHandle(teamWorkflowId(input.teamId));
  const notices: ChildTurnEnded[] = [];
  let state: TaskExecutionSettled['state'] | 'dispatching' | 'working' = 'dispatching';
  let sessionTaskId: string | undefined;

  setHandler(
    executionTurnEndedSignal,
    (notice) => {
      if (notice.childId === input.sessionId && !notices.some((n) => n.turnId === notice.turnId && n.closed === notice.closed)) notices.push(notice);
    },
    { description: "A turn end (or the close) of the Member's session, forwarded by the team." },
  );
  setHandler(taskExecutionQuery, () => ({ ...input, state, sessionTaskId }), { description: 'The execution: task, member, session and state.' });

  const show = (status: string, reason?: string) => {
    upsertSearchAttributes([
      { key: ORCHARD_KIND, value: 'task_execution' },
      { key: ORCHARD_PARENT, value: teamWorkflowId(input.teamId) },
      { key: ORCHARD_HOST, value: input.host },
      { key: ORCHARD_STATUS, value: status },
    ]);
    setCurrentDetails(executionDetails(input, status, reason));
  };
  show('dispatching');

  const finish = async (settled: TaskExecutionSettled): Promise<TaskExecutionSettled> => {
    state = settled.state;
    show(settled.state, settled.message);
    await team.signal(taskExecutionSettledSignal, settled);
    return settled;
  };
  const base = { executionId: input.executionId, taskId: input.taskId, memberId: input.memberId };

  try {
    const dispatched = await acts.dispatchTask({
      teamId: input.teamId,
      taskId: input.taskId,
      executionId: input.executionId,
      memberId: input.memberId,
      role: input.role,
      repo: input.repo,
      host: input.host,
      parent: teamWorkflowId(input.teamId),
      model: input.model,
      ...(input.budgetTokens !== undefined ? { budgetTokens: input.budgetTokens } : {}),
    });
    sessionTaskId = dispatched.sessionTaskId;
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    return finish({ ...base, state: 'not_started', revision: 0, message: failureOf(err).message });
  }
  state = 'working';
  show('working');

  // This task's turn ended, or the session closed without ending it (cancelled or failed: not evidence). A team that
  // closes meanwhile (cancelled or terminated from outside) forwards nothing any more: a watch on it ends the wait.
  let end: ChildTurnEnded | undefined;
  let teamGone: string | undefined;
  const watch = since('execution-ends-with-team') ? new CancellationScope() : undefined;
  const watching = watch
    ? watch
        .run(() =>
          proxyActivities<SharedActivities>({ ...WATCH_OPTIONS, summary: `watch ${teamWorkflowId(input.teamId)}` }).awaitTeamClosed({ teamId: input.teamId }),
        )
        .then(
          ({ closed }) => void (teamGone = closed),
          () => undefined,
        )
    : Promise.resolve();
  await condition(
    () => teamGone !== undefined || (end = notices.find((n) => n.closed || (sessionTaskId !== undefined && n.taskId === sessionTaskId))) !== undefined,
  );
  watch?.cancel();
  await watching;
  if (end === undefined) {
    state = 'team_closed';
    show(`team_closed (${teamGone})`);
    return { ...base, state: 'team_closed', revision: 0, sessionTaskId, message: `team ${input.teamId} closed (${teamGone}) while this execution waited` };
  }
  const outcome = end.closed && end.outcome === 'finished' ? 'cancelled' : end.outcome;
  const failure = outcome === 'finished' ? undefined : failureOfEnd(end, outcome);
  const settled = await settleOn.settleExecution({
    teamId: input.teamId,
    taskId: input.taskId,
    executionId: input.executionId,
    memberId: input.memberId,
    outcome,
    excerpt: end.excerpt,
    ...(failure ? { failure } : {}),
  });
  return finish({
    ...base,
    state: settled.state,
    revision: settled.revision,
    candidate: settled.candidate,
    candidateRevision: settled.candidateRevision,
    sessionTaskId,
    excerpt: end.excerpt,
    ...(settled.state === 'failed' && failure ? { failure } : {}),
    ...(settled.board ? { board: settled.board } : {}),
  });
}

/**
 * Why a Member's work on a task did not finish: the typed error its session reported, or else what ended it — its
 * session closed (`session_closed`) or its turn ended another way (the turn's outcome: `step_limit`, `cancelled`, …).
 */
function failureOfEnd(end: ChildTurnEnded, outcome: string): { code: string; message: string } {
  if (end.error) return end.error;
  const what = end.closed ? `the Member's session closed (${outcome})` : `the Member's turn ended ${outcome}`;
  return { code: end.closed ? 'session_closed' : outcome, message: end.excerpt ? `${what}: ${end.excerpt}` : what };
}
