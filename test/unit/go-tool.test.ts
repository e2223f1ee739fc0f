import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { GoToolUnavailableError, resolveGoTool, type GoTool } from '../../worker/go-tool';
import { TOXIPROXY } from '../../worker/toxiproxy';

/** A scratch cache and a PATH holding only a fake `go` that installs a binary called `server`, as cmd/server does. */
function sandbox() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-go-tool-'));
  const bin = path.join(root, 'path-bin');
  fs.mkdirSync(bin);
  fs.writeFileSync(
    path.join(bin, 'go'),
    [
      '#!/bin/sh',
      'PATH="$PATH:/usr/bin:/bin"',
      'echo "$2" >> "$(dirname "$0")/go-runs"',
      'printf "#!/bin/sh\\necho fake server\\n" > "$GOBIN/server"',
      'chmod +x "$GOBIN/server"',
    ].join('\n'),
    { mode: 0o755 },
  );
  const env: NodeJS.ProcessEnv = { PATH: bin, HOME: root, XDG_CACHE_HOME: path.join(root, 'cache') };
  const runs = () => fs.readFileSync(path.join(bin, 'go-runs'), 'utf8').split('\n').filter(Boolean);
  return { env, runs, cache: path.join(root, 'cache', 'orchard') };
}

test('a tool whose go install names it differently is renamed into the cache under its own name', async (t) => {
  const s = sandbox();
  const server = await resolveGoTool(TOXIPROXY, () => undefined, { env: s.env });
  t.is(server, path.join(s.cache, 'bin', 'toxiproxy-server'));
  t.deepEqual(s.runs(), [TOXIPROXY.module]);
  // Its build lock and staging directory are gone; only the binary stays.
  t.deepEqual(fs.readdirSync(s.cache), ['bin']);
  t.deepEqual(fs.readdirSync(path.join(s.cache, 'bin')), ['toxiproxy-server']);
});

test('with build: false a missing tool is an error that says how to build it, and nothing is built', async (t) => {
  const s = sandbox();
  const tool: GoTool = { module: 'example.com/x/cmd/server@v1.0.0', binary: 'x-server', builtName: 'server', label: 'X', unavailableHint: 'run make x' };
  const err = await t.throwsAsync(
    resolveGoTool(tool, () => undefined, { env: s.env, build: false }),
    { instanceOf: GoToolUnavailableError },
  );
  t.regex(err?.message ?? '', /no x-server binary on PATH or at .*x-server; run make x/);
  t.false(fs.existsSync(path.join(s.env.PATH!, 'go-runs')));
  // Once built, build: false finds it in the cache.
  await resolveGoTool(tool, () => undefined, { env: s.env });
  t.is(await resolveGoTool(tool, () => undefined, { env: s.env, build: false }), path.join(s.cache, 'bin', 'x-server'));
});
