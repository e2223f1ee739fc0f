import { randomUUID } from 'node:crypto';
import test from 'ava';
import { createPool } from '../../activities/store/db';
import { loadMigrations, migrate } from '../../activities/store/migrate';
import { startEmbeddedPostgres } from '../../worker/pglite';
import { testStackEnv } from '../helpers/orchard';

/**
 * Each test migrates an empty database of its own, whatever the shared one already holds: a schema of its own
 * on a real server; on embedded PGlite (one session behind every connection, so a search_path would leak into
 * every other test) a private in-memory PGlite.
 */
async function freshSchema(t: import('ava').ExecutionContext) {
  if (testStackEnv().embedded) {
    const pg = await startEmbeddedPostgres({ dataDir: 'memory', log: () => undefined });
    const pool = createPool(pg.url, { max: 2, embedded: true });
    t.teardown(async () => {
      await pool.end();
      await pg.stop();
    });
    return { pool, schema: 'public' };
  }
  const schema = `mig_${randomUUID().slice(0, 8)}`;
  const admin = createPool(testStackEnv().databaseUrl, { max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const pool = createPool(testStackEnv().databaseUrl, { max: 2, schema });
  t.teardown(async () => {
    await pool.end();
    await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    await admin.end();
  });
  return { pool, schema };
}

test('applying the migrations twice is a no-op the second time', async (t) => {
  const { pool, schema } = await freshSchema(t);
  const all = loadMigrations().map((m) => m.name);
  t.true(all.length >= 1);
  const first = await migrate(pool);
  t.deepEqual(first, { applied: all, alreadyApplied: [] });
  const tables = async () =>
    (await pool.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, [schema])).rows.map((r) => r.table_name);
  const before = await tables();
  t.true(before.includes('transcript_entries') && before.includes('tool_dispatches'));
  const second = await migrate(pool);
  t.deepEqual(second, { applied: [], alreadyApplied: all });
  t.deepEqual(await tables(), before);
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM orchard_migrations');
  t.is(rows[0].n, all.length);
});

test('two workers migrating at once apply each migration exactly once', async (t) => {
  const { pool } = await freshSchema(t);
  const [a, b] = await Promise.all([migrate(pool), migrate(pool)]);
  t.is(a.applied.length + b.applied.length, loadMigrations().length);
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM orchard_migrations');
  t.is(rows[0].n, loadMigrations().length);
});

test('a migration edited after it was applied is refused, not skipped', async (t) => {
  const { pool } = await freshSchema(t);
  await migrate(pool);
  const edited = loadMigrations().map((m, i) => (i === 0 ? { ...m, checksum: 'changed' } : m));
  await t.throwsAsync(migrate(pool, edited), { message: /changed after it was applied/ });
});

test("013: certificates the per-revision code of 2026-12-03 left beside a generation's first are kept, marked, and left out of the uniqueness", async (t) => {
  const { pool } = await freshSchema(t);
  await migrate(
    pool,
    loadMigrations().filter((m) => m.version < 13),
  );
  await pool.query(`INSERT INTO team_runs (team_id, repo, goal) VALUES ('old', '/srv/repo', 'g')`);
  for (const [generation, revision] of [
    [1, 4],
    [1, 9],
    [2, 12],
  ]) {
    await pool.query(`INSERT INTO team_certificates (team_id, generation, work_revision, certificate) VALUES ('old', $1, $2, $3)`, [
      generation,
      revision,
      JSON.stringify({ certificateId: `cert-g${generation}-r${revision}` }),
    ]);
  }
  const { applied } = await migrate(pool);
  t.true(applied.some((name) => name.startsWith('013_')));
  const rows = (await pool.query(`SELECT generation, work_revision, legacy_extra FROM team_certificates ORDER BY generation, work_revision`)).rows;
  t.deepEqual(
    rows.map((r) => [r.generation, Number(r.work_revision), r.legacy_extra]),
    [
      [1, 4, false],
      [1, 9, true],
      [2, 12, false],
    ],
  );
  // From now on, one per generation.
  const err = await t.throwsAsync(pool.query(`INSERT INTO team_certificates (team_id, generation, work_revision, certificate) VALUES ('old', 2, 13, '{}')`));
  t.is((err as { code?: string }).code, '23505');
});
