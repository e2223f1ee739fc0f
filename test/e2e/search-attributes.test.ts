import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import test from 'ava';
import { join } from 'node:path';
import { assertSearchAttributes, SearchAttributesMissingError } from '../../worker/search-attributes';
import { orchardEnv, spawnOrchard } from '../helpers/cli-process';
import { createBareNamespace } from '../helpers/namespaces';
import { testStackEnv } from '../helpers/orchard';

const DEMO = join(__dirname, '../../scenarios/demo.json');
const command = (ns: string, name: string, type = 'Keyword') => `temporal operator search-attribute create --namespace ${ns} --name ${name} --type ${type}`;

test('a worker in a namespace without Orchard search attributes refuses to start and prints the commands', async (t) => {
  const connection = await Connection.connect({ address: testStackEnv().temporalAddress });
  t.teardown(() => connection.close());
  const namespace = await createBareNamespace(connection, 'no-sa');

  const worker = spawnOrchard(t, ['worker', '--scripted', DEMO], orchardEnv({ TEMPORAL_NAMESPACE: namespace }));
  t.is((await worker.exit()).code, 2, worker.stderr());
  const lines = worker.stderr().trim().split('\n');
  t.regex(lines[0], new RegExp(`^orchard: search_attributes_missing: namespace ${namespace} lacks the search attributes Orchard writes`));
  t.deepEqual(
    lines.slice(1).map((l) => l.trim()),
    [
      ...['OrchardKind', 'OrchardStatus', 'OrchardParent', 'OrchardHost'].map((name) => command(namespace, name)),
      command(namespace, 'OrchardHandoffSloMissed', 'Bool'),
      command(namespace, 'OrchardUnconfined', 'Bool'),
    ],
  );
  t.notRegex(worker.stdout(), /migrations:/, 'it refused before touching the database');

  // Registered in part: only the missing ones are asked for; all of them: the check passes.
  const keyword = encodeSearchAttributeIndexedValueType('KEYWORD')!;
  await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: { OrchardKind: keyword, OrchardStatus: keyword } });
  const partial = await t.throwsAsync(() => assertSearchAttributes(connection, namespace), { instanceOf: SearchAttributesMissingError });
  t.deepEqual(
    partial?.problems.missing.map((a) => a.name),
    ['OrchardParent', 'OrchardHost', 'OrchardHandoffSloMissed', 'OrchardUnconfined'],
  );
  const bool = encodeSearchAttributeIndexedValueType('BOOL')!;
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: { OrchardParent: keyword, OrchardHost: keyword, OrchardHandoffSloMissed: bool, OrchardUnconfined: bool },
  });
  await t.notThrowsAsync(() => assertSearchAttributes(connection, namespace));
});
