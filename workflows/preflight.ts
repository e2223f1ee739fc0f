import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { HostActivities } from '../contract/activities';
import { isErrorCode } from '../contract/errors';
import type { HostPreflightInput, Problem } from '../contract/messages';
import { failureOf, hostActivityOptions } from './activity-options';

/**
 * Asks the host whose disk has the repository to check it (`checkRepository`), so a session, orchestrator or team on
 * another host is refused before anything starts, as one on this host is. A host whose worker does not take the check
 * within `hostWaitSeconds` is `host_unavailable`; a check that failed for another reason says so.
 */
export async function hostPreflight(input: HostPreflightInput): Promise<Problem | null> {
  const host = proxyActivities<HostActivities>({
    ...hostActivityOptions(input.host, input.hostWaitSeconds),
    startToCloseTimeout: '2 minutes',
    retry: { maximumAttempts: 3 },
    summary: `check ${input.check.repo} on ${input.host}`,
  });
  try {
    return await host.checkRepository(input.check);
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    const { code, message } = failureOf(err);
    if (isErrorCode(code) && (err.cause instanceof ApplicationFailure || code === 'host_unavailable')) return { code, message };
    throw err;
  }
}
