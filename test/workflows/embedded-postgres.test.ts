import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { Pool } from 'pg';
import { startEmbeddedPostgres } from '../../worker/pglite';

const log = () => undefined;

test('concurrent transactions through a pg Pool are serialised, not interleaved', async (t) => {
  const pg = await startEmbeddedPostgres({ dataDir: 'memory', log });
  t.teardown(() => pg.stop());
  const pool = new Pool({ connectionString: pg.url, max: 4 });
  t.teardown(() => pool.end());
  await pool.query('CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)');
  await pool.query('INSERT INTO counter VALUES (1, 0)');

  // Read-modify-write with a pause inside the transaction: interleaved transactions would lose increments.
  const increment = async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ n: number }>('SELECT n FROM counter WHERE id = $1', [1]);
      await new Promise((resolve) => setTimeout(resolve, 20));
      await client.query('UPDATE counter SET n = $1 WHERE id = $2', [rows[0].n + 1, 1]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  };
  await Promise.all([increment(), increment(), increment(), increment()]);
  t.is((await pool.query<{ n: number }>('SELECT n FROM counter')).rows[0].n, 4);
});

test('a failed transaction rolls back without disturbing a concurrent one', async (t) => {
  const pg = await startEmbeddedPostgres({ dataDir: 'memory', log });
  t.teardown(() => pg.stop());
  const pool = new Pool({ connectionString: pg.url, max: 2 });
  t.teardown(() => pool.end());
  await pool.query('CREATE TABLE items (id int PRIMARY KEY)');
  const tx = async (id: number, fail: boolean) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('INSERT INTO items VALUES ($1)', [id]);
      if (fail) await client.query('SELECT 1 / 0');
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    } finally {
      client.release();
    }
  };
  const [failed, committed] = await Promise.allSettled([tx(1, true), tx(2, false)]);
  t.is(failed.status, 'rejected');
  t.is(committed.status, 'fulfilled');
  t.deepEqual((await pool.query('SELECT id FROM items ORDER BY id')).rows, [{ id: 2 }]);
});

/** Frontend protocol messages, just enough to hold a Parse open (pg always sends Parse…Sync in one go). */
const frame = (type: string, body: Buffer) => {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
};
const cstr = (s: string) => Buffer.from(`${s}\0`);
const int16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n);
  return b;
};
const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};

test('a Parse from one connection is not replaced by another connection before its Sync', async (t) => {
  const pg = await startEmbeddedPostgres({ dataDir: 'memory', log });
  t.teardown(() => pg.stop());
  const pool = new Pool({ connectionString: pg.url, max: 1 });
  t.teardown(() => pool.end());
  await pool.query('SELECT 1'); // connect B before A holds the backend

  const socket = net.connect(Number(new URL(pg.url).port), '127.0.0.1');
  t.teardown(() => socket.destroy());
  let received = Buffer.alloc(0);
  socket.on('data', (d) => (received = Buffer.concat([received, d])));
  await new Promise((resolve) => socket.once('connect', resolve));
  const params = ['user', 'postgres', 'database', 'postgres', ''].map(cstr);
  const startupBody = Buffer.concat([int32(196608), ...params]);
  socket.write(Buffer.concat([int32(startupBody.length + 4), startupBody]));
  const until = async (pred: () => boolean) => {
    for (let i = 0; i < 200 && !pred(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  };
  await until(() => received.includes(Buffer.from('Z\0\0\0\x05I', 'latin1')));
  received = Buffer.alloc(0);

  // A: Parse + Flush, no Sync yet.
  const parse = frame('P', Buffer.concat([cstr(''), cstr('SELECT $1::int AS from_a'), int16(0)]));
  socket.write(Buffer.concat([parse, frame('H', Buffer.alloc(0))]));
  await until(() => received.length > 0);
  // B: an ordinary query with its own unnamed statement, which must wait for A's Sync.
  const b = pool.query('SELECT $1::text AS from_b', ['b']);
  await new Promise((resolve) => setTimeout(resolve, 100));
  // A: Bind 42, Describe, Execute, Sync.
  const bind = Buffer.concat([cstr(''), cstr(''), int16(0), int16(1), int32(2), Buffer.from('42'), int16(0)]);
  socket.write(
    Buffer.concat([
      frame('B', bind),
      frame('D', Buffer.concat([Buffer.from('P'), cstr('')])),
      frame('E', Buffer.concat([cstr(''), int32(0)])),
      frame('S', Buffer.alloc(0)),
    ]),
  );
  await until(() => received.includes(Buffer.from('Z\0\0\0\x05', 'latin1')));
  t.true(received.includes(Buffer.from('from_a')), 'A ran its own statement');
  t.false(received.includes(Buffer.from('from_b')));
  t.deepEqual((await b).rows, [{ from_b: 'b' }]);
});

test('a data directory keeps its data across restarts and cannot be opened twice', async (t) => {
  const dataDir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-pglite-')), 'pglite');
  const first = await startEmbeddedPostgres({ dataDir, log });
  await t.throwsAsync(startEmbeddedPostgres({ dataDir, log }), { message: /in use by pid/ });
  const pool = new Pool({ connectionString: first.url, max: 1 });
  await pool.query('CREATE TABLE kept (v text)');
  await pool.query("INSERT INTO kept VALUES ('still here')");
  await pool.end();
  await first.stop();

  const second = await startEmbeddedPostgres({ dataDir, log });
  t.teardown(() => second.stop());
  const again = new Pool({ connectionString: second.url, max: 1 });
  t.teardown(() => again.end());
  t.deepEqual((await again.query('SELECT v FROM kept')).rows, [{ v: 'still here' }]);
});
