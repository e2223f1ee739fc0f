/**
 * One set of activity options per kind of activity (store, model, dispatch, quiescence, host), each with the
 * timeouts that kind really has, and how a failed activity is told in a turn ref. Workflow-safe: SDK types and
 * constants only.
 *
 * Infrastructure faults (a refused connection, a timeout, a 5xx, a lost worker) are retried without an attempt
 * limit, backing off to a bounded interval: none of them ever reaches a handler or a workflow's main function. Only a
 * typed business refusal (`orchardFailure`, non-retryable) ends an activity, and its caller hears the code.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  TimeoutFailure,
  type ActivityOptions,
  type LocalActivityOptions,
} from '@temporalio/workflow';
import { TimeoutType, type RetryPolicy } from '@temporalio/common';
import { hostTaskQueue } from '../contract/messages';

/** No `maximumAttempts`: Temporal retries until the activity succeeds or fails non-retryably. */
const RETRY_INFRASTRUCTURE: RetryPolicy = { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' };

/**
 * Histories recorded before the kinds were split scheduled local store activities with these; kept so they replay.
 * New code never uses them.
 */
export const STORE_LOCAL_OPTIONS: LocalActivityOptions = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '500 milliseconds', maximumAttempts: 5 },
};

/** Postgres reads and writes of a few rows (no heartbeat: each attempt is bounded by the pool's statement timeout). */
export const STORE_OPTIONS: ActivityOptions = { startToCloseTimeout: '30 seconds', retry: RETRY_INFRASTRUCTURE };

export const MODEL_ACTIVITY_OPTIONS: ActivityOptions = {
  // A model call can be slow; the heartbeat (every second, a session's every 10 s — its cancel pokes it to beat at
  // once) is what delivers cancellation and tells Temporal the worker still lives.
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '30 seconds',
  // 429/5xx/timeouts back off and retry; typed failures (malformed response, bad key) are non-retryable.
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
};

/**
 * Work that waits on Temporal or git on the shared queue (a child's create or send, a task's dispatch or settlement,
 * a Coordinator tool that may certify): the activity heartbeats every second while it runs, so a lost worker is
 * noticed in seconds and the attempt re-run (each is idempotent by its request id or stored plan).
 */
export const DISPATCH_OPTIONS: ActivityOptions = {
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '30 seconds',
  retry: RETRY_INFRASTRUCTURE,
};

/**
 * A watch that waits, for as long as the thing it watches lives, on something outside (another workflow's close): it
 * heartbeats, so a lost worker is noticed in seconds and the watch starts again elsewhere; an attempt that reaches
 * its start-to-close bound simply starts again.
 */
export const WATCH_OPTIONS: ActivityOptions = {
  startToCloseTimeout: '1 hour',
  heartbeatTimeout: '30 seconds',
  retry: { ...RETRY_INFRASTRUCTURE, initialInterval: '1 second' },
  cancellationType: ActivityCancellationType.TRY_CANCEL,
};

/**
 * A handoff's yield and quiescence proofs: they heartbeat every second while they wait for the old runtime, so a
 * lost worker is noticed within the handoff's SLO and the same check runs again elsewhere; the workflow learns when a
 * cancelled yield has really stopped.
 */
export const QUIESCENCE_OPTIONS: ActivityOptions = {
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '5 seconds',
  retry: RETRY_INFRASTRUCTURE,
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
};

/**
 * Activities bound to a worktree's disk, on its host's queue. `scheduleToStartTimeout` bounds the wait for the host
 * (not retried: a vanished host is learned about, as `host_unavailable`, instead of waited on forever); everything
 * else is retried like any infrastructure fault.
 */
export function hostActivityOptions(host: string, hostWaitSeconds: number): ActivityOptions {
  return {
    taskQueue: hostTaskQueue(host),
    scheduleToStartTimeout: `${hostWaitSeconds} seconds`,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: RETRY_INFRASTRUCTURE,
  };
}

/** A failed activity as a turn ref's error: its typed code, or `host_unavailable` when no host worker took it. */
export function failureOf(err: ActivityFailure): { code: string; message: string } {
  const cause = err.cause;
  if (cause instanceof ApplicationFailure) return { code: cause.type ?? 'activity_failed', message: cause.message };
  if (cause instanceof TimeoutFailure && cause.timeoutType === TimeoutType.SCHEDULE_TO_START) {
    return { code: 'host_unavailable', message: 'no worker for the worktree host picked up the activity in time' };
  }
  return { code: 'activity_failed', message: cause?.message ?? err.message };
}
