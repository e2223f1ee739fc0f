import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { runBash } from '../../activities/bash/runner';
import { FileRunError, runFile, runFileText, spawnerPid, startSpawner } from '../../activities/bash/spawner';
import { readProcessSync } from '../../activities/bash/process-tree';
import { git, gitStatus } from '../../activities/git/repo-tools';
import { gitIn } from '../helpers/git';

/**
 * The worker's commands are started by its spawner (activities/bash/spawner.ts), a small process, so that a start
 * does not fork the whole worker on its event loop. What that must not change: the command's group is still torn
 * down, a dead spawner ends its commands as killed and the next command gets a new one, and a dead worker still takes
 * its sandboxed commands with it.
 */

startSpawner(); // as a worker's host activities do

const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const run = (command: string, extra: Partial<Parameters<typeof runBash>[0]> = {}) =>
  runBash({ command, cwd: '/tmp', env, timeoutMs: 60_000, maxOutputBytes: 10_000, ...extra });
const alive = (pid: number) => {
  const p = readProcessSync(pid);
  return p !== undefined && p.state !== 'Z' && p.state !== 'X';
};
const until = async (what: string, check: () => boolean, ms = 10_000) => {
  for (const end = Date.now() + ms; !check(); await new Promise((r) => setTimeout(r, 20))) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
  }
};

test.serial('a command is started by the spawner, not by the worker', async (t) => {
  const r = await run('echo $PPID');
  t.is(r.exitCode, 0, r.stderr);
  const parent = Number(r.stdout.trim());
  t.not(parent, process.pid);
  t.is(parent, spawnerPid() ?? -1);
  t.regex(readFileSync(`/proc/${parent}/cmdline`, 'utf8'), /spawner-helper\.cjs/);
});

test.serial('a dead spawner ends its running commands as killed, with their groups torn down, and the next command gets a new one', async (t) => {
  await run('true');
  const first = spawnerPid();
  if (first === undefined) return t.fail('no spawner runs');
  let sleeper: number | undefined;
  const result = run('sleep 60 & echo "pid=$!"; wait', {
    tickMs: 50,
    onTick: ({ outputTail }) => {
      const m = outputTail.match(/pid=(\d+)/);
      if (m && sleeper === undefined) {
        sleeper = Number(m[1]);
        process.kill(first, 'SIGKILL');
      }
    },
  });
  const r = await result;
  t.is(r.signal, 'SIGKILL');
  t.deepEqual(r.remaining, []);
  t.truthy(sleeper);
  t.false(alive(sleeper!), 'the command’s background process was torn down');
  const next = await run('echo $PPID');
  t.is(next.exitCode, 0, next.stderr);
  t.not(spawnerPid(), first);
  t.is(Number(next.stdout.trim()), spawnerPid() ?? -1);
});

test.serial('a dead worker takes its sandboxed command with it: the spawner exits, and bwrap with it', async (t) => {
  const sandbox = [
    'bwrap',
    '--unshare-user',
    '--unshare-pid',
    '--as-pid-1',
    '--die-with-parent',
    '--ro-bind',
    '/',
    '/',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--',
  ];
  const worker = spawn(process.execPath, ['--import', 'tsx', join(__dirname, '..', 'helpers', 'spawner-worker.ts'), ...sandbox, 'sleep', '60'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  worker.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  await until('the sandboxed command runs', () => /running \d+/.test(out), 30_000);
  const bwrap = Number(out.match(/running (\d+)/)![1]);
  const helper = readProcessSync(bwrap)?.ppid;
  if (helper === undefined) return t.fail('bwrap is gone already');
  t.not(helper, worker.pid, 'the spawner, not the worker, started it');
  const inside = readFileSync(`/proc/${bwrap}/task/${bwrap}/children`, 'utf8').trim().split(' ').map(Number);
  t.is(inside.length, 1);

  worker.kill('SIGKILL');
  await until('the spawner exits', () => !alive(helper));
  await until('bwrap and the command in its namespace are gone', () => !alive(bwrap) && inside.every((pid) => !alive(pid)));
  t.pass();
});

test.serial("the worker's own git calls go through the spawner too: output, stdin, an exit code it accepts, and one it does not", async (t) => {
  const repo = mkdtempSync(join(tmpdir(), 'orchard-spawner-git-'));
  t.teardown(() => rmSync(repo, { recursive: true, force: true }));
  gitIn(repo, 'init', '-q', '-b', 'main');
  writeFileSync(join(repo, 'a.txt'), 'a\n');
  t.regex(await gitStatus(repo), /a\.txt/);
  // `git hash-object --stdin`: what the worker writes is what git read.
  t.is((await git(repo, ['hash-object', '--stdin'], [], 'hello\n')).trim(), 'ce013625030ba8dba906f756967f9e9ca394464a');
  t.is((await git(repo, ['rev-parse', '--verify', '--quiet', 'nothing'], [1])).trim(), '');
  await t.throwsAsync(git(repo, ['rev-parse', '--verify', 'nothing']), { message: /exited with 128/ });
  // git's parent (field 4 of its stat, read by an alias's shell whose parent git is) is the spawner, not this worker.
  const parent = Number((await git(repo, ['-c', "alias.parent=!cut -d' ' -f4 /proc/$PPID/stat", 'parent'])).trim());
  t.is(parent, spawnerPid() ?? -1);
});

test.serial('a command that writes faster than the worker reads is held back by its pipe, not queued in the spawner', async (t) => {
  let stalled = false;
  const r = await run('head -c 300000000 /dev/zero; echo done >&2', {
    maxOutputBytes: 64 * 1024,
    tickMs: 20,
    // The worker busy for 1.5 s while the command writes: whatever the spawner reads meanwhile waits in its memory.
    onTick: ({ outputTail }) => {
      if (stalled || outputTail.length === 0) return;
      stalled = true;
      for (const end = Date.now() + 1500; Date.now() < end;);
    },
  });
  t.is(r.exitCode, 0, r.stderr);
  t.true(r.stdoutTruncated);
  // 300 MB went through; the spawner's peak memory stayed far below it (with the pause removed: 395 MB measured).
  const peakKb = Number(readFileSync(`/proc/${spawnerPid()}/status`, 'utf8').match(/VmHWM:\s+(\d+)/)?.[1]);
  t.true(peakKb < 180 * 1024, `the spawner's peak RSS was ${peakKb} kB`);
});

test.serial('runFile through the spawner: any exit code is an answer; past its time or its output bound, the program is killed and it rejects', async (t) => {
  const parent = await runFile('sh', ['-c', 'cut -d" " -f4 /proc/$$/stat; echo err >&2; exit 3']);
  t.deepEqual(parent, { code: 3, stdout: `${spawnerPid()}\n`, stderr: 'err\n' });
  const slow = runFile('sh', ['-c', 'echo $$; exec sleep 30'], { timeoutMs: 300 });
  await t.throwsAsync(slow, { instanceOf: FileRunError, message: /ran past 300 ms and was killed/ });
  await t.throwsAsync(runFile('head', ['-c', '100000', '/dev/zero'], { maxBuffer: 1000 }), { message: /wrote more than 1000 bytes/ });
  await t.throwsAsync(runFileText('git', ['rev-parse', '--verify', 'nothing'], { cwd: tmpdir() }), { instanceOf: FileRunError, message: /fatal/ });
});
