import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { runOrchard } from '../helpers/cli-process';

/**
 * What a command loads is most of what it costs to start (bench/cli-start.ts has the figures): the Temporal SDK's
 * protobuf definitions, the database driver and the guard's wasm parser are each loaded only by the commands that use
 * them. Each run here records the packages the real, compiled `bin/orchard` had loaded when it exited.
 */
const dir = mkdtempSync(join(tmpdir(), 'orchard-cli-start-'));
const preload = join(dir, 'record-loaded.js');
writeFileSync(
  preload,
  `process.on('exit', () => require('node:fs').writeFileSync(process.env.ORCHARD_TEST_LOADED, JSON.stringify(Object.keys(require.cache))));\n`,
);
test.after.always(() => rmSync(dir, { recursive: true, force: true }));

let runs = 0;

/** The packages (under node_modules) `orchard <args>` had loaded at exit, and how it exited. */
async function loadedBy(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; packages: Set<string> }> {
  const record = join(dir, `loaded-${++runs}.json`);
  const run = await runOrchard(args, { ...env, NODE_OPTIONS: `--require ${preload}`, ORCHARD_TEST_LOADED: record });
  const files = JSON.parse(readFileSync(record, 'utf8')) as string[];
  const packages = new Set(files.flatMap((f) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(f)?.[1] ?? []));
  return { code: run.code, packages };
}

const TEMPORAL = ['@temporalio/client', '@temporalio/common', '@temporalio/proto', '@temporalio/workflow', 'protobufjs', '@grpc/grpc-js'];

test('--help loads commander and no Temporal SDK, database driver or guard parser', async (t) => {
  for (const args of [['--help'], ['session', '--help'], ['team', 'start', '--help']]) {
    const { code, packages } = await loadedBy(args);
    t.is(code, 0, args.join(' '));
    t.true(packages.has('commander'));
    for (const heavy of [...TEMPORAL, 'pg', 'web-tree-sitter']) t.false(packages.has(heavy), `${args.join(' ')} loaded ${heavy}`);
  }
});

test('guard and exec load the guard parser and no Temporal SDK', async (t) => {
  const guard = await loadedBy(['guard', '--branch', 'orchard/s1/work', '--worktree', dir, '--', 'git status']);
  t.is(guard.code, 0);
  // Not a worktree: exec admits the command with the guard (alone, whether or not this host has bubblewrap), then
  // refuses to set the directory up (bad usage, 2).
  const exec = await loadedBy(['exec', '--branch', 'orchard/s1/work', '--worktree', dir, '--', 'true'], { ORCHARD_SANDBOX: 'off' });
  t.is(exec.code, 2);
  for (const [name, { packages }] of [
    ['guard', guard],
    ['exec', exec],
  ] as const) {
    t.true(packages.has('web-tree-sitter'), name);
    for (const heavy of [...TEMPORAL, 'pg']) t.false(packages.has(heavy), `${name} loaded ${heavy}`);
  }
});

test('a command that talks to Temporal loads the Temporal client', async (t) => {
  // Refused once the client is loaded, before it connects: the key is checked first.
  const { code, packages } = await loadedBy(['session', 'status', 'some-session'], { TEMPORAL_ADDRESS: '127.0.0.1:1', ORCHARD_PAYLOAD_KEY: 'not-a-key' });
  t.is(code, 2);
  t.true(packages.has('@temporalio/client'));
});
