import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import test from 'ava';
import { freePort, loadDevConfig, startDevServer, type DevServer } from '../../worker/dev-server';
import { sessionWorkflowId } from '../../contract/messages';
import { makeRepo, startOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/**
 * The Temporal server itself restarts (a dev server on a file database, stopped and started again on the same port)
 * while a session runs a command: the workers reconnect, the turn finishes, the command ran once, and the session
 * takes its next task. How long the server stays down: ORCHARD_TEST_TEMPORAL_DOWN_MS (3 s by default).
 */
const DOWN_MS = Number(process.env.ORCHARD_TEST_TEMPORAL_DOWN_MS ?? 3_000);
const projectRoot = resolve(__dirname, '..', '..');

test('a Temporal server restart mid-command: the workers reconnect, the turn finishes, the command ran once', async (t) => {
  const port = await freePort('127.0.0.1');
  const dbFile = join(mkdtempSync(join(tmpdir(), 'orchard-temporal-')), 'temporal.db');
  const config = loadDevConfig(projectRoot, { port, ui: false, dbFile });
  const log = (line: string) => t.log(line);
  let server: DevServer = await startDevServer(config, log);
  t.teardown(() => server.stop());
  const orchard = await startOrchard(t, { temporalAddress: server.address });

  const scenario = writeScenario({
    name: 'restart',
    turns: [
      {
        steps: [
          { tool_calls: [{ name: 'bash', arguments: { command: 'echo started >> runs.log; sleep 4; echo done >> runs.log' } }] },
          { content: 'first done' },
        ],
      },
      { steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'echo second >> runs.log' } }] }, { content: 'second done' }] },
    ],
  });
  const sessionId = uniqueId('restart');
  await orchard.client.createSession({ sessionId, title: 'restart', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'run it' });
  const worktree = await waitFor(async () => (await orchard.client.status(sessionId)).worktree, 60_000, 'the worktree');
  const runsLog = join(worktree, 'runs.log');
  await waitFor(() => existsSync(runsLog) || undefined, 60_000, 'the command started');

  await server.stop();
  await new Promise((r) => setTimeout(r, DOWN_MS));
  server = await startDevServer(config, log);

  const first = await waitFor(
    async () => {
      const v = await orchard.client.status(sessionId).catch(() => undefined);
      return v && v.turnsCompleted >= 1 && v.status === 'idle' ? v : undefined;
    },
    120_000,
    'the first turn finished after the restart',
  );
  t.is(first.lastTurn?.finalExcerpt, 'first done', JSON.stringify(first.lastTurn));
  await orchard.client.send(sessionId, 'and the next one');
  const second = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2, timeoutMs: 120_000 });
  t.is(second.lastTurn?.finalExcerpt, 'second done');
  t.deepEqual(readFileSync(runsLog, 'utf8').trim().split('\n'), ['started', 'done', 'second'], 'each command ran once');
  t.is((await orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId)).describe()).status.name, 'RUNNING');
});
