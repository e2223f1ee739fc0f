import { randomUUID } from 'node:crypto';
import test from 'ava';
import { claimHost, heartbeatHost, releaseHost, type HostInstance } from '../../activities/store/hosts';
import { testPool, uniqueId } from '../helpers/orchard';

const options = (alive: (pid: number) => boolean = () => true) => ({ staleAfterSeconds: 45, isProcessAlive: alive });

function instance(hostId: string, over: Partial<HostInstance> = {}): HostInstance {
  return { hostId, instanceId: randomUUID(), hostname: 'box-a', bootId: 'boot-a', pidNamespace: 'pid:[1]', pid: 1000, ...over };
}

test('a live holder (fresh heartbeat, another boot) is refused a second instance, named in the answer', async (t) => {
  const pool = await testPool(t);
  const hostId = uniqueId('h');
  const first = instance(hostId);
  t.deepEqual(await claimHost(pool, first, options()), { kind: 'claimed' });
  const second = await claimHost(pool, instance(hostId, { hostname: 'box-b', bootId: 'boot-b', pid: 2000 }), options());
  if (second.kind !== 'refused') return t.fail(`expected a refusal, got ${second.kind}`);
  t.like(second.holder, { instanceId: first.instanceId, pid: 1000, hostname: 'box-a' });
  t.true(await heartbeatHost(pool, hostId, first.instanceId), 'the first keeps it');
});

test('same boot and pid namespace: a dead holder pid is taken over at once, a live one is not', async (t) => {
  const pool = await testPool(t);
  const hostId = uniqueId('h');
  const first = instance(hostId, { pid: 1000 });
  await claimHost(pool, first, options());
  const restarted = instance(hostId, { pid: 1001 });
  t.is(
    (
      await claimHost(
        pool,
        restarted,
        options((pid) => pid !== 1000),
      )
    ).kind,
    'claimed',
    'pid 1000 is gone: a supervisor restart',
  );
  t.false(await heartbeatHost(pool, hostId, first.instanceId), 'the old instance lost it');

  // Same boot but the recorded pid still runs: refused.
  t.is(
    (
      await claimHost(
        pool,
        instance(hostId, { pid: 1002 }),
        options(() => true),
      )
    ).kind,
    'refused',
  );
  // Same boot id, another pid namespace (another container on the machine): its pid says nothing here.
  t.is(
    (
      await claimHost(
        pool,
        instance(hostId, { pid: 1003, pidNamespace: 'pid:[2]' }),
        options(() => false),
      )
    ).kind,
    'refused',
  );
});

test('a stale heartbeat is taken over from anywhere; a released id is free; stale calls change nothing', async (t) => {
  const pool = await testPool(t);
  const hostId = uniqueId('h');
  const first = instance(hostId);
  await claimHost(pool, first, options());
  await pool.query(`UPDATE worker_hosts SET heartbeat_at = now() - interval '2 minutes' WHERE host_id = $1`, [hostId]);
  const other = instance(hostId, { bootId: 'boot-b', hostname: 'box-b' });
  const taken = await claimHost(pool, other, options());
  t.like(taken, { kind: 'claimed', tookOverFrom: { instanceId: first.instanceId } });
  t.false(await releaseHost(pool, hostId, first.instanceId), 'the superseded instance cannot release it');

  t.true(await releaseHost(pool, hostId, other.instanceId));
  t.deepEqual(await claimHost(pool, instance(hostId, { bootId: 'boot-c' }), options()), { kind: 'claimed' });
});
