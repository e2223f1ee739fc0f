import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { createPool } from '../../activities/store/db';
import { ConfigError, workerConfigFromEnv } from '../../worker/config';

const root = mkdtempSync(join(tmpdir(), 'orchard-store-connections-'));

test('ORCHARD_STORE_CONNECTIONS: the pool size when set, the default (8) when unset, anything else stops the worker', async (t) => {
  t.is(workerConfigFromEnv({}, root).storeConnections, undefined);
  t.is(workerConfigFromEnv({ ORCHARD_STORE_CONNECTIONS: '32' }, root).storeConnections, 32);
  for (const bad of ['0', '-1', '2.5', 'many']) {
    t.throws(() => workerConfigFromEnv({ ORCHARD_STORE_CONNECTIONS: bad }, root), { instanceOf: ConfigError, message: /ORCHARD_STORE_CONNECTIONS/ });
  }
  const sized = createPool('postgres://127.0.0.1:1/none', { max: workerConfigFromEnv({ ORCHARD_STORE_CONNECTIONS: '32' }, root).storeConnections });
  const unset = createPool('postgres://127.0.0.1:1/none', { max: workerConfigFromEnv({}, root).storeConnections });
  t.is(sized.options.max, 32);
  t.is(unset.options.max, 8);
  await Promise.all([sized.end(), unset.end()]);
});
