import test from 'ava';
import { Client } from 'pg';
import { testStackEnv } from '../helpers/orchard';
import { sharedToxiproxy } from '../helpers/toxiproxy';
import { waitFor } from '../helpers/wait';

const toxiproxy = sharedToxiproxy(test);
const CUT_MS = Number(process.env.ORCHARD_TEST_CUT_MS ?? 2_000);

/** A query on a fresh connection through `url`: its one row, or the error that stopped it. */
async function queryOnce(url: string): Promise<number> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.query('SELECT 42 AS answer')).rows[0].answer;
  } finally {
    await client.end().catch(() => undefined);
  }
}

test('a query through the proxy works, fails while it is cut (open connections dropped too), and works after restore', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  t.regex(pg.url, new RegExp(`@${pg.listen.replace(/\./g, '\\.')}/`));
  t.is(await queryOnce(pg.url), 42);

  const open = new Client({ connectionString: pg.url });
  const dropped = new Promise<Error>((resolve) => open.on('error', resolve));
  await open.connect();
  t.is((await open.query('SELECT 1 AS one')).rows[0].one, 1);

  await pg.cut();
  await t.throwsAsync(queryOnce(pg.url), { message: /ECONNREFUSED|terminated|closed|timeout/i });
  // The connection that was open before the cut is gone too.
  t.regex((await dropped).message, /terminated|ECONNRESET|closed/i);
  await open.end().catch(() => undefined);

  await pg.restore();
  t.is(await queryOnce(pg.url), 42);
});

test('cutFor refuses connections for a while, then restores the proxy by itself', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const restored = pg.cutFor(CUT_MS);
  // A refused connection fails at once, so the cut is seen long before it ends.
  await waitFor(
    () =>
      queryOnce(pg.url).then(
        () => false,
        () => true,
      ),
    CUT_MS,
    'a refused connection during the cut',
  );
  await restored;
  t.is(await queryOnce(pg.url), 42);
});
