import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { type Stack, readStackFile, redactUrl, removeStackFile, stackFilePath, writeStackFile } from '../../worker/stack';

test('printed database URLs never carry the password', (t) => {
  t.is(redactUrl('postgres://orchard:s3cret@db.internal/orchard'), 'postgres://orchard:***@db.internal/orchard');
  t.is(redactUrl('postgres://postgres@127.0.0.1:5432/test'), 'postgres://postgres@127.0.0.1:5432/test');
  t.is(redactUrl('postgres://db/x?user=a&password=hunter2'), 'postgres://db/x?user=a&password=***');
  t.is(redactUrl("host=db user=a password='p w' dbname=x"), 'host=db user=a password=*** dbname=x');
});

const stack: Stack = {
  temporalAddress: '127.0.0.1:7233',
  namespace: 'default',
  webUiUrl: 'http://127.0.0.1:8233',
  databaseUrl: 'postgres://postgres@127.0.0.1:5555/postgres',
  embedded: { temporal: true, postgres: true },
  stop: async () => undefined,
};

test('the stack file round-trips while its writer lives, privately', (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-stack-'));
  t.is(readStackFile(root), undefined);
  writeStackFile(root, stack);
  t.like(readStackFile(root), {
    temporalAddress: '127.0.0.1:7233',
    namespace: 'default',
    webUiUrl: 'http://127.0.0.1:8233',
    databaseUrl: 'postgres://postgres@127.0.0.1:5555/postgres',
    pid: process.pid,
  });
  // It may hold DATABASE_URL credentials.
  t.is(fs.statSync(stackFilePath(root)).mode & 0o777, 0o600);
  removeStackFile(root, { onlyIfOwnedBy: process.pid + 1 });
  t.truthy(readStackFile(root), 'another pid does not remove our file');
  removeStackFile(root, { onlyIfOwnedBy: process.pid });
  t.false(fs.existsSync(stackFilePath(root)));
});

test('a stack file left by a dead process is ignored', (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-stack-'));
  writeStackFile(root, stack);
  const file = stackFilePath(root);
  fs.writeFileSync(file, JSON.stringify({ ...JSON.parse(fs.readFileSync(file, 'utf8')), pid: 99999999 }));
  t.is(readStackFile(root), undefined);
});
