import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { orchardEnv, runOrchard, spawnOrchard } from '../helpers/cli-process';
import { freePort } from '../../worker/dev-server';

/**
 * `orchard dev` on a state directory of its own (ORCHARD_STATE_DIR) and the port ORCHARD_TEMPORAL_PORT names: the CLI
 * finds it through that directory's stack file; before it runs the CLI says there is no Temporal
 * (`temporal_unavailable`), and a second `orchard dev` on the same directory is refused (`dev_already_running`).
 */
test('orchard dev honours ORCHARD_STATE_DIR and ORCHARD_TEMPORAL_PORT; no stack is temporal_unavailable; a second dev is dev_already_running', async (t) => {
  t.timeout(240_000);
  const stateDir = mkdtempSync(join(tmpdir(), 'orchard-dev-'));
  const port = await freePort('127.0.0.1');
  // No Temporal and no database configured (undefined removes them from what the process inherits).
  const env = orchardEnv({
    ORCHARD_STATE_DIR: stateDir,
    ORCHARD_TEMPORAL_PORT: String(port),
    ORCHARD_UI_PORT: 'off',
    TEMPORAL_ADDRESS: undefined,
    TEMPORAL_NAMESPACE: undefined,
    DATABASE_URL: undefined,
  });

  const none = await runOrchard(['session', 'list'], env);
  t.is(none.code, 2, none.stdout + none.stderr);
  t.regex(none.stderr, /^orchard: temporal_unavailable: no Temporal to talk to/);

  const dev = spawnOrchard(t, ['dev'], env);
  await dev.waitFor(/Ctrl-C stops/, 180_000);
  const stack = JSON.parse(readFileSync(join(stateDir, 'stack.json'), 'utf8')) as { temporalAddress: string; pid: number };
  t.is(stack.temporalAddress, `127.0.0.1:${port}`);
  t.is(stack.pid, dev.pid);

  const listed = await runOrchard(['session', 'list', '--json'], env);
  t.is(listed.code, 0, listed.stderr);
  t.deepEqual(JSON.parse(listed.stdout), []);

  const second = await runOrchard(['dev'], env);
  t.is(second.code, 2, second.stdout + second.stderr);
  t.regex(
    second.stderr,
    new RegExp(`^orchard: dev_already_running: orchard dev already runs on this state directory \\(pid ${dev.pid}, Temporal at 127\\.0\\.0\\.1:${port}`),
  );

  dev.child.kill('SIGINT');
  t.like(await dev.exit(120_000), { code: 0 });
});
