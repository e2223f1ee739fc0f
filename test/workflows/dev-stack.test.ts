import path from 'node:path';
import test from 'ava';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import { loadDevConfig, registerSearchAttributesOnSpawned, startDevServer } from '../../worker/dev-server';
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
