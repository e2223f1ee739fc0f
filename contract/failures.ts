import { ApplicationFailure } from '@temporalio/common';
import type { ErrorCode } from './errors';

/** A typed, non-retryable failure: the same input would fail the same way on every attempt. */
export function orchardFailure(code: ErrorCode, message: string, details?: unknown): ApplicationFailure {
  return ApplicationFailure.create({
    type: code,
    message,
    nonRetryable: true,
    details: details === undefined ? undefined : [details],
  });
}
