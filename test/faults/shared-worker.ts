/**
 * A shared-queue worker in a process of its own (workflows, model calls, store, dispatch), for a test that needs the
 * shared queue served by a worker that is not the test's: e.g. one run under bubblewrap with a host's disk hidden.
 *   node --import tsx test/faults/shared-worker.ts <taskQueue> <hostId> <worktreeRoot> <modelUrl>
 * Its model is the OpenAI-compatible endpoint at <modelUrl> (a test's stub). Its own host queue (`<hostId>`) runs no
 * commands here: confinement is off. With ORCHARD_TEST_PROBE_PATH set it first prints `probe <path> visible=<bool>`
 * (what this process sees of that path), then `ready` once it polls. With ORCHARD_TEST_CONFINED=1 it is a whole worker:
 * its host queue runs commands, confined as in production (a randomized schedule kills it with SIGKILL). Needs DATABASE_URL, TEMPORAL_ADDRESS,
 * TEMPORAL_NAMESPACE and ORCHARD_WORKFLOW_BUNDLE, as `npm test` sets them.
 */
import { existsSync } from 'node:fs';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { createPool } from '../../activities/store/db';
import { createOrchardWorkers } from '../../worker/worker';

async function main(): Promise<void> {
  const [taskQueue, hostId, worktreeRoot, modelUrl] = process.argv.slice(2);
  if (!taskQueue || !hostId || !worktreeRoot || !modelUrl) throw new Error('usage: shared-worker.ts <taskQueue> <hostId> <worktreeRoot> <modelUrl>');
  const probe = process.env.ORCHARD_TEST_PROBE_PATH;
  if (probe) console.log(`probe ${probe} visible=${existsSync(probe)}`);
  Runtime.install({ logger: new DefaultLogger('ERROR'), shutdownSignals: [] });
  const namespace = process.env.TEMPORAL_NAMESPACE ?? 'default';
  const pool = createPool(process.env.DATABASE_URL!, { max: 4, embedded: process.env.ORCHARD_TEST_EMBEDDED_PG === '1' });
  const connection = await NativeConnection.connect({ address: process.env.TEMPORAL_ADDRESS! });
  const bundle = process.env.ORCHARD_WORKFLOW_BUNDLE;
  const workers = await createOrchardWorkers({
    connection,
    namespace,
    taskQueue,
    hostId,
    worktreeRoot,
    pool,
    client: new Client({ connection: await Connection.connect({ address: process.env.TEMPORAL_ADDRESS! }), namespace }),
    defaultProvider: new OpenAICompatibleProvider({ baseURL: modelUrl, model: 'stub', timeoutMs: 30_000 }),
    workflowBundle: bundle ? { codePath: bundle } : undefined,
    // ORCHARD_TEST_CONFINED=1: a whole worker (its host queue runs commands, confined as in production).
    confinement: process.env.ORCHARD_TEST_CONFINED === '1' ? undefined : { mode: 'off', reason: 'the shared-queue worker of a fault test runs no commands' },
    shutdownGraceMs: 5_000,
    log: (line) => console.log(line),
  });
  const done = workers.run();
  console.log('ready');
  await done;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
