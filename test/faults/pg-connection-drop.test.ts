import { randomInt } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { Client } from 'pg';
import { createPool, withTransaction } from '../../activities/store/db';
import { makeRepo, startOrchard, testStackEnv, uniqueId, writeScenario } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/**
 * A PostgreSQL connection that ends under a checked-out client (a failover, a restart, pg_terminate_backend) makes
 * that client emit 'error'. Without a listener Node throws it as an uncaught exception: here it would end ava's
 * worker process, in production the worker. These tests end the connections of open transactions on purpose.
 */
const WAIT_MS = Number(process.env.ORCHARD_TEST_FAULT_WAIT_MS ?? 30_000);

// PGlite serves every connection from one backend session, so one connection cannot be terminated on its own.
const realPg = (title: string, fn: (t: ExecutionContext) => Promise<void>) =>
  testStackEnv().embedded ? test.skip(`${title} (skipped: needs a real PostgreSQL to terminate one backend; CI runs on one)`, fn) : test(title, fn);

async function connect(t: ExecutionContext, url: string): Promise<Client> {
  const client = new Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  t.teardown(() => client.end().catch(() => undefined));
  return client;
}

/** A URL naming its connections, so the test can find (and terminate) exactly the backends opened through it. */
function withApplicationName(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

/** Backends of `applicationName` that wait on a lock `holderPid` holds. */
async function blockedBy(admin: Client, applicationName: string, holderPid: number): Promise<number[]> {
  const { rows } = await admin.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND $2::int = ANY (pg_blocking_pids(pid))`,
    [applicationName, holderPid],
  );
  return rows.map((r) => r.pid);
}

async function terminateAll(admin: Client, applicationName: string): Promise<number> {
  const { rows } = await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, [
    applicationName,
  ]);
  return rows.length;
}

realPg('a transaction whose connection is terminated rejects, the process lives on, and the pool serves the next one', async (t) => {
  const url = testStackEnv().databaseUrl;
  const applicationName = uniqueId('orchard-drop-tx');
  const lost: Error[] = [];
  const pool = createPool(withApplicationName(url, applicationName), { max: 2, onConnectionError: (err) => lost.push(err) });
  t.teardown(() => pool.end());
  const admin = await connect(t, url);
  const holder = await connect(t, url);
  const holderPid: number = (await holder.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  // A transaction-scoped advisory lock stands in for a row lock: the pool's transaction waits on it, open.
  const key = randomInt(1, 2 ** 31);
  await holder.query('BEGIN');
  await holder.query('SELECT pg_advisory_xact_lock($1)', [key]);

  const open = withTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [key]);
    return 'committed';
  });
  open.catch(() => undefined);
  await waitFor(async () => (await blockedBy(admin, applicationName, holderPid)).length === 1, WAIT_MS, 'the transaction waiting on the lock');
  t.is(await terminateAll(admin, applicationName), 1);

  await t.throwsAsync(open);
  await holder.query('ROLLBACK');
  // The client's 'error' (the socket's end, after the query's own failure) reached the pool's listener.
  await waitFor(() => lost.length === 1, WAIT_MS, 'the lost connection reported');
  t.regex(lost[0].message, /Connection terminated/);
  // The broken client was discarded: the next transactions get a live one.
  t.is(await withTransaction(pool, async (client) => (await client.query('SELECT 1 AS one')).rows[0].one), 1);
  t.is(await withTransaction(pool, async (client) => (await client.query('SELECT 2 AS two')).rows[0].two), 2);
});

realPg("a worker whose database connections are terminated mid-turn lives on, and the session's turn completes", async (t) => {
  const url = testStackEnv().databaseUrl;
  const applicationName = uniqueId('orchard-drop-worker');
  const orchard = await startOrchard(t, { databaseUrl: withApplicationName(url, applicationName) });
  const admin = await connect(t, url);
  const holder = await connect(t, url);
  const holderPid: number = (await holder.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
  // The command waits for the test's go-ahead, so the test can lock its claim before the worker settles it.
  const scenario = writeScenario({
    name: 'pg-drop',
    turns: [
      {
        steps: [
          { tool_calls: [{ name: 'bash', arguments: { command: 'until [ -e go-ahead ]; do sleep 0.05; done; rm go-ahead; echo ran' } }] },
          { content: 'done after the drop' },
        ],
      },
    ],
  });
  const sessionId = uniqueId('pg-drop');
  await orchard.client.createSession({ sessionId, title: 'pg drop', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'run it' });

  const claim = await waitFor(
    async () => (await admin.query(`SELECT turn_id, step, call_id FROM tool_dispatches WHERE session_id = $1 AND state = 'claimed'`, [sessionId])).rows[0],
    WAIT_MS,
    'the tool call claimed',
  );
  const worktree = await waitFor(async () => (await orchard.client.status(sessionId)).worktree, WAIT_MS, 'the worktree');
  // The settle of this call is a transaction (output + claim): it will wait on this row lock with its client checked out.
  await holder.query('BEGIN');
  await holder.query(`SELECT 1 FROM tool_dispatches WHERE turn_id = $1 AND step = $2 AND call_id = $3 FOR UPDATE`, [claim.turn_id, claim.step, claim.call_id]);
  writeFileSync(join(worktree, 'go-ahead'), '');
  await waitFor(async () => (await blockedBy(admin, applicationName, holderPid)).length > 0, WAIT_MS, "the worker's settle waiting on the lock");

  t.true((await terminateAll(admin, applicationName)) >= 1);
  await holder.query('ROLLBACK');

  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 90_000 });
  t.is(view.lastTurn?.outcome, 'finished', JSON.stringify(view.lastTurn));
  t.is(view.lastTurn?.finalExcerpt, 'done after the drop');
});
