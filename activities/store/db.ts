import { Pool, type PoolClient } from 'pg';

export interface PoolOptions {
  /** Connections in the pool; PGlite serialises them anyway, a real server uses them in parallel. */
  max?: number;
  /** Per-statement bound: a stuck query fails the activity (which retries) instead of hanging it. */
  statementTimeoutMs?: number;
  /** Search path, for tests that isolate a schema (real servers only). */
  schema?: string;
  /**
   * The database is embedded PGlite behind its socket server: one backend session shared by every connection,
   * which ignores startup parameters, shares every SET, does not enforce statement_timeout, and freezes the
   * whole process when idle_in_transaction_session_timeout fires. No session settings are sent to it.
   */
  embedded?: boolean;
}

export function createPool(connectionString: string, options: PoolOptions = {}): Pool {
  if (options.embedded && options.schema) throw new Error('a schema per pool needs a real PostgreSQL server');
  const settings = [
    `-c statement_timeout=${options.statementTimeoutMs ?? 30_000}`,
    '-c idle_in_transaction_session_timeout=60000',
    ...(options.schema ? [`-c search_path=${options.schema}`] : []),
  ];
  const pool = new Pool({
    connectionString,
    max: options.max ?? 8,
    options: options.embedded ? undefined : settings.join(' '),
  });
  // An idle client that loses its server emits 'error' on the pool; without a listener it kills the process.
  pool.on('error', () => undefined);
  return pool;
}

/** One client per transaction; a client whose transaction broke is discarded, not returned to the pool. */
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    client.release();
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release(err instanceof Error ? err : new Error(String(err)));
    throw err;
  }
}
