/**
 * A host-only worker in a process of its own, so a fault test can SIGKILL it mid-activity:
 *   tsx test/faults/host-worker.ts <hostId> <worktreeRoot>
 * Prints its start-up sweep's summary, then `ready` once it polls. With ORCHARD_TEST_REAP_CANNOT_KILL=1 its
 * reaper's signals reach nothing (a process it cannot kill), and it gives up on them within a second. With
 * ORCHARD_TEST_HOLD_PREPARE=1 worktree preparation prints `preparing` and then waits until it is cancelled.
 */
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { createPool } from '../../activities/store/db';
import { createOrchardWorkers } from '../../worker/worker';

async function main(): Promise<void> {
  const [hostId, worktreeRoot] = process.argv.slice(2);
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const pool = createPool(process.env.DATABASE_URL!, { max: 2, embedded: process.env.ORCHARD_TEST_EMBEDDED_PG === '1' });
  const connection = await NativeConnection.connect({ address: process.env.TEMPORAL_ADDRESS! });
  const workers = await createOrchardWorkers({
    connection,
    namespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
    taskQueue: 'unused-host-only',
    hostId,
    worktreeRoot,
    pool,
    client: new Client({ connection: await Connection.connect({ address: process.env.TEMPORAL_ADDRESS! }) }),
    hostOnly: true,
    log: (line) => console.log(line),
    hostHooks:
      process.env.ORCHARD_TEST_HOLD_PREPARE === '1'
        ? {
            beforePrepare: (_input, signal) => {
              console.log('preparing');
              return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
            },
          }
        : undefined,
    reap: process.env.ORCHARD_TEST_REAP_CANNOT_KILL === '1' ? { send: () => undefined, graceMs: 100, timeoutMs: 1000 } : undefined,
  });
  const done = workers.run();
  console.log('ready');
  await done;
}

void main();
