/**
 * Activity options shared by the session and orchestrator workflows (each adds its own `summary`), and how a
 * failed activity is told in a turn ref. Workflow-safe: SDK types and constants only.
 */
import { ActivityCancellationType, ActivityFailure, ApplicationFailure, TimeoutFailure, type ActivityOptions, type LocalActivityOptions } from '@temporalio/workflow';
import { TimeoutType } from '@temporalio/common';

/** Postgres writes of a few rows (local activities): a short bound, a few retries, then the caller hears of it. */
export const STORE_LOCAL_OPTIONS: LocalActivityOptions = {
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '500 milliseconds', maximumAttempts: 5 },
};

export const MODEL_ACTIVITY_OPTIONS: ActivityOptions = {
  // A model call can be slow; the heartbeat (every second while waiting) is what delivers cancellation and tells
  // Temporal the worker still lives.
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '30 seconds',
  // 429/5xx/timeouts back off and retry; typed failures (malformed response, bad key) are non-retryable.
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 8 },
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
};

/** A failed activity as a turn ref's error: its typed code, or `host_unavailable` when no host worker took it. */
export function failureOf(err: ActivityFailure): { code: string; message: string } {
  const cause = err.cause;
  if (cause instanceof ApplicationFailure) return { code: cause.type ?? 'activity_failed', message: cause.message };
  if (cause instanceof TimeoutFailure && cause.timeoutType === TimeoutType.SCHEDULE_TO_START) {
    return { code: 'host_unavailable', message: 'no worker for the worktree host picked up the activity in time' };
  }
  return { code: 'activity_failed', message: cause?.message ?? err.message };
}
