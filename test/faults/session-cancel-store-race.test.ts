import test from 'ava';
import { makeRepo, startOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

// Found by the schedule fuzz test: a send whose text was still being stored when the session was cancelled stayed
// 'queued' in session_tasks for ever (the close's end changed no row yet), although the session said it was cancelled.
test('a task whose row lands after the cancel closed the session still ends cancelled in session_tasks', async (t) => {
  t.timeout(120_000);
  const orchard = await startOrchard(t);
  const sessionId = uniqueId('race');
  await orchard.client.createSession({ sessionId, title: 'race', repo: makeRepo() });
  const executionId = await waitFor(async () => (await orchard.client.status(sessionId)).executionId, 30_000, 'execution id');
  // Hold the store of task t1: an uncommitted row with its key makes the worker's INSERT … ON CONFLICT wait.
  const blocker = await orchard.pool.connect();
  await blocker.query('BEGIN');
  await blocker.query(`INSERT INTO session_tasks (execution_id, task_id, session_id, task, state) VALUES ($1, 't1', $2, 'blocker', 'queued')`, [
    executionId,
    sessionId,
  ]);
  const send = orchard.client.send(sessionId, { task: 'do it', requestId: 'send-1' });
  await waitFor(async () => (await orchard.client.status(sessionId)).queued === 1 || undefined, 30_000, 'the send reserved');
  const cancelled = orchard.client.cancel(sessionId, 'cancel while the send is being stored');
  // The close records its end states (UPDATE … WHERE state IN queued/running) while the row is not there yet.
  await waitFor(async () => (await orchard.client.status(sessionId)).status === 'closed' || undefined, 30_000, 'closed');
  await blocker.query('ROLLBACK');
  blocker.release();
  const ack = await send;
  const view = await cancelled;
  t.log('send answered', ack, 'session', view.status, view.tasks);
  const { rows } = await orchard.pool.query(`SELECT task_id, state, outcome, reason FROM session_tasks WHERE session_id = $1`, [sessionId]);
  t.log('session_tasks', rows);
  const described = await orchard.temporal.workflow.getHandle(`session/${sessionId}`).describe();
  t.log('workflow', described.status.name);
  t.is(ack.taskState, 'cancelled');
  t.deepEqual(
    rows.map((r) => [r.task_id, r.state]),
    [['t1', 'cancelled']],
    'the stored task ends cancelled, as the session says',
  );
});
