import fs from 'node:fs';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import { temporalCacheDir } from './temporal-cli';
import { isProcessAlive } from './pid';

type Log = (line: string) => void;

export interface EmbeddedPostgresOptions {
  /** A directory for the data files, or 'memory' for a database that ends with the process. */
  readonly dataDir: string | 'memory';
  /** TCP port on 127.0.0.1; 0 (the default) lets the kernel pick a free one. */
  readonly port?: number;
  readonly log: Log;
  /** Socket connections served at once; must cover every `pg` Pool's `max` in the process (default 10 each). */
  readonly maxConnections?: number;
}

export interface EmbeddedPostgres {
  /** A `postgres://` URL for `pg` (no TLS: the socket server does not speak it). */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * PGlite (single-user Postgres in WASM) served over a local socket, so the same `pg` code runs as against a real
 * server. Limits, all from there being one backend session behind every connection:
 * - one statement at a time, and while a connection is inside BEGIN…COMMIT (or between Parse and Sync) only that
 *   connection is served: transactions are serialised, never concurrent, and a connection idling inside a
 *   transaction stalls all the others;
 * - session state is shared: a `SET` on one connection is seen by all, and startup options (`pg`'s `options:
 *   '-c statement_timeout=…'`, `search_path`) are ignored; use `SET LOCAL` inside transactions;
 * - `statement_timeout` is not enforced, and setting `idle_in_transaction_session_timeout` (with SET) freezes the
 *   whole process at the next statement after an idle spell inside a transaction (PGlite 0.5.14): never set it here;
 * - no TLS, no auth, no LISTEN/NOTIFY between connections, no COPY.
 */
export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const inMemory = opts.dataDir === 'memory';
  let releaseLock: (() => void) | undefined;
  if (!inMemory) {
    fs.mkdirSync(opts.dataDir, { recursive: true });
    // Two PGlite instances on one data directory corrupt it; nothing in PGlite prevents that, so we do.
    releaseLock = lockDataDir(opts.dataDir);
  }

  let db: PGlite | undefined;
  let server: PGLiteSocketServer | undefined;
  try {
    db = inMemory ? await createInMemory(opts.log) : await PGlite.create(opts.dataDir);
    holdBackendUntilSync(db);
    server = new PGLiteSocketServer({
      db,
      host: '127.0.0.1',
      port: opts.port ?? 0,
      maxConnections: opts.maxConnections ?? 100,
    });
    await server.start();
  } catch (err) {
    await db?.close().catch(() => undefined);
    releaseLock?.();
    throw err;
  }

  const port = Number(server.getServerConn().split(':').pop());
  const url = `postgres://postgres@127.0.0.1:${port}/postgres?sslmode=disable`;
  const where = inMemory ? 'in memory' : `in ${opts.dataDir}`;
  opts.log(`embedded PostgreSQL (PGlite ${where}) listening on 127.0.0.1:${port}`);

  const runningDb = db;
  const runningServer = server;
  let stopping: Promise<void> | undefined;
  return {
    url,
    stop: () =>
      (stopping ??= (async () => {
        await runningServer.stop();
        // stop() detaches connections without awaiting the ROLLBACK of an open transaction; let it run first.
        await new Promise((resolve) => setTimeout(resolve, 50));
        await runningDb.close().catch((err: unknown) => opts.log(`closing PGlite: ${String(err)}`));
        releaseLock?.();
      })()),
  };
}

/**
 * An in-memory PGlite starts from a cached copy of a freshly initialised data directory: loading it takes about a
 * third of the time initdb does, which every test run and test file that boots one pays. The cache is keyed by the
 * PGlite version; one that fails to load is discarded and rebuilt.
 */
async function createInMemory(log: Log): Promise<PGlite> {
  const template = path.join(temporalCacheDir(), `pglite-${pgliteVersion()}-initdb.tar.gz`);
  if (fs.existsSync(template)) {
    try {
      return await PGlite.create({ loadDataDir: new Blob([fs.readFileSync(template)]) });
    } catch (err) {
      log(`discarding the PGlite template ${template}: ${String(err)}`);
      fs.rmSync(template, { force: true });
    }
  }
  const db = await PGlite.create();
  try {
    const dump = Buffer.from(await (await db.dumpDataDir('gzip')).arrayBuffer());
    fs.mkdirSync(path.dirname(template), { recursive: true });
    // Write then rename: concurrent test processes may race to create it.
    const tmp = `${template}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, dump);
    fs.renameSync(tmp, template);
  } catch (err) {
    log(`could not cache a PGlite template (${String(err)}); later starts run initdb again`);
  }
  return db;
}

function pgliteVersion(): string {
  // The package's exports hide its package.json from require(); read it beside the entry point.
  const entry = require.resolve('@electric-sql/pglite');
  const manifest = path.join(path.dirname(entry), '..', 'package.json');
  return (JSON.parse(fs.readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/** Extended-query messages after which the client still owes a Sync: Parse, Bind, Describe, Execute, Close, Flush. */
const MID_SEQUENCE = new Set(['P', 'B', 'D', 'E', 'C', 'H'].map((c) => c.charCodeAt(0)));

/**
 * pglite-socket 0.2.17 keeps the backend for one connection only while `db.isInTransaction()`, i.e. inside BEGIN…
 * COMMIT. Between Parse and Sync of an ordinary `pg` query, another connection's Parse could replace the unnamed
 * statement, so the first connection's Bind would run the other's SQL with its own parameters. Reporting "in a
 * transaction" until the connection that sent the last message sends Sync (or a simple Query) keeps the backend
 * with it. Relies on the socket server calling these two methods (checked by test/workflows/embedded-postgres.test.ts).
 */
function holdBackendUntilSync(db: PGlite): void {
  let midSequence = false;
  const execProtocolRawStream = db.execProtocolRawStream.bind(db);
  const isInTransaction = db.isInTransaction.bind(db);
  db.execProtocolRawStream = async (message, options) => {
    try {
      return await execProtocolRawStream(message, options);
    } finally {
      midSequence = MID_SEQUENCE.has(message[0]);
    }
  };
  db.isInTransaction = () => midSequence || isInTransaction();
}

/** Another live process holds the data directory (PGlite is single-process). */
class DataDirInUseError extends Error {
  readonly code = 'dev_already_running';
}

function lockDataDir(dataDir: string): () => void {
  const lockPath = `${path.resolve(dataDir)}.lock`;
  for (;;) {
    try {
      fs.writeFileSync(lockPath, `${process.pid}\n`, { flag: 'wx' });
      return () => fs.rmSync(lockPath, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const pid = Number.parseInt(fs.readFileSync(lockPath, 'utf8'), 10);
    if (Number.isInteger(pid) && pid > 0 && isProcessAlive(pid)) {
      throw new DataDirInUseError(
        `PGlite data directory ${dataDir} is in use by pid ${pid} (another orchard dev?); ` + 'stop it, or share one database with DATABASE_URL',
      );
    }
    // Left by a process that died: take it over.
    fs.rmSync(lockPath, { force: true });
  }
}
