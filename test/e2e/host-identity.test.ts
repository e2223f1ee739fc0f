import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { orchardEnv, spawnOrchard } from '../helpers/cli-process';
import { testPool } from '../helpers/orchard';

test('two workers with one host id: the second is refused naming the holder; after kill -9 a restart is accepted', async (t) => {
  const pool = await testPool(t);
  // No ORCHARD_HOST_ID: both read the id the first one generated in their shared state dir.
  const env = orchardEnv({ ORCHARD_STATE_DIR: mkdtempSync(join(tmpdir(), 'orchard-host-state-')) });
  const first = spawnOrchard(t, ['worker', '--host-only'], env);
  await first.waitFor(/worker for /);
  const hostId = readFileSync(join(env.ORCHARD_STATE_DIR!, 'host-id'), 'utf8').trim();
  t.regex(first.stdout(), new RegExp(`orchard-host-${hostId}`));

  const second = spawnOrchard(t, ['worker', '--host-only'], env);
  t.is((await second.exit()).code, 2, second.stdout());
  const lines = second.stderr().trim().split('\n');
  t.is(lines.length, 1, second.stderr());
  t.regex(lines[0], new RegExp(`^orchard: host_id_in_use: host id ${hostId} is held by a running worker: instance [0-9a-f-]+, pid ${first.pid} on `));
  t.notRegex(second.stdout(), /worker for /, 'it never started polling');

  // kill -9 and a supervisor restart on the same machine: the dead holder's pid is gone, so no waiting.
  first.child.kill('SIGKILL');
  await first.exit();
  const restarted = spawnOrchard(t, ['worker', '--host-only'], env);
  await restarted.waitFor(/worker for /);
  t.regex(restarted.stdout(), new RegExp(`host id ${hostId}: took over from instance .* pid ${first.pid} is gone \\(same boot\\)`));
  const held = await pool.query(`SELECT pid, state FROM worker_hosts WHERE host_id = $1`, [hostId]);
  t.deepEqual(held.rows, [{ pid: restarted.pid, state: 'running' }]);

  // A graceful stop releases the id.
  restarted.child.kill('SIGTERM');
  t.is((await restarted.exit()).code, 0, restarted.stderr());
  const released = await pool.query(`SELECT state FROM worker_hosts WHERE host_id = $1`, [hostId]);
  t.deepEqual(released.rows, [{ state: 'released' }]);
});
