import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { pidsWithCommandLine } from '../helpers/processes';
import { startHostWorker, until } from './harness';

const shared = sharedOrchard(test);

test('a worker killed mid-command: the retried tool call reports unknown and never runs the command twice', async (t) => {
  const orchard = shared();
  const hostId = uniqueId('crashy');
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-crash-'));
  const seconds = 5000 + Math.floor(Math.random() * 900);
  const scenario = writeScenario({
    name: 'crash',
    turns: [
      {
        steps: [
          { tool_calls: [{ name: 'bash', arguments: { command: `echo started >> runs.log; sleep ${seconds}; echo finished >> runs.log` } }] },
          { content: 'after the crash' },
        ],
      },
    ],
  });
  const first = await startHostWorker(t, hostId, worktreeRoot);
  const sessionId = uniqueId('crash');
  await orchard.client.createSession({ sessionId, title: 'crash', repo: makeRepo(), host: hostId, model: { provider: 'scripted', scenario }, task: 'run it' });
  const runsLog = join(worktreeRoot, sessionId, 'runs.log');
  await until(() => existsSync(runsLog), 30_000);

  first.kill('SIGKILL');
  // The dead worker's command lingers as an orphan until the next worker's start-up sweep reaps it.
  await startHostWorker(t, hostId, worktreeRoot);
  t.deepEqual(pidsWithCommandLine(`sleep ${seconds}`), [], "the orphaned command outlived the new worker's start");

  // The activity's heartbeat timeout expires, the retry lands on the new worker and finds only the claim.
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 90_000 });
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(view.lastTurn?.finalExcerpt, 'after the crash');
  t.deepEqual(readFileSync(runsLog, 'utf8').trim().split('\n'), ['started']);
  const dispatch = await orchard.pool.query(`SELECT state FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
  t.deepEqual(dispatch.rows, [{ state: 'unknown' }]);
  const tool = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.regex(tool.rows[0].content, /outcome unknown/);
});
