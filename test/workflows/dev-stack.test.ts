import net from 'node:net';
import path from 'node:path';
import test from 'ava';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import { freePort, loadDevConfig, registerSearchAttributesOnSpawned, startDevServer } from '../../worker/dev-server';
import { SearchAttributesMissingError } from '../../worker/search-attributes';
import { createBareNamespace } from '../helpers/namespaces';

// The launcher's server is booted from temporal-dev.yaml's attributes; an external TEMPORAL_ADDRESS must have them too.
test('the dev stack registers the four Orchard search attributes as Keyword', async (t) => {
  const address = process.env.TEMPORAL_ADDRESS;
  if (!address) return t.fail('TEMPORAL_ADDRESS is unset: run the suite with `npm test`, which boots a dev server');
  const namespace = process.env.TEMPORAL_NAMESPACE ?? 'default';
  const connection = await Connection.connect({ address });
  t.teardown(() => connection.close());
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const keyword = encodeSearchAttributeIndexedValueType('KEYWORD');
  for (const name of ['OrchardKind', 'OrchardStatus', 'OrchardParent', 'OrchardHost']) {
    const actual = customAttributes?.[name];
    t.true(keyword !== undefined && actual === keyword, `${name} is a Keyword search attribute (got ${actual})`);
  }
  t.is(customAttributes?.OrchardHandoffSloMissed as unknown, encodeSearchAttributeIndexedValueType('BOOL') as unknown);
});

const projectRoot = path.resolve(__dirname, '..', '..');

/** The run's server, seen from a test: a server this process did not start. */
async function foreignServer(t: import('ava').ExecutionContext) {
  const address = process.env.TEMPORAL_ADDRESS!;
  const connection = await Connection.connect({ address });
  t.teardown(() => connection.close());
  const namespace = await createBareNamespace(connection, 'foreign');
  const attributes = async () => Object.keys((await connection.operatorService.listSearchAttributes({ namespace })).customAttributes ?? {});
  return { address, port: Number(address.split(':').pop()), namespace, attributes };
}

test('orchard dev reusing a server it did not start registers nothing there and refuses with the commands', async (t) => {
  const server = await foreignServer(t);
  const config = loadDevConfig(projectRoot, { port: server.port, ui: false, dbFile: null, namespace: server.namespace });
  const err = await t.throwsAsync(() => startDevServer(config, () => undefined), { instanceOf: SearchAttributesMissingError });
  t.regex(err?.message ?? '', new RegExp(`temporal operator search-attribute create --namespace ${server.namespace} --name OrchardKind --type Keyword`));
  t.false((await server.attributes()).includes('OrchardKind'), 'nothing was registered on the foreign server');
});

test('search attributes are registered only on the dev server process this process spawned', async (t) => {
  const server = await foreignServer(t);
  // This test process is alive, but it is not what listens on the server's port.
  const err = await t.throwsAsync(() =>
    registerSearchAttributesOnSpawned(
      { pid: process.pid, address: server.address, port: server.port },
      server.namespace,
      { OrchardKind: 'Keyword' },
      () => undefined,
    ),
  );
  t.regex(err?.message ?? '', /refusing to register search attributes .* not the dev server this process started/);
  t.false((await server.attributes()).includes('OrchardKind'));
});

/** A port held by a plain listener for the test's length. */
async function heldPort(t: import('ava').ExecutionContext): Promise<number> {
  const accepted: net.Socket[] = [];
  const holder = net.createServer((socket) => accepted.push(socket));
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    // Whoever connected to it (the probe for a Temporal frontend) is cut off: close() waits for its connections.
    for (const socket of accepted) socket.destroy();
    return new Promise<void>((resolve) => holder.close(() => resolve()));
  });
  return (holder.address() as net.AddressInfo).port;
}

test('a dev server whose picked port was taken before it bound it is started again on other ports', async (t) => {
  const taken = await heldPort(t);
  const picks: number[] = [];
  const lines: string[] = [];
  const config = loadDevConfig(projectRoot, { port: 0, ui: false, dbFile: null });
  const server = await startDevServer(config, (line) => lines.push(line), {
    // The first pick is a port another process took between the pick and the bind.
    pickPort: async (ip) => {
      const port = picks.length === 0 ? taken : await freePort(ip);
      picks.push(port);
      return port;
    },
  });
  t.teardown(() => server.stop());
  t.deepEqual(picks.length, 2);
  t.is(server.address, `127.0.0.1:${picks[1]}`);
  t.true(
    lines.some((line) => /ended during startup.*picking other ports/.test(line)),
    lines.join('\n'),
  );
  const connection = await Connection.connect({ address: server.address });
  t.teardown(() => connection.close());
  t.truthy((await connection.workflowService.getSystemInfo({})).capabilities);
});

test('a configured port that another process holds is refused, not swapped for another', async (t) => {
  const taken = await heldPort(t);
  let picked = 0;
  const config = loadDevConfig(projectRoot, { port: taken, ui: false, dbFile: null });
  const err = await t.throwsAsync(() =>
    startDevServer(config, () => undefined, {
      pickPort: async () => {
        picked++;
        return 0;
      },
    }),
  );
  t.regex(err?.message ?? '', /address already in use/);
  t.is(picked, 0);
});
