import { NativeConnection, type NativeConnectionOptions } from '@temporalio/worker';
import { Client, Connection } from '@temporalio/client';
import { resolve } from 'node:path';
import type { Pool } from 'pg';
import { OpenAICompatibleProvider, openAIConfigFromEnv } from '../activities/model/openai';
import { loadScenario } from '../activities/model/scenario';
import { ScriptedProvider } from '../activities/model/scripted';
import type { ModelProvider } from '../activities/model/types';
import { createPool } from '../activities/store/db';
import { metrics } from '../activities/metrics';
import { migrate } from '../activities/store/migrate';
import { OrchardClient, OrchardError } from '../client/client';
import { PROJECT_ROOT, workerConfigFromEnv, type WorkerConfig } from './config';
import { createLogger, installSdkLogger } from './logging';
import { bootStack, stackTarget, type Stack } from './stack';
import { clientConnectionOptions, dataConverterFromEnv, type TemporalTarget } from '../client/connection';
import { PayloadKeyError } from '../client/codec';
import { assertSearchAttributes } from './search-attributes';
import { registerHost, type HostRegistration } from './host-identity';
import { createOrchardWorkers, type OrchardWorkers } from './worker';
import { startMetricsServer, type MetricsServer } from './metrics-server';
import { createServer } from 'node:net';

export { PROJECT_ROOT } from './config';

/**
 * Which model the worker's `{ provider: 'default' }` sessions get.
 * - `demo` (`orchard dev`, `npm start`): the configured endpoint, else the scripted demo (ORCHARD_SCENARIO).
 * - `configured` (`orchard worker`): the configured endpoint, or a refusal — a production worker never falls
 *   back to a demo silently.
 * - `scripted`: the scripted provider on this scenario, chosen on purpose (`--scripted`).
 * - `none`: a host-only worker, which runs no model calls.
 */
export type ModelChoice =
  { readonly kind: 'demo' } | { readonly kind: 'configured' } | { readonly kind: 'scripted'; readonly scenario: string } | { readonly kind: 'none' };

export async function modelProviderFor(choice: ModelChoice, env = process.env): Promise<ModelProvider | undefined> {
  if (choice.kind === 'none') return undefined;
  if (choice.kind === 'scripted') return new ScriptedProvider(await loadScenario(resolve(choice.scenario)));
  let openai: ReturnType<typeof openAIConfigFromEnv>;
  try {
    openai = openAIConfigFromEnv(env);
  } catch (err) {
    throw new OrchardError('invalid_input', err instanceof Error ? err.message : String(err));
  }
  if (openai) return new OpenAICompatibleProvider(openai);
  if (choice.kind === 'configured') {
    throw new OrchardError(
      'model_not_configured',
      'this worker has no model: set ORCHARD_MODEL_URL (an OpenAI-compatible API root) and ORCHARD_MODEL ' +
        '(plus ORCHARD_MODEL_API_KEY if the endpoint needs one), or pass --scripted <scenario.json> to run the ' +
        'scripted provider on purpose',
    );
  }
  const scenario = resolve(env.ORCHARD_SCENARIO ?? resolve(PROJECT_ROOT, 'scenarios/demo.json'));
  return new ScriptedProvider(await loadScenario(scenario));
}

export interface RunningOrchard {
  stack: Stack;
  /** The Temporal the workers poll (address, namespace, TLS, API key). */
  target: TemporalTarget;
  config: WorkerConfig;
  pool: Pool;
  client: OrchardClient;
  provider?: ModelProvider;
  /** Resolves when the workers have stopped (after shutdown(), a signal, or a fatal worker error, which rejects). */
  workersDone: Promise<void>;
  /** Stops polling; running activities get `config.shutdownGraceSeconds` to finish, then the SDK cancels them. */
  shutdown(): void;
  /** shutdown(), waits for the workers, then closes connections and the pool and stops what the stack started. */
  stop(): Promise<void>;
}

export interface StartOrchardOptions {
  hostOnly?: boolean;
  /** A stack the caller resolved; otherwise bootStack (configured parts, embedded for the rest). */
  stack?: Stack;
  /** Default: `demo` (the scripted demo when no model is configured); `orchard worker` passes `configured`. */
  model?: ModelChoice;
  /** A provider the caller already resolved with modelProviderFor (it checks before connecting anywhere). */
  provider?: ModelProvider;
}

/**
 * Boots the stack (or connects to the configured one), applies migrations, and runs a worker pair:
 * what `orchard dev`, `orchard worker` and `npm start` run in the foreground.
 */
export async function startOrchard(log: (line: string) => void, options: StartOrchardOptions = {}): Promise<RunningOrchard> {
  const config = workerConfigFromEnv(process.env, PROJECT_ROOT);
  // With a metrics port, the SDK's own metrics are exported on a loopback port and passed on at /metrics/temporal.
  const sdkMetricsAddress = config.metrics ? `127.0.0.1:${await freeLoopbackPort()}` : undefined;
  installSdkLogger(createLogger(), sdkMetricsAddress);
  // Payload encryption (ORCHARD_PAYLOAD_KEY*): bad key material stops the worker here, before anything is booted.
  const dataConverter = payloadDataConverter();
  // Before anything is booted or connected: a worker without a model has nothing to start.
  const provider = options.provider ?? (await modelProviderFor(options.hostOnly ? { kind: 'none' } : (options.model ?? { kind: 'demo' })));
  const stack = options.stack ?? (await bootStack({ projectRoot: PROJECT_ROOT, log }));
  const target = stackTarget(stack);
  const pool = createPool(stack.databaseUrl, { embedded: stack.embedded.postgres, onQuery: metrics.storeQueried, max: config.storeConnections });
  let connection: NativeConnection | undefined;
  let clientConnection: Connection | undefined;
  let registration: HostRegistration | undefined;
  let workers: OrchardWorkers | undefined;
  let metricsServer: MetricsServer | undefined;
  let lost: OrchardError | undefined;
  try {
    if (config.metrics) {
      metricsServer = await startMetricsServer({ ...config.metrics, sdkMetricsUrl: `http://${sdkMetricsAddress}/metrics` }).catch((err: unknown) => {
        const message = err instanceof Error ? err.message : String(err);
        throw new OrchardError('invalid_input', `ORCHARD_METRICS_PORT=${config.metrics!.port}: cannot serve metrics there (${message})`);
      });
      log(`metrics: http://${config.metrics.host ?? 'localhost'}:${metricsServer.port}/metrics (Temporal SDK: /metrics/temporal)`);
    }
    connection = await NativeConnection.connect(nativeConnectionOptions(target));
    clientConnection = await Connection.connect(clientConnectionOptions(target));
    // Refuse now, with the commands that fix it, rather than fail every session start in this namespace later.
    await assertSearchAttributes(clientConnection, target.namespace);
    const report = await migrate(pool);
    log(`migrations: ${report.applied.length} applied, ${report.alreadyApplied.length} already applied`);
    // One live worker per host id; a second one is refused here, before it polls anything.
    registration = await registerHost(pool, config.hostId, log, (message) => {
      lost = new OrchardError('host_id_in_use', `${message}: stopping`);
      log(lost.message);
      workers?.shutdown();
    });
    const temporal = new Client({ connection: clientConnection, namespace: target.namespace, ...(dataConverter ? { dataConverter } : {}) });
    log(
      options.hostOnly
        ? `worker: polling orchard-host-${config.hostId} only`
        : `worker: bundling workflows and polling ${config.taskQueue} + orchard-host-${config.hostId}`,
    );
    // Which model answers sessions that name none: a scripted default fails any real task, so say which it is.
    if (provider) log(`model: ${provider.description ?? provider.name}`);
    workers = await createOrchardWorkers({
      connection,
      namespace: target.namespace,
      taskQueue: config.taskQueue,
      hostId: config.hostId,
      worktreeRoot: config.worktreeRoot,
      pool,
      defaultProvider: provider,
      hostOnly: options.hostOnly,
      client: temporal,
      maxConcurrentCommands: config.maxConcurrentCommands,
      maxConcurrentActivities: config.maxConcurrentActivities,
      log,
      shutdownGraceMs: config.shutdownGraceSeconds * 1000,
      dataConverter,
    });
    const running = workers;
    const held = registration;
    const workersDone = running.run().then(() => {
      if (lost) throw lost;
    });
    // Nobody may be awaiting it yet; a fatal worker error surfaces through whoever awaits workersDone.
    workersDone.catch(() => undefined);
    const client = new OrchardClient(temporal, { taskQueue: config.taskQueue, defaultHost: config.hostId });
    const conn = connection;
    const cconn = clientConnection;
    const served = metricsServer;
    let stopping: Promise<void> | undefined;
    return {
      stack,
      target,
      config,
      pool,
      client,
      provider,
      workersDone,
      shutdown: () => running.shutdown(),
      stop: () =>
        (stopping ??= (async () => {
          running.shutdown();
          await workersDone.catch(() => undefined);
          // Only now: the host's activities have finished or been cancelled.
          await held.release();
          await served?.close();
          await cconn.close().catch(() => undefined);
          await conn.close().catch(() => undefined);
          await pool.end().catch(() => undefined);
          await stack.stop();
        })()),
    };
  } catch (err) {
    await registration?.release();
    await metricsServer?.close();
    await clientConnection?.close().catch(() => undefined);
    await connection?.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    await stack.stop();
    throw err;
  }
}

/** A loopback port nobody listens on now (for the runtime's own Prometheus exporter, which takes an address, not 0). */
async function freeLoopbackPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve, reject) => probe.once('error', reject).listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

function payloadDataConverter(): ReturnType<typeof dataConverterFromEnv> {
  try {
    return dataConverterFromEnv();
  } catch (err) {
    if (err instanceof PayloadKeyError) throw new OrchardError(err.code, err.message);
    throw err;
  }
}

/** Options for the worker's NativeConnection: the same settings the client connects with (client/connection.ts). */
export function nativeConnectionOptions(target: TemporalTarget): NativeConnectionOptions {
  return { address: target.address, tls: target.tls, apiKey: target.apiKey, metadata: target.metadata };
}
