import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { accessSync, chmodSync, constants, mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import test from 'ava';
import { createPool, withTransaction } from '../../activities/store/db';
import { acquireLease, releaseLease } from '../../activities/store/leases';
import { loadMigrations, migrate } from '../../activities/store/migrate';
import { freePort } from '../../worker/dev-server';
import { testStackEnv } from '../helpers/orchard';

/** Debian installs pgbouncer in /usr/sbin, which is not on every user's PATH. */
function findPgbouncer(): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/usr/bin'];
  for (const dir of dirs) {
    const candidate = join(dir, 'pgbouncer');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

const pgbouncer = findPgbouncer();
const embedded = testStackEnv().embedded;
const skipReason = !pgbouncer
  ? 'pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run installs it where apt is available)'
  : embedded
    ? 'the run uses embedded PGlite, not a PostgreSQL server PgBouncer could front (set DATABASE_URL)'
    : undefined;

const title = 'through PgBouncer in transaction mode: migrations, a lease acquire and release, bounds per transaction';
if (skipReason) {
  // ava has no runtime skip: the reason is in the skipped test's title, and printed.
  console.log(`pgbouncer test skipped: ${skipReason}`);
  test.skip(`${title} — skipped: ${skipReason}`, () => undefined);
} else {
  test(title, async (t) => {
    const direct = new URL(testStackEnv().databaseUrl);
    const user = decodeURIComponent(direct.username || 'postgres');
    // A database of its own, so every migration really runs through PgBouncer.
    const database = `orchard_bouncer_${randomUUID().slice(0, 8)}`;
    const admin = createPool(direct.toString(), { max: 1 });
    await admin.query(`CREATE DATABASE ${database}`);
    t.teardown(async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined);
      await admin.end();
    });

    const port = await freePort('127.0.0.1');
    const bouncer = await startPgbouncer(t, {
      binary: pgbouncer!,
      port,
      database,
      serverHost: direct.hostname,
      serverPort: Number(direct.port || 5432),
      user,
    });
    t.log(`pgbouncer ${bouncer.version} on 127.0.0.1:${port}, pool_mode=transaction, in front of ${direct.host}`);

    const pool = createPool(`postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${database}`, { max: 4, statementTimeoutMs: 1500 });
    t.teardown(() => pool.end());

    const report = await migrate(pool);
    t.deepEqual(
      report.applied,
      loadMigrations().map((m) => m.name),
    );

    const probe = { holderLiveness: async () => 'closed' as const, aliveProcesses: async () => [] };
    const request = { worktree: `/wt/${database}`, host: 'h1', holder: 'default/session/s1@r1' };
    const acquired = await acquireLease(pool, request, probe);
    if (acquired.kind !== 'created') return t.fail(`expected a new lease, got ${acquired.kind}`);
    t.true(await releaseLease(pool, acquired.lease));
    const next = await acquireLease(pool, { ...request, holder: 'default/session/s2@r2' }, probe);
    t.like(next, { kind: 'taken_over', previous: request.holder, lease: { generation: 2 } });

    // Bounds live inside transactions (SET LOCAL), never in the session PgBouncer hands to the next client.
    const inside = await withTransaction(pool, async (c) => ({
      statement: (await c.query('SHOW statement_timeout')).rows[0].statement_timeout,
      lock: (await c.query('SHOW lock_timeout')).rows[0].lock_timeout,
    }));
    t.deepEqual(inside, { statement: '1500ms', lock: '10s' });
    t.is((await pool.query('SHOW statement_timeout')).rows[0].statement_timeout, '0');
    // A single statement is bounded on the client side.
    await t.throwsAsync(() => pool.query('SELECT pg_sleep(5)'), { message: /timeout/i });
    await t.throwsAsync(() => withTransaction(pool, (c) => c.query('SELECT pg_sleep(5)')), { message: /timeout/i });
    t.is((await pool.query('SELECT 1 AS ok')).rows[0].ok, 1, 'the pool still works after the timeouts');
  });
}

interface BouncerOptions {
  binary: string;
  port: number;
  database: string;
  serverHost: string;
  serverPort: number;
  user: string;
}

/** A real pgbouncer in the foreground on `port`, stopped when the test ends. */
async function startPgbouncer(t: import('ava').ExecutionContext, o: BouncerOptions): Promise<{ version: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-pgbouncer-'));
  const ini = join(dir, 'pgbouncer.ini');
  writeFileSync(join(dir, 'userlist.txt'), `"${o.user}" ""\n`);
  writeFileSync(
    ini,
    [
      '[databases]',
      `${o.database} = host=${o.serverHost} port=${o.serverPort} dbname=${o.database} user=${o.user}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${o.port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      'default_pool_size = 4',
      'max_client_conn = 50',
      '',
    ].join('\n'),
  );
  // pgbouncer will not run as root: it switches to `nobody`, which must be able to read its files.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    chmodSync(dir, 0o755);
    for (const f of ['pgbouncer.ini', 'userlist.txt']) chmodSync(join(dir, f), 0o644);
  }
  const child = spawn(o.binary, [...(asRoot ? ['-u', 'nobody'] : []), ini], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  t.teardown(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  const deadline = Date.now() + 15_000;
  while (!(await accepts(o.port))) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`pgbouncer did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const version = /PgBouncer (\d[\w.]*)/.exec(output)?.[1] ?? 'unknown version';
  return { version };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}
