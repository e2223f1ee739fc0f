import { resolveConfinement, type Confinement } from '../../activities/bash/confinement';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import type { Pool } from 'pg';
import type { HostActivityHooks } from '../../activities';
import type { TeamActivityHooks } from '../../activities/team';
import type { ModelProvider } from '../../activities/model/types';
import { createPool } from '../../activities/store/db';
import { migrate } from '../../activities/store/migrate';
import { bundleWorkflows, createOrchardWorkers, type OrchardWorkers } from '../../worker/worker';
import { OrchardClient } from '../../client/client';
import { gitIn } from './git';

/** What the `npm test` launcher provides: one dev server and one database for the whole run. */
export function testStackEnv() {
  const temporalAddress = process.env.TEMPORAL_ADDRESS;
  const databaseUrl = process.env.DATABASE_URL;
  if (!temporalAddress || !databaseUrl) {
    throw new Error('TEMPORAL_ADDRESS and DATABASE_URL are unset: run the suite with `npm test`, which boots them');
  }
  return {
    temporalAddress,
    databaseUrl,
    /** The launcher started PGlite (see createPool's `embedded`). */
    embedded: process.env.ORCHARD_TEST_EMBEDDED_PG === '1',
    namespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
    workflowBundle: process.env.ORCHARD_WORKFLOW_BUNDLE ? { codePath: process.env.ORCHARD_WORKFLOW_BUNDLE } : undefined,
  };
}

let migrated: Promise<unknown> | undefined;
let probed: Promise<Confinement> | undefined;
const failureBundles = new Map<string, ReturnType<typeof bundleWorkflows>>();

/**
 * The run's prebuilt bundle has the SDK's default failure converter: a data converter with a failure converter of its
 * own (payload encryption) gets a bundle built with it, once per test file.
 */
async function workflowBundleFor(dataConverter: DataConverter | undefined, prebuilt: { codePath: string } | undefined) {
  const path = dataConverter?.failureConverterPath;
  if (!path) return prebuilt;
  let bundle = failureBundles.get(path);
  if (!bundle) failureBundles.set(path, (bundle = bundleWorkflows(dataConverter)));
  return bundle;
}

/**
 * This machine's confinement, probed once per test file. Where `.ci/run` could not install bubblewrap it says why in
 * ORCHARD_TEST_NO_SANDBOX, and isolated children run with the guard alone (the sandbox's own tests are skipped there).
 */
export function testConfinement(): Promise<Confinement> {
  const noSandbox = process.env.ORCHARD_TEST_NO_SANDBOX;
  if (noSandbox) return Promise.resolve({ mode: 'off', reason: `ORCHARD_TEST_NO_SANDBOX: ${noSandbox}` });
  probed ??= resolveConfinement({});
  return probed;
}

// Worker lifecycle chatter drowns test output; warnings and errors still show. No shutdown signals: the SDK's
// default handler turns ava's SIGTERM (its timeout, or an interrupt) into a graceful worker shutdown that waits for
// running activities, so a test file stuck on one never exited and held the whole run until CI's own limit.
Runtime.install({ logger: new DefaultLogger('WARN'), shutdownSignals: [] });

type Teardown = { teardown(fn: () => unknown): void };

export async function testPool(t: Teardown): Promise<Pool> {
  const pool = createPool(testStackEnv().databaseUrl, { max: 4, embedded: testStackEnv().embedded });
  t.teardown(() => pool.end());
  migrated ??= migrate(pool);
  await migrated;
  return pool;
}

/** How long after the grace period a test's workers stop waiting for their activities (ORCHARD_TEST_SHUTDOWN_FORCE_MS). */
const SHUTDOWN_FORCE_AFTER_GRACE_MS = Number(process.env.ORCHARD_TEST_SHUTDOWN_FORCE_MS ?? 60_000);

export interface TestOrchard {
  client: OrchardClient;
  temporal: Client;
  /** The test's own pool, on the direct database URL. */
  pool: Pool;
  /** The workers' pool: `pool` itself, unless `startOrchard` was given a `databaseUrl`. */
  workerPool: Pool;
  taskQueue: string;
  connection: NativeConnection;
  /** Starts (another) worker pair for a host; the first is started by `startOrchard`. */
  startHost(hostId: string, options?: { hostOnly?: boolean; defaultProvider?: ModelProvider; shutdownGraceMs?: number }): Promise<OrchardWorkers>;
  /**
   * Stops every worker (waiting until each has shut down: no cached workflow state survives) and starts the first host's
   * again. `whileStopping` runs once they have been told to stop (they take no new task; activities under way may still
   * finish) and before they are waited for.
   */
  restartWorkers(whileStopping?: () => Promise<void>): Promise<void>;
  hostId: string;
}

/**
 * A real worker pair (shared queue + host queue) on a task queue of its own, against the run's dev server
 * and database. Everything stops when the test ends.
 */
export async function startOrchard(
  t: Teardown,
  options: {
    defaultProvider?: ModelProvider;
    maxOutputBytes?: number;
    hostHooks?: HostActivityHooks;
    teamHooks?: TeamActivityHooks;
    env?: NodeJS.ProcessEnv;
    /** How the hosts confine isolated children; by default this machine's sandbox, probed once per test file. */
    confinement?: Confinement;
    /**
     * The workers' database, when it must differ from the test's (a proxy in front of it, or a URL with an
     * `application_name` to find the workers' connections by): the same database, already migrated on the direct
     * URL by `testPool`. The workers get a pool of their own on it; the test keeps `pool` on the direct URL.
     */
    databaseUrl?: string;
    /** Another Temporal server's `host:port` (a test that restarts its own server); the run's server by default. */
    temporalAddress?: string;
    /** The client's and the workers' data converter (payload encryption); the SDK's default when unset. */
    dataConverter?: DataConverter;
    /** How often the workers' sessions' model calls heartbeat (the production default when unset). */
    sessionModelHeartbeatMs?: number;
  } = {},
): Promise<TestOrchard> {
  const env = { ...testStackEnv(), ...(options.temporalAddress ? { temporalAddress: options.temporalAddress, namespace: 'default' } : {}) };
  const suffix = randomUUID().slice(0, 8);
  const taskQueue = `test-${suffix}`;
  const hostId = `host-${suffix}`;
  const pool = await testPool(t);
  let workerPool = pool;
  if (options.databaseUrl) {
    const own = createPool(options.databaseUrl, { max: 4, embedded: env.embedded });
    // Registered before the workers' teardown, so it runs after they have stopped (teardowns run last first).
    t.teardown(() => own.end());
    workerPool = own;
  }
  const connection = await NativeConnection.connect({ address: env.temporalAddress });
  const clientConnection = await Connection.connect({ address: env.temporalAddress });
  const temporal = new Client({ connection: clientConnection, namespace: env.namespace, dataConverter: options.dataConverter });
  const worktreeRoot = mkdtempSync(join(tmpdir(), 'orchard-wt-'));
  const running: { workers: OrchardWorkers; done: Promise<void> }[] = [];
  const extraConnections: NativeConnection[] = [];

  const startHost: TestOrchard['startHost'] = async (id, hostOptions = {}) => {
    // Another host is another process in production: it gets a connection of its own (the core SDK refuses
    // two workers on one queue over one connection).
    let hostConnection = connection;
    if (running.length > 0) {
      hostConnection = await NativeConnection.connect({ address: env.temporalAddress });
      extraConnections.push(hostConnection);
    }
    const workers = await createOrchardWorkers({
      connection: hostConnection,
      namespace: env.namespace,
      taskQueue,
      hostId: id,
      worktreeRoot: join(worktreeRoot, id),
      pool: workerPool,
      client: temporal,
      defaultProvider: hostOptions.defaultProvider ?? options.defaultProvider,
      workflowBundle: await workflowBundleFor(options.dataConverter, env.workflowBundle),
      hostOnly: hostOptions.hostOnly,
      maxOutputBytes: options.maxOutputBytes,
      hostHooks: options.hostHooks,
      teamHooks: options.teamHooks,
      env: options.env,
      confinement: options.confinement ?? (await testConfinement()),
      dataConverter: options.dataConverter,
      sessionModelHeartbeatMs: options.sessionModelHeartbeatMs,
      // Teardown must not wait out the production grace period for a test's running command.
      shutdownGraceMs: hostOptions.shutdownGraceMs ?? 10_000,
      // A teardown that waits on an activity ignoring its cancellation fails the test instead of stalling the run.
      shutdownForceMs: (hostOptions.shutdownGraceMs ?? 10_000) + SHUTDOWN_FORCE_AFTER_GRACE_MS,
    });
    running.push({ workers, done: workers.run() });
    return workers;
  };
  await startHost(hostId);

  t.teardown(async () => {
    for (const r of running) r.workers.shutdown();
    await Promise.allSettled(running.map((r) => r.done));
    for (const c of [...extraConnections, connection]) await c.close();
    await clientConnection.close();
  });
  const restartWorkers = async (whileStopping?: () => Promise<void>) => {
    const stopping = running.splice(0);
    for (const r of stopping) r.workers.shutdown();
    try {
      await whileStopping?.();
    } finally {
      await Promise.all(stopping.map((r) => r.done));
    }
    await startHost(hostId);
  };
  return {
    client: new OrchardClient(temporal, { taskQueue, defaultHost: hostId }),
    temporal,
    pool,
    workerPool,
    taskQueue,
    connection,
    startHost,
    restartWorkers,
    hostId,
  };
}

/** A real git repository with one commit on `main`. */
export function makeRepo(files: Record<string, string> = { 'README.md': '# fixture\n' }): string {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-repo-'));
  git(dir, 'init', '-q', '-b', 'main');
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'initial');
  return dir;
}

/** Git in a fixture repository, with the tests' fixed identity and no machine config. */
export const git = gitIn;

/** Writes a scripted-provider scenario (scenarios/FORMAT.md) to a temp file and returns its path. */
export function writeScenario(scenario: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-scenario-'));
  const path = join(dir, 'scenario.json');
  writeFileSync(path, JSON.stringify(scenario, null, 2));
  return path;
}

export function uniqueId(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/**
 * One worker pair shared by every test of a file (workers are the slow part to start): tests use distinct
 * session ids, so they do not see each other. Call at the top level of a test file.
 */
export function sharedOrchard(test: import('ava').TestFn, options: Parameters<typeof startOrchard>[1] = {}): () => TestOrchard {
  const teardowns: (() => unknown)[] = [];
  let orchard: TestOrchard | undefined;
  test.before(async () => {
    orchard = await startOrchard({ teardown: (fn) => teardowns.push(fn) }, options);
  });
  test.after.always(async () => {
    for (const fn of teardowns.reverse()) await fn();
  });
  return () => {
    if (!orchard) throw new Error('sharedOrchard: the before hook has not run');
    return orchard;
  };
}

/**
 * Keeps a workflow's history for the replay tests (test/replay/histories/<name>.json) when
 * ORCHARD_KEEP_HISTORIES=1: re-record after a deliberate change of workflow code, then commit the files.
 */
export async function keepHistory(orchard: TestOrchard, workflowId: string, name: string): Promise<void> {
  if (process.env.ORCHARD_KEEP_HISTORIES !== '1') return;
  const history = await orchard.temporal.workflow.getHandle(workflowId).fetchHistory();
  writeFileSync(join(__dirname, '..', 'replay', 'histories', `${name}.json`), historyToJSON(history));
}
