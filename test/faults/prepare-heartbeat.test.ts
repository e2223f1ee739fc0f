import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { sessionWorkflowId } from '../../contract/messages';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { startHostWorker, until } from './harness';

const shared = sharedOrchard(test);
/** temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_HEARTBEAT, as history events carry it. */
const TIMEOUT_TYPE_HEARTBEAT = 4;

test('a worker killed while preparing a worktree is noticed by the heartbeat timeout and a new worker prepares it', async (t) => {
  const orchard = shared();
  const hostId = uniqueId('prep-crash');
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-prep-crash-'));
  const first = await startHostWorker(t, hostId, worktreeRoot, { ORCHARD_TEST_HOLD_PREPARE: '1' });
  const sessionId = uniqueId('prep');
  const scenario = writeScenario({ name: 'prep', turns: [{ steps: [{ content: 'prepared and done' }] }] });
  await orchard.client.createSession({ sessionId, title: 'prep', repo: makeRepo(), host: hostId, model: { provider: 'scripted', scenario }, task: 'go' });
  await until(() => first.output().includes('preparing'), 30_000);
  first.kill('SIGKILL');
  await startHostWorker(t, hostId, worktreeRoot);

  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 100_000 });
  t.like(view.lastTurn, { outcome: 'finished', finalExcerpt: 'prepared and done' });
  // The retry was caused by the missed heartbeat (15 s), not by the 2 minute start-to-close bound.
  const history = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
  const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'prepareWorktree')!;
  const started = history.events!.find((e) => e.activityTaskStartedEventAttributes?.scheduledEventId?.toString() === scheduled.eventId!.toString());
  const attempt = started!.activityTaskStartedEventAttributes!;
  t.is(attempt.attempt, 2);
  t.is(attempt.lastFailure?.timeoutFailureInfo?.timeoutType, TIMEOUT_TYPE_HEARTBEAT);
});
