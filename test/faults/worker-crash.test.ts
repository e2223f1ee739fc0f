import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

function startHostWorker(t: import('ava').ExecutionContext, hostId: string, worktreeRoot: string): Promise<ChildProcess> {
  // node itself, not the tsx launcher (which runs node as a child): SIGKILL must hit the worker process.
  const child = spawn(process.execPath, ['--import', 'tsx', join(__dirname, 'host-worker.ts'), hostId, worktreeRoot], {
    cwd: join(__dirname, '../..'),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.teardown(() => {
    child.kill('SIGKILL');
  });
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) resolve(child);
    });
    child.on('exit', (code) => reject(new Error(`host worker exited early with ${code}`)));
  });
}

function killByCommandLine(needle: string): void {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ').includes(needle)) process.kill(Number(entry), 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

async function until(check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}

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
  // The dead worker's command would linger as an orphan; a real host restart takes it with it.
  killByCommandLine(`sleep ${seconds}`);
  await startHostWorker(t, hostId, worktreeRoot);

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
