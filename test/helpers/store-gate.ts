import { Client } from 'pg';
import { testStackEnv } from './orchard';

export interface HeldTaskRows {
  /** Lets the held write of `taskId` through (the placeholder is rolled back; the workflow's own row goes in). */
  release(taskId: string): Promise<void>;
  /** Writes now waiting on one of these held rows (not on anyone else's). */
  waiting(): Promise<number>;
  /** Releases whatever is still held (teardown). */
  releaseAll(): Promise<void>;
}

/**
 * Holds the store write of each given task in the real database until `release(taskId)`: an uncommitted row
 * with the same key, on a connection of its own, makes the workflow's insert wait in Postgres (as it would
 * behind a slow disk or a lock), so a test decides in which order the writes finish.
 */
export async function holdTaskRows(executionId: string, sessionId: string, taskIds: readonly string[]): Promise<HeldTaskRows> {
  const url = testStackEnv().databaseUrl;
  const holders = new Map<string, Client>();
  const holderPids: number[] = [];
  for (const taskId of taskIds) {
    const client = new Client({ connectionString: url });
    await client.connect();
    holderPids.push((await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
    await client.query('BEGIN');
    await client.query(`INSERT INTO session_tasks (execution_id, task_id, session_id, task, state) VALUES ($1, $2, $3, 'held by the test', 'queued')`, [
      executionId,
      taskId,
      sessionId,
    ]);
    holders.set(taskId, client);
  }
  const watcher = new Client({ connectionString: url });
  await watcher.connect();
  const release = async (taskId: string) => {
    const client = holders.get(taskId);
    if (!client) return;
    holders.delete(taskId);
    await client.query('ROLLBACK');
    await client.end();
  };
  return {
    release,
    async waiting() {
      const { rows } = await watcher.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1::int[]`, [holderPids]);
      return rows[0].n;
    },
    async releaseAll() {
      for (const taskId of [...holders.keys()]) await release(taskId);
      await watcher.end().catch(() => undefined);
    },
  };
}
