import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { UNKNOWN_OUTCOME } from '../../activities/store/transcript';
import { waitFor } from '../helpers/wait';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

test('a worker shut down past its grace period stops the command, records the claim unknown, and the retry tells the model so', async (t) => {
  const orchard = shared();
  const hostId = uniqueId('draining');
  // This host's worker drains for half a second only: the command outlives the grace period.
  const draining = await orchard.startHost(hostId, { hostOnly: true, shutdownGraceMs: 500 });
  const seconds = 3000 + Math.floor(Math.random() * 900);
  const scenario = writeScenario({
    name: 'drain',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: `echo started >> runs.log; sleep ${seconds}; echo finished >> runs.log` } }] }, { content: 'after the deploy' }] }],
  });
  const sessionId = uniqueId('drain');
  await orchard.client.createSession({ sessionId, title: 'drain', repo: makeRepo(), host: hostId, model: { provider: 'scripted', scenario }, task: 'build' });
  const view0 = await waitFor(async () => {
    const v = await orchard.client.status(sessionId);
    return v.worktree && existsSync(join(v.worktree, 'runs.log')) ? v : undefined;
  });

  draining.shutdown();
  const claim = await waitFor(async () => {
    const { rows } = await orchard.pool.query(`SELECT state, unknown_reason FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
    return rows[0]?.state === 'unknown' ? rows[0] : undefined;
  });
  t.regex(claim.unknown_reason, /shut down/);
  // The new version's worker for the host takes the retry: it reports unknown and runs nothing again.
  await orchard.startHost(hostId, { hostOnly: true });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 60_000 });
  t.like(view.lastTurn, { outcome: 'finished', finalExcerpt: 'after the deploy' });
  t.deepEqual(readFileSync(join(view0.worktree!, 'runs.log'), 'utf8').trim().split('\n'), ['started']);
  const shown = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.deepEqual(shown.rows.map((r) => r.content), [UNKNOWN_OUTCOME]);
  const kept = await orchard.pool.query(`SELECT content FROM tool_outputs WHERE session_id = $1`, [sessionId]);
  t.regex(kept.rows[0].content, /^interrupted: the worker running this command was shut down/);
});

