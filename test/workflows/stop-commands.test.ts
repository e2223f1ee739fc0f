import test from 'ava';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { leaseKey } from '../../activities';
import { pidsWithCommandLine as liveProcesses, killAll } from '../helpers/processes';
import { waitFor } from '../helpers/wait';
import { makeRepo, startOrchard, uniqueId, writeScenario } from '../helpers/orchard';

/**
 * A cancelled session stops its running command on its host itself (`stopCommands`), without waiting for Temporal
 * to deliver the activity's cancellation with a heartbeat. To tell the two apart, the host's commands here never see
 * the activity's cancellation (a test hook holds it back until the test ends): only the session's direct stop can end
 * the command. The lease check cannot either: the lease stays the session's until its turn has ended.
 */
test('a cancelled session stops its running command on its host without the activity cancellation', async (t) => {
  const held = new AbortController();
  const orchard = await startOrchard(t, { hostHooks: { toolCancellation: () => held.signal } });
  // Registered after the workers' teardown, so it runs first: the held command ends and the workers can stop.
  t.teardown(() => held.abort());
  const seconds = 5000 + Math.floor(Math.random() * 900);
  const needle = `sleep ${seconds}`;
  t.teardown(() => killAll(liveProcesses(needle)));
  const scenario = writeScenario({
    name: 'long-command',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: `echo started > marker && sleep ${seconds}` } }] }, { content: 'never' }] }],
  });
  const sessionId = uniqueId('stop');
  await orchard.client.createSession({ sessionId, title: 'long command', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'run it' });
  const worktree = await waitFor(async () => (await orchard.client.status(sessionId)).worktree, 60_000, 'the worktree');
  await waitFor(() => existsSync(join(worktree, 'marker')) && liveProcesses(needle).length > 0, 60_000, 'the command to start');
  const groups = () =>
    orchard.pool
      .query<{ pgid: number; ended_at: Date | null; end_reason: string | null }>(
        'SELECT pgid, ended_at, end_reason FROM lease_process_groups WHERE worktree = $1',
        [leaseKey(orchard.hostId, worktree)],
      )
      .then((r) => r.rows);
  t.is((await groups()).length, 1);

  // A test that fails first leaves the cancel's answer pending: it stops waiting before the connection closes.
  const answer = new AbortController();
  t.teardown(() => answer.abort());
  const cancelled = orchard.client.cancel(sessionId, 'test', { signal: answer.signal });
  cancelled.catch(() => undefined);
  // Generous: the direct stop takes a round trip through the workflow and the host queue; without it, nothing stops
  // the command until the test ends (its sleep outlasts the test by far).
  const ended = await waitFor(async () => (await groups()).every((g) => g.ended_at !== null), 45_000, 'the process group to end').catch(() => false);
  t.true(ended, "the command's process group is still open after the cancel");
  t.deepEqual(liveProcesses(needle), []);
  t.deepEqual(
    (await groups()).map((g) => g.end_reason),
    ['exited'],
  );

  held.abort();
  const view = await cancelled;
  t.is(view.status, 'closed');
  t.is(view.closedAs, 'cancelled');
  t.is(view.lastTurn?.outcome, 'cancelled');
  // The tool call ended as stopped by the cancel, recorded once: not a timeout, not a run to its end.
  const { rows } = await orchard.pool.query<{ state: string; ok: boolean; exit_code: number | null; content: string }>(
    `SELECT d.state, o.ok, o.exit_code, o.content FROM tool_dispatches d JOIN tool_outputs o USING (turn_id, step, call_id) WHERE d.session_id = $1`,
    [sessionId],
  );
  t.is(rows.length, 1);
  t.like(rows[0], { state: 'settled', ok: false, exit_code: null });
  t.true(rows[0].content.startsWith('cancelled (the process group was stopped)'), rows[0].content);
});
