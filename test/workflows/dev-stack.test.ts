import test from 'ava';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';

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
});
