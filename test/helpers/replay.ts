import { Worker } from '@temporalio/worker';
import type { TestOrchard } from './orchard';
import { testStackEnv } from './orchard';

export interface ReplayOutcome {
  workflowId: string;
  runId: string;
  type: string;
  events: number;
  /** The replay's error, if it failed. */
  error?: string;
}

/**
 * Replays every workflow history on this orchard's task queue (every run of every workflow it started, closed or
 * not) against the current workflow bundle: what a worker restart would do to each of them.
 */
export async function replayEveryHistory(orchard: TestOrchard): Promise<ReplayOutcome[]> {
  const bundle = testStackEnv().workflowBundle;
  const options = bundle ? { workflowBundle: bundle } : { workflowsPath: require.resolve('../../workflows') };
  const outcomes: ReplayOutcome[] = [];
  for await (const wf of orchard.temporal.workflow.list({ query: `TaskQueue = '${orchard.taskQueue}'` })) {
    const history = await orchard.temporal.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory();
    const outcome: ReplayOutcome = { workflowId: wf.workflowId, runId: wf.runId, type: wf.type, events: history.events?.length ?? 0 };
    try {
      await Worker.runReplayHistory(options, history, wf.workflowId);
    } catch (err) {
      outcome.error = String(err).slice(0, 800);
    }
    outcomes.push(outcome);
  }
  return outcomes;
}

/** One line per event (id, type, what it is about): for reading a history that failed to replay. */
export function eventLines(history: { events?: any[] | null }): string[] {
  const { EventType } = require('@temporalio/proto').temporal.api.enums.v1;
  const names: Record<number, string> = Object.fromEntries(Object.entries(EventType).map(([k, v]) => [v, k.replace('EVENT_TYPE_', '')]));
  return (history.events ?? []).map((ev: any) => {
    const about =
      ev.activityTaskScheduledEventAttributes?.activityType?.name ??
      markerOf(ev) ??
      (ev.timerStartedEventAttributes ? `timer ${ev.timerStartedEventAttributes.timerId}` : undefined) ??
      (ev.workflowExecutionUpdateAcceptedEventAttributes
        ? `update ${ev.workflowExecutionUpdateAcceptedEventAttributes.acceptedRequest?.input?.name}`
        : undefined) ??
      (ev.workflowExecutionUpdateCompletedEventAttributes ? `update done ${ev.workflowExecutionUpdateCompletedEventAttributes.meta?.updateId}` : undefined) ??
      (ev.workflowExecutionSignaledEventAttributes ? `signal ${ev.workflowExecutionSignaledEventAttributes.signalName}` : undefined) ??
      (ev.activityTaskCompletedEventAttributes ? `scheduled ${ev.activityTaskCompletedEventAttributes.scheduledEventId}` : undefined) ??
      (ev.activityTaskCanceledEventAttributes ? `scheduled ${ev.activityTaskCanceledEventAttributes.scheduledEventId}` : undefined) ??
      '';
    return `${ev.eventId} ${names[ev.eventType] ?? ev.eventType} ${about}`;
  });
}

function markerOf(ev: any): string | undefined {
  const data = ev.markerRecordedEventAttributes?.details?.data?.payloads?.[0]?.data;
  if (!data) return ev.markerRecordedEventAttributes?.markerName;
  try {
    const meta = JSON.parse(Buffer.from(data).toString());
    return `${meta.activity_type ?? meta.activityType} seq ${meta.seq}`;
  } catch {
    return ev.markerRecordedEventAttributes?.markerName;
  }
}
