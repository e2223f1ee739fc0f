import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Pool } from 'pg';
import { withTransaction } from './db';

const MIGRATIONS_DIR = join(__dirname, 'migrations');

export interface Migration {
  version: number;
  name: string;
  sql: string;
  checksum: string;
}

/** Files named `NNN_name.sql`, applied in version order. */
export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((file) => /^\d+_[\w-]+\.sql$/.test(file))
    .map((file) => {
      const sql = readFileSync(join(dir, file), 'utf8');
      return {
        version: Number(file.split('_')[0]),
        name: file.replace(/\.sql$/, ''),
        sql,
        checksum: createHash('sha256').update(sql).digest('hex'),
      };
    })
    .sort((a, b) => a.version - b.version);
}

const LOCK = `SELECT pg_advisory_xact_lock(hashtext('orchard_migrations'))`;

export interface MigrationReport {
  applied: string[];
  alreadyApplied: string[];
}

/**
 * Applies every migration not yet recorded, each in its own transaction. Workers on several hosts may
 * start at once: a transaction-scoped advisory lock (released at commit, so it cannot leak through the
 * pool) makes them take turns. A recorded migration whose file changed is an error, not a silent skip.
 */
export async function migrate(pool: Pool, migrations = loadMigrations()): Promise<MigrationReport> {
  // CREATE TABLE IF NOT EXISTS is not safe against itself under concurrency: it takes the lock too.
  await withTransaction(pool, async (client) => {
    await client.query(LOCK);
    await client.query(`CREATE TABLE IF NOT EXISTS orchard_migrations (
      version    integer PRIMARY KEY,
      name       text NOT NULL,
      checksum   text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
  });
  const report: MigrationReport = { applied: [], alreadyApplied: [] };
  for (const migration of migrations) {
    await withTransaction(pool, async (client) => {
      await client.query(LOCK);
      const { rows } = await client.query<{ checksum: string }>('SELECT checksum FROM orchard_migrations WHERE version = $1', [migration.version]);
      if (rows.length > 0) {
        if (rows[0].checksum !== migration.checksum) {
          throw new Error(`migration ${migration.name} was changed after it was applied; add a new migration instead of editing it`);
        }
        report.alreadyApplied.push(migration.name);
        return;
      }
      await client.query(migration.sql);
      await client.query('INSERT INTO orchard_migrations (version, name, checksum) VALUES ($1, $2, $3)', [
        migration.version,
        migration.name,
        migration.checksum,
      ]);
      report.applied.push(migration.name);
    });
  }
  return report;
}
