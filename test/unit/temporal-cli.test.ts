import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { TEMPORAL_CLI_MODULE, TemporalCliUnavailableError, isChecksumDbUnreachable, resolveTemporalCli, temporalCacheDir } from '../../worker/temporal-cli';

/** A scratch HOME/XDG cache, a PATH of our own, and a log. */
function sandbox() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-cli-'));
  const bin = path.join(root, 'path-bin');
  fs.mkdirSync(bin);
  const lines: string[] = [];
  const env: NodeJS.ProcessEnv = { PATH: bin, HOME: root, XDG_CACHE_HOME: path.join(root, 'cache') };
  return { root, bin, env, lines, log: (line: string) => lines.push(line) };
}

function script(file: string, body: string) {
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
}

/**
 * A stand-in for `go install`: counts its runs, fails like an offline checksum lookup unless GOSUMDB=off when asked
 * to, and otherwise writes a `temporal` into GOBIN after a short pause.
 */
function fakeGo(bin: string, opts: { sumdbOffline?: boolean } = {}) {
  script(
    path.join(bin, 'go'),
    [
      // The sandbox PATH holds only our fakes; the script itself needs coreutils.
      'PATH="$PATH:/usr/bin:/bin"',
      'echo run >> "$(dirname "$0")/go-runs"',
      opts.sumdbOffline
        ? 'if [ "$GOSUMDB" != off ]; then ' +
          'echo "verifying github.com/temporalio/cli@v1.5.1: dial tcp: lookup sum.golang.org: no such host" >&2; ' +
          'exit 1; fi'
        : '',
      'echo "go: downloading go.temporal.io/server v1.29.1" >&2',
      'sleep 0.3',
      'printf "#!/bin/sh\\necho fake temporal\\n" > "$GOBIN/temporal"',
      'chmod +x "$GOBIN/temporal"',
    ].join('\n'),
  );
  const runs = path.join(bin, 'go-runs');
  return () => (fs.existsSync(runs) ? fs.readFileSync(runs, 'utf8').split('\n').filter(Boolean).length : 0);
}

test('the cache follows XDG_CACHE_HOME, else ~/.cache', (t) => {
  t.is(temporalCacheDir({ XDG_CACHE_HOME: '/x/cache' }), '/x/cache/orchard');
  t.is(temporalCacheDir({}), path.join(os.homedir(), '.cache', 'orchard'));
  // The XDG spec says a relative value is to be ignored.
  t.is(temporalCacheDir({ XDG_CACHE_HOME: 'relative' }), path.join(os.homedir(), '.cache', 'orchard'));
});

test('an unreachable checksum database is told apart from other build failures', (t) => {
  t.true(isChecksumDbUnreachable('verifying m@v: Get "https://sum.golang.org/lookup/m@v": dial tcp: lookup sum.golang.org: no such host'));
  t.false(isChecksumDbUnreachable('go: github.com/x@v1: reading https://proxy.golang.org/...: 404 Not Found'));
  t.false(isChecksumDbUnreachable('verifying m@v: checksum mismatch\n\tdownloaded: h1:a\n\tsum.golang.org: h1:b\nSECURITY ERROR'));
});

test('a temporal on PATH wins', async (t) => {
  const s = sandbox();
  script(path.join(s.bin, 'temporal'), 'exit 0');
  t.is(await resolveTemporalCli(s.log, s.env), path.join(s.bin, 'temporal'));
});

test('ORCHARD_TEMPORAL_CLI is used when nothing is on PATH, and a wrong one is an error', async (t) => {
  const s = sandbox();
  const cli = path.join(s.root, 'my-temporal');
  script(cli, 'exit 0');
  t.is(await resolveTemporalCli(s.log, { ...s.env, ORCHARD_TEMPORAL_CLI: cli }), cli);
  await t.throwsAsync(resolveTemporalCli(s.log, { ...s.env, ORCHARD_TEMPORAL_CLI: path.join(s.root, 'nope') }), {
    instanceOf: TemporalCliUnavailableError,
    message: /ORCHARD_TEMPORAL_CLI=.*nope is not an executable file/,
  });
});

test('no binary and no go is TemporalCliUnavailableError', async (t) => {
  const s = sandbox();
  const err = await t.throwsAsync(resolveTemporalCli(s.log, s.env), { instanceOf: TemporalCliUnavailableError });
  t.is(err?.code, 'temporal_cli_unavailable');
  t.regex(err?.message ?? '', /no go to build/);
});

test('with go on PATH the CLI is built into the cache once, with progress in the log', async (t) => {
  const s = sandbox();
  const runs = fakeGo(s.bin);
  const cached = path.join(s.env.XDG_CACHE_HOME!, 'orchard', 'bin', 'temporal');
  t.is(await resolveTemporalCli(s.log, s.env), cached);
  t.true(s.lines.some((line) => line.includes(`go install ${TEMPORAL_CLI_MODULE}`)));
  t.true(s.lines.some((line) => line.includes('go: downloading go.temporal.io/server')));
  // Built once; afterwards the cache answers.
  t.is(await resolveTemporalCli(s.log, s.env), cached);
  t.is(runs(), 1);
  // No staging directory or lock left behind.
  t.deepEqual(fs.readdirSync(path.dirname(path.dirname(cached))).sort(), ['bin']);
});

test('two callers resolving at once build only once: the second waits on the lock', async (t) => {
  const s = sandbox();
  const runs = fakeGo(s.bin);
  const [a, b] = await Promise.all([resolveTemporalCli(s.log, s.env), resolveTemporalCli(s.log, s.env)]);
  t.is(a, b);
  t.is(runs(), 1);
  t.true(s.lines.some((line) => /another process \(pid \d+\) is building/.test(line)));
});

test('an unreachable sum.golang.org is retried once with GOSUMDB=off', async (t) => {
  const s = sandbox();
  const runs = fakeGo(s.bin, { sumdbOffline: true });
  const cli = await resolveTemporalCli(s.log, s.env);
  t.true(fs.existsSync(cli));
  t.is(runs(), 2);
  t.true(s.lines.some((line) => line.includes('retrying once with GOSUMDB=off')));
});

test('a stale lock left by a dead process is taken over', async (t) => {
  const s = sandbox();
  fakeGo(s.bin);
  const cacheDir = path.join(s.env.XDG_CACHE_HOME!, 'orchard');
  fs.mkdirSync(cacheDir, { recursive: true });
  // A pid far above pid_max is never alive.
  fs.writeFileSync(path.join(cacheDir, 'temporal-build.lock'), '99999999\n');
  t.true(fs.existsSync(await resolveTemporalCli(s.log, s.env)));
});
