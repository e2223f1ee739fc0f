import { NativeConnection } from '@temporalio/worker';
import { Client, Connection } from '@temporalio/client';
import { resolve } from 'node:path';
import type { Pool } from 'pg';
import { OpenAICompatibleProvider, openAIConfigFromEnv } from '../activities/model/openai';
import { loadScenario } from '../activities/model/scenario';
import { ScriptedProvider } from '../activities/model/scripted';
import type { ModelProvider } from '../activities/model/types';
import { createPool } from '../activities/store/db';
import { migrate } from '../activities/store/migrate';
import { OrchardClient } from '../client/client';
import { workerConfigFromEnv, type WorkerConfig } from './config';
import { createLogger, installSdkLogger } from './logging';
import { bootStack, stackTarget, type Stack } from './stack';
import { clientConnectionOptions, nativeConnectionOptions, type TemporalTarget } from './temporal-connection';
import { createOrchardWorkers } from './worker';

export const PROJECT_ROOT = resolve(__dirname, '..');

/**
 * The worker's `{ provider: 'default' }` model: the OpenAI-compatible endpoint when ORCHARD_MODEL_URL is
 * set, otherwise the scripted provider on ORCHARD_SCENARIO (default: the demo scenario).
 */
export async function defaultProviderFromEnv(env = process.env): Promise<ModelProvider> {
  const openai = openAIConfigFromEnv(env);
  if (openai) return new OpenAICompatibleProvider(openai);
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
  provider: ModelProvider;
  /** Resolves when the workers stop (after stop(), or on a fatal worker error). */
  workersDone: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Boots the stack (or connects to the configured one), applies migrations, and runs a worker pair:
 * what `orchard dev` and `npm start` run in the foreground.
 */
export async function startOrchard(
  log: (line: string) => void,
  options: { hostOnly?: boolean; stack?: Stack } = {},
): Promise<RunningOrchard> {
  installSdkLogger(createLogger());
  const stack = options.stack ?? (await bootStack({ projectRoot: PROJECT_ROOT, log }));
  const config = workerConfigFromEnv(process.env, PROJECT_ROOT);
  const target = stackTarget(stack);
  const pool = createPool(stack.databaseUrl, { embedded: stack.embedded.postgres });
  let connection: NativeConnection | undefined;
  let clientConnection: Connection | undefined;
  try {
    const report = await migrate(pool);
    log(`migrations: ${report.applied.length} applied, ${report.alreadyApplied.length} already applied`);
    const provider = await defaultProviderFromEnv();
    connection = await NativeConnection.connect(nativeConnectionOptions(target));
    clientConnection = await Connection.connect(clientConnectionOptions(target));
    const temporal = new Client({ connection: clientConnection, namespace: target.namespace });
    log(`worker: bundling workflows and polling ${config.taskQueue} + orchard-host-${config.hostId}`);
    const workers = await createOrchardWorkers({
      connection,
      namespace: target.namespace,
      taskQueue: config.taskQueue,
      hostId: config.hostId,
      worktreeRoot: config.worktreeRoot,
      pool,
      defaultProvider: provider,
      hostOnly: options.hostOnly,
      client: temporal,
    });
    const workersDone = workers.run();
    const client = new OrchardClient(temporal, {
      taskQueue: config.taskQueue,
      defaultHost: config.hostId,
    });
    const conn = connection;
    const cconn = clientConnection;
    return {
      stack,
      target,
      config,
      pool,
      client,
      provider,
      workersDone,
      stop: async () => {
        workers.shutdown();
        await workersDone.catch(() => undefined);
        await cconn.close();
        await conn.close();
        await pool.end();
        await stack.stop();
      },
    };
  } catch (err) {
    await clientConnection?.close().catch(() => undefined);
    await connection?.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    await stack.stop();
    throw err;
  }
}
