import { Pool, type PoolClient } from 'pg';

export interface PoolOptions {
  /** Connections in the pool; PGlite serialises them anyway, a real server uses them in parallel. */
  max?: number;
  /** Per-statement bound: a stuck query fails the activity (which retries) instead of hanging it. */
  statementTimeoutMs?: number;
  /** Search path, for tests that isolate a schema. */
  schema?: string;
}

export function createPool(connectionString: string, options: PoolOptions = {}): Pool {
  const settings = [
    `SET statement_timeout = ${options.statementTimeoutMs ?? 30_000}`,
    'SET idle_in_transaction_session_timeout = 60000',
  ];
  if (options.schema) settings.push(`SET search_path TO ${quoteIdent(options.schema)}`);
  const pool = new Pool({
    connectionString,
    max: options.max ?? 8,
    // Set per connection rather than as startup options: PGlite's socket server ignores startup parameters.
    // The pool hands the client out only after this resolves.
    onConnect: async (client) => {
      await client.query(settings.join('; '));
    },
  });
  // An idle client that loses its server emits 'error' on the pool; without a listener it kills the process.
  pool.on('error', () => undefined);
  return pool;
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
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
