import test from 'ava';
import { metrics, metricsRegistry } from '../../activities/metrics';
import { createPool, withTransaction } from '../../activities/store/db';
import { testStackEnv } from '../helpers/orchard';

/** orchard_store_queries_total's samples now, as `origin/activity` → value. */
async function counted(): Promise<Map<string, number>> {
  const { values } = await metricsRegistry.getSingleMetric('orchard_store_queries_total')!.get();
  return new Map(values.map((v) => [`${v.labels.origin}/${v.labels.activity}`, v.value]));
}

const since = (before: Map<string, number>, after: Map<string, number>, key: string) => (after.get(key) ?? 0) - (before.get(key) ?? 0);

test('a pool made with onQuery counts every statement its clients send, a transaction BEGIN and COMMIT included', async (t) => {
  let n = 0;
  const pool = createPool(testStackEnv().databaseUrl, { max: 2, embedded: testStackEnv().embedded, onQuery: () => (n += 1) });
  t.teardown(() => pool.end());
  await pool.query('SELECT 1');
  await pool.query('SELECT $1::int', [2]);
  await withTransaction(pool, (client) => client.query('SELECT 3'));
  t.is(n, 5);
});

test("a statement that waited for a free connection is counted under its own caller's origin, not the releasing caller's", async (t) => {
  const pool = createPool(testStackEnv().databaseUrl, { max: 1, embedded: testStackEnv().embedded, onQuery: metrics.storeQueried });
  t.teardown(() => pool.end());
  const held = await pool.connect();
  const before = await counted();
  // The only connection is held: this query waits for it, and gets it from inside the release below.
  const waiting = metrics.withStoreOrigin('host_heartbeat', () => pool.query('SELECT 1'));
  await new Promise((r) => setTimeout(r, 50));
  metrics.withStoreOrigin('lease_renewal', () => held.release());
  await waiting;
  const after = await counted();
  t.is(since(before, after, 'host_heartbeat/none'), 1);
  t.is(since(before, after, 'lease_renewal/none'), 0);
});
