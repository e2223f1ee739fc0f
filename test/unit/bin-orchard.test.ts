import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';

const BIN = path.join(__dirname, '../../bin/orchard');

/** A checkout holding only bin/orchard (a copy), and whichever of node_modules/ and dist/ the test asks for. */
function checkout(opts: { installed: boolean; cli?: string }): { root: string; bin: string } {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-bin-')));
  fs.mkdirSync(path.join(root, 'bin'));
  fs.copyFileSync(BIN, path.join(root, 'bin/orchard'));
  fs.chmodSync(path.join(root, 'bin/orchard'), 0o755);
  if (opts.installed) fs.mkdirSync(path.join(root, 'node_modules'));
  if (opts.cli !== undefined) {
    fs.mkdirSync(path.join(root, 'dist/cli'), { recursive: true });
    fs.writeFileSync(path.join(root, 'dist/cli/cli.js'), opts.cli);
  }
  return { root, bin: path.join(root, 'bin/orchard') };
}

function run(bin: string, args: string[] = []): Promise<{ pid: number; code: number | null; stdout: string; stderr: string }> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], cwd: os.tmpdir() });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => child.on('close', (code) => resolve({ pid: child.pid!, code, stdout, stderr })));
}

test('without dist/ bin/orchard exits 2 and says to build, naming the checkout', async (t) => {
  const { root, bin } = checkout({ installed: true });
  const r = await run(bin, ['--help']);
  t.is(r.code, 2);
  t.is(r.stderr, `orchard: not_built: run \`npm run build\` in ${root}\n`);
  t.is(r.stdout, '');
});

test('without node_modules/ either, it says to install (which builds)', async (t) => {
  const { root, bin } = checkout({ installed: false });
  const r = await run(bin);
  t.is(r.code, 2);
  t.regex(r.stderr, new RegExp(`^orchard: not_installed: run \`npm install\` in ${root.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} `));
});

test('bin/orchard becomes node running dist/cli/cli.js (same pid, no wrapper), arguments passed through as given', async (t) => {
  const cli =
    'console.log(JSON.stringify({ pid: process.pid, exe: process.execPath, script: process.argv[1], args: process.argv.slice(2), ' +
    'flags: process.execArgv }));\n';
  const { root, bin } = checkout({ installed: true, cli });
  // Through a symlink, as npm links it into node_modules/.bin: the checkout is found from the link's target.
  const linkDir = fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-link-'));
  fs.symlinkSync(bin, path.join(linkDir, 'orchard'));
  const args = ['guard', '--branch', 'orchard/s1', '--', 'git commit -m "two words" && echo $HOME'];
  const r = await run(path.join(linkDir, 'orchard'), args);
  t.is(r.code, 0, r.stderr);
  const seen = JSON.parse(r.stdout) as { pid: number; exe: string; script: string; args: string[]; flags: string[] };
  t.is(seen.pid, r.pid);
  t.is(path.basename(seen.exe), 'node');
  t.is(seen.script, path.join(root, 'dist/cli/cli.js'));
  t.deepEqual(seen.args, args);
  // A one-shot command skips V8's optimizing tier for wasm (the guard's grammar); the worker keeps it.
  t.true(seen.flags.includes('--no-wasm-tier-up'), seen.flags.join(' '));
  const worker = JSON.parse((await run(bin, ['worker', '--host-only'])).stdout) as { args: string[]; flags: string[] };
  t.deepEqual(worker.args, ['worker', '--host-only']);
  t.deepEqual(worker.flags, []);
});
