import { MockActivityEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import type { createHostActivities } from '../../activities';
import { turnKeyOf } from '../../activities/store/keys';
import { appendEntry } from '../../activities/store/transcript';

type Host = ReturnType<typeof createHostActivities>;
type Prepared = Awaited<ReturnType<Host['prepareWorktree']>>;

/**
 * A model's tool call (turn 1, step `step`) recorded in the transcript as the model activity would, and a runner
 * of the host's `executeTool` for it in the SDK's activity harness — one attempt per call, so a test can
 * re-deliver the same call as a retried attempt would be.
 */
export async function recordToolCall(
  pool: Pool,
  host: Host,
  session: { sessionId: string; prepared: Prepared },
  step: number,
  call: { name: string; args: unknown },
): Promise<(attempt?: number) => ReturnType<Host['executeTool']>> {
  const { sessionId, prepared } = session;
  await appendEntry(
    pool,
    { ...turnKeyOf({ sessionId, turn: 1 }), step, ordinal: 0 },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `c${step}`, type: 'function', function: { name: call.name, arguments: JSON.stringify(call.args) } }],
    },
  );
  return (attempt = 1) =>
    new MockActivityEnvironment({ attempt }).run(host.executeTool, {
      sessionId,
      turn: 1,
      step,
      callId: `c${step}`,
      index: 0,
      profile: 'child' as const,
      worktree: prepared.worktree,
      branch: prepared.branch,
      bashTimeoutSeconds: 30,
      lease: prepared.lease,
    });
}
