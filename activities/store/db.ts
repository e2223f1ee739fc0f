import { AsyncResource } from 'node:async_hooks';
import { Client, Pool, type PoolClient } from 'pg';

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
  /**
   * Told when a connection of the pool is lost (the client is then discarded). Default: one line on stderr per
   * burst, since a failover loses every connection at once and each affected transaction fails and is retried anyway.
   */
  onConnectionError?: (err: Error) => void;
  /** Called once per statement any client of the pool sends (the worker counts them: `orchard_store_queries_total`). */
  onQuery?: () => void;
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
  const pool = new (options.onQuery ? CallerContextPool : Pool)({
    connectionString,
    max: options.max ?? 8,
    Client: options.onQuery ? countingClient(options.onQuery) : undefined,
    // PGlite: as before, nothing that could leave its one shared session mid-statement.
    query_timeout: options.embedded ? undefined : statementTimeoutMs,
    // pg-pool awaits onConnect and ends the client when it rejects (pg-pool's index.js); @types/pg still types it void.
    // eslint-disable-next-line @typescript-eslint/no-misused-promises
    onConnect: schema ? async (client) => void (await client.query(`SET search_path TO ${quoteIdent(schema)}`)) : undefined,
  });
  if (!options.embedded) {
    transactionBounds.set(pool, { statementTimeoutMs, lockTimeoutMs: options.lockTimeoutMs ?? 10_000, idleInTransactionMs: 60_000 });
  }
  // A client whose connection ends emits 'error'; with no listener Node throws it and the process dies. pg-pool
  // listens only while a client is idle, so every client gets a listener of its own when the pool creates it: a
  // checked-out client (mid-transaction) then fails its pending query, and release(err) discards it.
  const onConnectionError = options.onConnectionError ?? quietConnectionErrorLog();
  pool.on('connect', (client) => client.on('error', onConnectionError));
  // The pool re-emits an idle client's error; the client's own listener has already reported it.
  pool.on('error', () => undefined);
  return pool;
}

/**
 * A pool that hands a client to a waiting caller in that caller's async context. pg-pool runs the callback of a caller
 * that waited for a free client from inside another caller's release, so `pool.query`'s statement would run (and
 * be counted) as the releasing caller's — another activity's — instead of its own.
 */
class CallerContextPool extends Pool {
  override connect(...args: any[]): any {
    const [callback] = args;
    return typeof callback === 'function' ? super.connect(AsyncResource.bind(callback)) : super.connect();
  }
}

/** pg's Client, calling `onQuery` before each statement: pool.query and a checked-out client's queries both pass here. */
function countingClient(onQuery: () => void): typeof Client {
  return class CountingClient extends Client {
    // One signature for pg's overloads: every form is passed on unchanged.
    override query(...args: any[]): any {
      onQuery();
      return Client.prototype.query.apply(this, args as Parameters<Client['query']>);
    }
  };
}

const CONNECTION_ERROR_LOG_INTERVAL_MS = 10_000;

/** Reports the first lost connection of a burst, and how many more were lost since the last report. */
function quietConnectionErrorLog(): (err: Error) => void {
  let lastReport = 0;
  let unreported = 0;
  return (err) => {
    const now = Date.now();
    if (now - lastReport < CONNECTION_ERROR_LOG_INTERVAL_MS) {
      unreported += 1;
      return;
    }
    const more = unreported > 0 ? ` (and ${unreported} more since the last report)` : '';
    console.warn(`orchard: lost a PostgreSQL connection: ${err.message}${more}; it is discarded and its work retried`);
    lastReport = now;
    unreported = 0;
  };
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

/**
 * Whether `err` says the database could not be reached or the connection broke (refused, reset, terminated, the
 * server shutting down): a fault that passes, as opposed to a statement the database refused.
 */
function isConnectionFault(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | undefined;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'].includes(code)) return true;
  // SQLSTATE class 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now).
  if (/^08/.test(code) || ['57P01', '57P02', '57P03'].includes(code)) return true;
  return typeof e?.message === 'string' && /Connection terminated|connection timeout|Client has encountered a connection error/i.test(e.message);
}

/**
 * Runs a write until the database takes it, while the only reason it fails is a connection fault (backing off to
 * `maxDelayMs`; `onWait` runs between attempts, e.g. to heartbeat). For a fact that must not be lost with the
 * attempt that learned it — nobody else would write it later. Any other error is thrown at once, and the last fault
 * once `giveUp` says so (the worker is shutting down: it must not wait for the database for ever).
 */
export async function untilStored<T>(write: () => Promise<T>, options: { onWait?: () => void; maxDelayMs?: number; giveUp?: () => boolean } = {}): Promise<T> {
  let delay = 200;
  for (;;) {
    try {
      return await write();
    } catch (err) {
      if (!isConnectionFault(err) || options.giveUp?.()) throw err;
      options.onWait?.();
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, options.maxDelayMs ?? 5_000);
    }
  }
}
