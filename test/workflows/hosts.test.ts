import { join } from 'node:path';
import test from 'ava';
import { sessionWorkflowId } from '../../contract/messages';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

const scenario = () =>
  writeScenario({
    name: 'host-bound',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              { name: 'write_file', arguments: { path: 'a.txt', content: 'a\n' } },
              { name: 'bash', arguments: { command: 'pwd' } },
            ],
          },
          { tool_calls: [{ name: 'git_commit', arguments: { message: 'add a' } }] },
          { content: 'done' },
        ],
      },
    ],
  });

test("two workers on one server: each session's worktree activities stay on the host that owns the worktree", async (t) => {
  const orchard = shared();
  const hostA = orchard.hostId;
  const hostB = `${hostA}-b`;
  await orchard.startHost(hostB);
  const onA = uniqueId('on-a');
  const onB = uniqueId('on-b');
  await orchard.client.createSession({
    sessionId: onA,
    title: 'a',
    repo: makeRepo(),
    host: hostA,
    model: { provider: 'scripted', scenario: scenario() },
    task: 'go',
  });
  await orchard.client.createSession({
    sessionId: onB,
    title: 'b',
    repo: makeRepo(),
    host: hostB,
    model: { provider: 'scripted', scenario: scenario() },
    task: 'go',
  });
  const [a, b] = await Promise.all([orchard.client.waitUntilSettled(onA, { afterTurn: 1 }), orchard.client.waitUntilSettled(onB, { afterTurn: 1 })]);
  t.is(a.lastTurn?.outcome, 'finished');
  t.is(b.lastTurn?.outcome, 'finished');
  t.true(a.worktree!.includes(join(hostA, onA)), a.worktree);
  t.true(b.worktree!.includes(join(hostB, onB)), b.worktree);

  for (const [sessionId, host] of [
    [onA, hostA],
    [onB, hostB],
  ]) {
    const { rows } = await orchard.pool.query(`SELECT DISTINCT host FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
    t.deepEqual(rows, [{ host }]);
    // From the history: every worktree activity was scheduled on the host's queue and picked up by its worker.
    const history = await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).fetchHistory();
    const events = history.events ?? [];
    const scheduled = new Map<string, { type: string; queue: string }>();
    const startedBy: { type: string; identity: string }[] = [];
    for (const e of events) {
      const s = e.activityTaskScheduledEventAttributes;
      if (s) scheduled.set(String(e.eventId), { type: s.activityType?.name ?? '', queue: s.taskQueue?.name ?? '' });
      const st = e.activityTaskStartedEventAttributes;
      if (st) startedBy.push({ type: scheduled.get(String(st.scheduledEventId))!.type, identity: st.identity ?? '' });
    }
    const worktreeTypes = new Set(['prepareWorktree', 'executeTool']);
    const worktreeScheduled = [...scheduled.values()].filter((s) => worktreeTypes.has(s.type));
    t.true(worktreeScheduled.length >= 4);
    t.true(worktreeScheduled.every((s) => s.queue === `orchard-host-${host}`));
    t.true(startedBy.filter((s) => worktreeTypes.has(s.type)).every((s) => s.identity === `orchard-host@${host}`));
    // The model calls ran on the shared queue, on either worker.
    t.true([...scheduled.values()].filter((s) => s.type === 'modelStep').every((s) => s.queue === orchard.taskQueue));
  }
});

test('a session whose host has no worker fails setup with host_unavailable instead of waiting forever', async (t) => {
  const orchard = shared();
  const sessionId = uniqueId('no-host');
  await orchard.client.createSession({
    sessionId,
    title: 'nowhere',
    repo: makeRepo(),
    host: `${orchard.hostId}-gone`,
    model: { provider: 'scripted', scenario: scenario() },
    limits: { hostWaitSeconds: 2 },
  });
  const view = await orchard.client.waitUntilSettled(sessionId, { timeoutMs: 30_000 });
  t.is(view.status, 'closed');
  t.is(view.error?.code, 'host_unavailable');
});
