import { Pool, type PoolClient } from 'pg';

export interface PoolOptions {
  /** Connections in the pool; PGlite serialises them anyway, a real server uses them in parallel. */
  max?: number;
  /**
   * Per-statement bound: a stuck query fails the activity (which retries) instead of hanging it. Server-side
   * inside transactions, client-side (pg's query_timeout, the connection is then discarded) for single statements.
   */
  statementTimeoutMs?: number;
  /** How long a statement in a transaction waits for a row lock (fence transactions lock lease rows). */
  lockTimeoutMs?: number;
  /**
   * Search path, for tests that isolate a schema. Set per connection (a session setting), so only on a direct
   * connection to a real server: never through PgBouncer in transaction mode, never on PGlite.
   */
  schema?: string;
  /**
   * The database is embedded PGlite behind its socket server: one backend session shared by every connection,
   * which ignores startup parameters, shares every SET, does not enforce statement_timeout, and freezes the
   * whole process when idle_in_transaction_session_timeout fires. No session settings are sent to it.
   */
  embedded?: boolean;
}

/** What withTransaction sets with SET LOCAL at the start of every transaction (none for PGlite). */
interface TransactionBounds {
  statementTimeoutMs: number;
  lockTimeoutMs: number;
  idleInTransactionMs: number;
}

const transactionBounds = new WeakMap<Pool, TransactionBounds>();

/**
 * No session-level settings and no startup options: behind PgBouncer in transaction mode consecutive
 * transactions of one client may run on different server sessions, and PgBouncer refuses the `options`
 * startup parameter. Bounds are set per transaction (SET LOCAL) and per statement (client-side timeout).
 */
export function createPool(connectionString: string, options: PoolOptions = {}): Pool {
  if (options.embedded && options.schema) throw new Error('a schema per pool needs a real PostgreSQL server');
  const statementTimeoutMs = options.statementTimeoutMs ?? 30_000;
  const schema = options.schema;
  const pool = new Pool({
    connectionString,
    max: options.max ?? 8,
    // PGlite: as before, nothing that could leave its one shared session mid-statement.
    query_timeout: options.embedded ? undefined : statementTimeoutMs,
    onConnect: schema ? async (client) => void (await client.query(`SET search_path TO ${quoteIdent(schema)}`)) : undefined,
  });
  if (!options.embedded) {
    transactionBounds.set(pool, { statementTimeoutMs, lockTimeoutMs: options.lockTimeoutMs ?? 10_000, idleInTransactionMs: 60_000 });
  }
  // An idle client that loses its server emits 'error' on the pool; without a listener it kills the process.
  pool.on('error', () => undefined);
  return pool;
}

/**
 * One client per transaction; a client whose transaction broke is discarded, not returned to the pool. The
 * transaction's bounds are set with SET LOCAL in the same round trip as BEGIN, so they end with it.
 */
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    const bounds = transactionBounds.get(pool);
    await client.query(
      bounds
        ? `BEGIN; SET LOCAL statement_timeout = ${bounds.statementTimeoutMs}; SET LOCAL lock_timeout = ${bounds.lockTimeoutMs}; ` +
            `SET LOCAL idle_in_transaction_session_timeout = ${bounds.idleInTransactionMs}`
        : 'BEGIN',
    );
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

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
