import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ConfigError, persistedHostId, workerConfigFromEnv } from '../../worker/config';

const stateDir = () => mkdtempSync(join(tmpdir(), 'orchard-hostid-'));

test('without ORCHARD_HOST_ID the host id is generated once, kept in <state dir>/host-id and reused', (t) => {
  const dir = stateDir();
  const first = workerConfigFromEnv({ ORCHARD_STATE_DIR: dir }).hostId;
  t.regex(first, /^host-[0-9a-f]{12}$/);
  t.not(first, hostname());
  t.is(readFileSync(join(dir, 'host-id'), 'utf8').trim(), first);
  // A restart (a new process reading the same state dir) gets the same id.
  t.is(workerConfigFromEnv({ ORCHARD_STATE_DIR: dir }).hostId, first);
  t.is(persistedHostId(dir), first);
  // Another state dir is another host.
  t.not(workerConfigFromEnv({ ORCHARD_STATE_DIR: stateDir() }).hostId, first);
});

test('ORCHARD_HOST_ID wins over the file and is sanitized into a task-queue-safe name', (t) => {
  const dir = stateDir();
  writeFileSync(join(dir, 'host-id'), 'host-from-file\n');
  t.is(workerConfigFromEnv({ ORCHARD_STATE_DIR: dir }).hostId, 'host-from-file');
  t.is(workerConfigFromEnv({ ORCHARD_STATE_DIR: dir, ORCHARD_HOST_ID: 'build 3/eu' }).hostId, 'build-3-eu');
});

test('a host-id file that holds no valid id is a configuration error, not a new id', (t) => {
  const dir = stateDir();
  writeFileSync(join(dir, 'host-id'), 'not a/valid id\n');
  t.throws(() => workerConfigFromEnv({ ORCHARD_STATE_DIR: dir }), { instanceOf: ConfigError, message: /no host id/ });
  const empty = stateDir();
  writeFileSync(join(empty, 'host-id'), '');
  t.throws(() => persistedHostId(empty), { instanceOf: ConfigError });
});
