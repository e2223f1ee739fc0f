import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DefaultLogger, bundleWorkflowCode } from '@temporalio/worker';
import { createPool } from '../activities/store/db';
import { bootStack, type Stack } from '../worker/stack';
import { buildCli, describeBuild } from '../scripts/build';

/**
 * `npm test`: the CLI compiled (tests spawn bin/orchard, which runs dist/: never a stale one), one Temporal dev
 * server (unless TEMPORAL_ADDRESS) and one database (unless DATABASE_URL) for the whole run, the workflows bundled
 * once, then ava with any arguments passed through (`npm test -- test/unit`).
 */
const projectRoot = path.resolve(__dirname, '..');
/**
 * The whole ava run gets this long (ORCHARD_TEST_DEADLINE_MINUTES, default 80; CI allows 90 for everything)
 * before it is interrupted with SIGINT, which makes ava print the tests still pending, then killed. ava's own
 * timeout only fires while no test reports, and a test file that ignores its SIGTERM can still hang the run; this
 * turns a hang into a failed run that says where it hung, inside CI's limit.
 */
const deadlineMinutes = Number(process.env.ORCHARD_TEST_DEADLINE_MINUTES ?? 80);
const log = (line: string) => console.log(`[test] ${line}`);

/**
 * With DATABASE_URL (a PostgreSQL server), the run gets a database of its own on that server, created here and
 * dropped at the end: a run never reads rows an earlier run (or a concurrent one) left, however long the server has
 * been up. A run that was killed leaves its database; the next run drops those older than a few hours (the name
 * carries its creation time). ORCHARD_TEST_SAME_DATABASE=1 uses DATABASE_URL's own database instead.
 */
const RUN_DATABASE_PREFIX = 'orchard_test_run_';
const STALE_RUN_DATABASE_MS = 6 * 3600_000;

async function runDatabase(serverUrl: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `${RUN_DATABASE_PREFIX}${Date.now()}_${process.pid}`;
  const admin = createPool(serverUrl, { max: 1 });
  try {
    const { rows } = await admin.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE $1`, [`${RUN_DATABASE_PREFIX}%`]);
    for (const { datname } of rows) {
      const created = Number(datname.slice(RUN_DATABASE_PREFIX.length).split('_')[0]);
      if (Number.isFinite(created) && Date.now() - created > STALE_RUN_DATABASE_MS) {
        await admin.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`).catch(() => undefined);
      }
    }
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const dropper = createPool(serverUrl, { max: 1 });
      try {
        await dropper.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await dropper.end();
      }
    },
  };
}

async function main(): Promise<number> {
  const started = Date.now();
  let stack: Stack | undefined;
  let database: Awaited<ReturnType<typeof runDatabase>> | undefined;
  let ava: ReturnType<typeof spawn> | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    interrupted = true;
    log(`${signal}: stopping`);
    // ava runs in its own process group (see below), so the terminal's SIGINT reaches only us: forward it.
    ava?.kill(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    log(describeBuild(await buildCli(projectRoot), projectRoot));
    if (interrupted) return 130;

    if (process.env.DATABASE_URL && process.env.ORCHARD_TEST_SAME_DATABASE !== '1') {
      database = await runDatabase(process.env.DATABASE_URL);
      process.env.DATABASE_URL = database.url;
      log(`a database of this run's own: ${new URL(database.url).pathname.slice(1)}`);
    }
    log('booting the stack…');
    stack = await bootStack({
      projectRoot,
      log: (line) => log(`  ${line}`),
      // A throwaway server per run: free ports so runs can overlap, headless and in memory since nobody looks.
      temporal: { port: 0, ui: false, dbFile: null },
      postgres: { dataDir: 'memory' },
    });
    if (interrupted) return 130;

    log('bundling workflows…');
    const bundleStarted = Date.now();
    const { code } = await bundleWorkflowCode({
      workflowsPath: require.resolve('../workflows'),
      // webpack's module stats at INFO bury the test output; warnings still show.
      logger: new DefaultLogger('WARN'),
    });
    const bundlePath = path.join(projectRoot, '.orchard', 'test', 'workflow-bundle.js');
    fs.mkdirSync(path.dirname(bundlePath), { recursive: true });
    fs.writeFileSync(bundlePath, code);
    const size = `${Math.round(code.length / 1024)} KiB`;
    log(`bundled workflows into ${path.relative(projectRoot, bundlePath)} (${size}, ${Date.now() - bundleStarted} ms)`);
    if (interrupted) return 130;

    const args = process.argv.slice(2);
    log(`running ava ${args.join(' ')}`.trimEnd());
    // ava's own entry point, not npx: the deadline's signals must reach ava itself, and its own process group
    // (detached) lets a final kill take its test workers with it.
    ava = spawn(process.execPath, [path.join(projectRoot, 'node_modules', 'ava', 'entrypoints', 'cli.mjs'), ...args], {
      cwd: projectRoot,
      stdio: 'inherit',
      detached: true,
      env: {
        ...process.env,
        TEMPORAL_ADDRESS: stack.temporalAddress,
        TEMPORAL_NAMESPACE: stack.namespace,
        DATABASE_URL: stack.databaseUrl,
        // PGlite is one database session behind every socket connection: tests that need a database of their
        // own must start one instead of changing session settings that every other connection would share.
        ORCHARD_TEST_EMBEDDED_PG: stack.embedded.postgres ? '1' : '',
        ORCHARD_WORKFLOW_BUNDLE: bundlePath,
      },
    });
    const child = ava;
    let overdue: NodeJS.Timeout | undefined;
    const deadline = setTimeout(() => {
      log(`the run passed its deadline of ${deadlineMinutes} min (ORCHARD_TEST_DEADLINE_MINUTES): interrupting ava`);
      child.kill('SIGINT');
      overdue = setTimeout(() => {
        log('ava did not stop within 30 s of the interrupt: killing it and its test workers');
        try {
          if (child.pid) process.kill(-child.pid, 'SIGKILL');
        } catch {
          child.kill('SIGKILL');
        }
      }, 30_000);
    }, deadlineMinutes * 60_000);
    const exitCode = await new Promise<number>((resolve) => {
      child.on('error', (err) => {
        log(`could not start ava: ${err.message}`);
        resolve(1);
      });
      child.on('exit', (code, signal) => resolve(code ?? 128 + (signal ? os.constants.signals[signal] : 0)));
    });
    clearTimeout(deadline);
    clearTimeout(overdue);
    log(`ava exited with code ${exitCode}`);
    return exitCode;
  } catch (err) {
    log(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    return 1;
  } finally {
    if (stack) {
      log('stopping the stack…');
      await stack.stop().catch((err: unknown) => log(`stopping the stack failed: ${String(err)}`));
    }
    if (database) await database.drop().catch((err: unknown) => log(`dropping the run's database failed: ${String(err)}`));
    log(`done in ${Math.round((Date.now() - started) / 1000)}s`);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
