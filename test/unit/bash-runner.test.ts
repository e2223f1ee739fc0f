import test from 'ava';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { buildCommandEnv, isForbiddenEnvName, sessionHomeDir } from '../../activities/bash/env';
import { aliveInGroup, currentBootId, parseStat } from '../../activities/bash/process-tree';
import { BoundedOutput, runBash, type RunBashInput, type SpawnInfo } from '../../activities/bash/runner';
import { startSpawner } from '../../activities/bash/spawner';

// Commands start as a worker's do, through its spawner (activities/bash/spawner.ts); ORCHARD_SPAWNER=off runs this
// suite on the direct start.
startSpawner();

const root = mkdtempSync(path.join(tmpdir(), 'orchard-runner-'));
test.after.always(() => rmSync(root, { recursive: true, force: true }));
const worktree = path.join(root, 'sess-1');
mkdirSync(worktree);
const env = buildCommandEnv({ worktree, sessionId: 'sess-1', branch: 'orchard/sess-1' });

const run = (command: string, extra: Partial<RunBashInput> = {}) =>
  runBash({ command, cwd: worktree, env, timeoutMs: 20_000, maxOutputBytes: 64 * 1024, ...extra });

/** Read straight from /proc (not through the module under test): live = exists and not a zombie. */
function liveState(pid: number): { live: boolean; pgid?: number } {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { live: fields[0] !== 'Z' && fields[0] !== 'X', pgid: Number(fields[2]) };
  } catch {
    return { live: false };
  }
}

function liveGroupMembers(pgid: number): number[] {
  const live: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const state = liveState(Number(name));
    if (state.live && state.pgid === pgid) live.push(Number(name));
  }
  return live;
}

function pidsIn(text: string): number[] {
  return [...text.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));
}

test('exit code, stdout and stderr are captured', async (t) => {
  const r = await run('echo out; echo err >&2; exit 3');
  t.is(r.exitCode, 3);
  t.is(r.signal, null);
  t.is(r.stdout, 'out\n');
  t.is(r.stderr, 'err\n');
  t.false(r.timedOut);
  t.false(r.cancelled);
  t.false(r.stdoutTruncated);
  t.true(typeof r.pgid === 'number');
  t.deepEqual(r.remaining, []);
});

test('the command runs in the worktree with stdin closed', async (t) => {
  const r = await run('pwd; cat; echo "stdin-done"');
  t.is(r.exitCode, 0);
  t.is(r.stdout, `${worktree}\nstdin-done\n`);
});

test('the command gets its own process group and session', async (t) => {
  const r = await run('ps -o pgid= -p $$; ps -o sid= -p $$; echo $$');
  const [pgid, sid, pid] = r.stdout
    .trim()
    .split('\n')
    .map((s) => Number(s.trim()));
  t.is(pgid, pid);
  t.is(sid, pid);
  t.is(r.pgid, pid);
});

test('long output keeps head and tail with a truncation marker', async (t) => {
  const r = await run('for i in $(seq 1 20000); do echo "line $i"; done; echo tail-end', { maxOutputBytes: 1000 });
  t.true(r.stdoutTruncated);
  t.true(r.stdout.startsWith('line 1\nline 2\n'));
  t.true(r.stdout.endsWith('line 20000\ntail-end\n'));
  const marker = /\[… (\d+) bytes truncated …\]/.exec(r.stdout);
  t.truthy(marker);
  const total = Buffer.byteLength(Array.from({ length: 20000 }, (_, i) => `line ${i + 1}\n`).join('') + 'tail-end\n');
  const kept = Buffer.byteLength(r.stdout.replace(/\n?\[… \d+ bytes truncated …\]\n/, ''));
  t.is(Number(marker?.[1]), total - kept);
  t.true(kept <= 1000);
});

test('truncation does not split UTF-8 characters', (t) => {
  const out = new BoundedOutput(11);
  out.push(Buffer.from('ééééééééééééééééééé', 'utf8'));
  const text = out.toString();
  t.false(text.includes('\uFFFD'));
  t.regex(text, /^é+\n\[… \d+ bytes truncated …\]\né+$/);
});

test('a timeout kills the group and resolves with timedOut', async (t) => {
  const started = Date.now();
  const r = await run('echo started; sleep 300 & echo "pid=$!"; sleep 300', { timeoutMs: 500 });
  t.true(r.timedOut);
  t.false(r.cancelled);
  t.is(r.exitCode, null);
  t.truthy(r.signal);
  t.true(r.stdout.startsWith('started\n'));
  t.true(Date.now() - started < 10_000);
  t.deepEqual(liveGroupMembers(r.pgid as number), []);
  for (const pid of pidsIn(r.stdout)) t.false(liveState(pid).live, `pid ${pid} survived`);
});

test('abort kills a command with grandchildren, and nothing of the group or its recorded tree survives', async (t) => {
  const controller = new AbortController();
  let spawned: number | undefined;
  const ticks: number[] = [];
  const pending = run(
    'sleep 300 & echo "pid=$!"; sleep 300 & echo "pid=$!"; (sleep 300 & echo "pid=$!"); ' +
      'setsid env -i /bin/sleep 300 >/dev/null 2>&1 3<&- & echo "pid=$!"; wait',
    {
      signal: controller.signal,
      onSpawn: (info) => {
        spawned = info.pgid;
      },
      onTick: () => ticks.push(Date.now()),
      tickMs: 50,
      snapshotMs: 50,
    },
  );
  await new Promise((resolve) => setTimeout(resolve, 700));
  t.truthy(spawned);
  t.true(liveGroupMembers(spawned as number).length >= 3);
  controller.abort();
  const r = await pending;
  t.true(r.cancelled);
  t.false(r.timedOut);
  t.is(r.pgid, spawned as number);
  t.true(ticks.length >= 2);
  const pids = pidsIn(r.stdout);
  t.is(pids.length, 4);
  // The setsid'd sleep left the group and carries none of the command's marks (no stdout, no tag fd, no
  // marker variable): only the ancestry recorded while the leader was alive finds it.
  t.deepEqual(liveGroupMembers(spawned as number), []);
  t.deepEqual(await aliveInGroup(spawned as number), []);
  for (const pid of pids) t.false(liveState(pid).live, `pid ${pid} survived`);
  for (const pid of r.trackedPids) t.false(liveState(pid).live, `tracked pid ${pid} survived`);
  t.true(pids.every((p) => r.trackedPids.includes(p)));
  t.deepEqual(r.remaining, []);
});

test('an already aborted signal runs nothing', async (t) => {
  const controller = new AbortController();
  controller.abort();
  const marker = path.join(root, 'should-not-exist');
  const r = await run(`touch ${marker}`, { signal: controller.signal });
  t.true(r.cancelled);
  t.is(r.pgid, null);
  t.throws(() => readFileSync(marker));
});

test('a background child left running after a normal exit is cleaned up', async (t) => {
  const r = await run('sleep 300 >/dev/null 2>&1 & echo "pid=$!"; echo done');
  t.is(r.exitCode, 0);
  t.false(r.timedOut);
  const [pid] = pidsIn(r.stdout);
  t.truthy(pid);
  t.false(liveState(pid).live);
  t.deepEqual(liveGroupMembers(r.pgid as number), []);
});

test('a background process holding stdout open does not hang the runner', async (t) => {
  const started = Date.now();
  const r = await run('sleep 300 & echo "pid=$!"; echo leader-done');
  t.is(r.exitCode, 0);
  t.true(r.stdout.includes('leader-done'));
  // Far below the 300 s the holder would keep the pipe open; loose enough for a loaded 2-core CI machine.
  t.true(Date.now() - started < 60_000, `took ${Date.now() - started} ms`);
  for (const pid of pidsIn(r.stdout)) t.false(liveState(pid).live);
});

test('a detached process that keeps stdout does not hang the runner and is killed', async (t) => {
  const started = Date.now();
  const r = await run('setsid env -i /bin/sleep 300 & echo "pid=$!"', { snapshotMs: 60_000 });
  t.is(r.exitCode, 0);
  t.true(Date.now() - started < 60_000, `took ${Date.now() - started} ms`);
  const [pid] = pidsIn(r.stdout);
  t.false(liveState(pid).live, `escaped pid ${pid} survived`);
});

// Double fork + setsid: re-parented to init at once, out of the group, the session and the recorded tree.
const escapes: [string, string][] = [
  ['the inherited tag fd', '(setsid env -i /bin/sleep 300 >/dev/null 2>&1 & echo "pid=$!"); echo forked'],
  ['its marker variable', '(setsid /bin/sleep 300 >/dev/null 2>&1 3<&- & echo "pid=$!"); echo forked'],
];
for (const [mark, command] of escapes) {
  test(`a double-forked, detached process with redirected output is found by ${mark} and killed`, async (t) => {
    const r = await run(command, { snapshotMs: 60_000 });
    t.is(r.exitCode, 0);
    const [pid] = pidsIn(r.stdout);
    t.truthy(pid);
    t.false(liveState(pid).live, `escaped pid ${pid} survived`);
  });
}

test('a process ignoring SIGTERM is killed with SIGKILL after the grace period', async (t) => {
  const r = await run('trap "" TERM; echo ready; sleep 300 & echo "pid=$!"; wait', {
    timeoutMs: 300,
    kill: { graceMs: 200, pollMs: 20, timeoutMs: 5000 },
  });
  t.true(r.timedOut);
  t.deepEqual(r.remaining, []);
  for (const pid of pidsIn(r.stdout)) t.false(liveState(pid).live);
  t.deepEqual(liveGroupMembers(r.pgid as number), []);
});

test('when onSpawn rejects, the command never runs: its file never appears and nothing of it is left', async (t) => {
  const file = path.join(root, 'gate-refused');
  let info: SpawnInfo | undefined;
  const r = await run(`touch ${file}`, {
    onSpawn: async (i) => {
      info = i;
      throw new Error('database unavailable');
    },
  });
  t.true(r.notStarted);
  t.regex(r.notStartedReason ?? '', /database unavailable/);
  t.false(r.cancelled);
  t.is(r.exitCode, null);
  t.is(r.pgid, info!.pgid);
  t.deepEqual(r.remaining, []);
  t.false(liveState(info!.pgid).live);
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.false(existsSync(file), 'the refused command ran');
});

test('a slow onSpawn holds the command at the gate: its file appears only after onSpawn resolved', async (t) => {
  const file = path.join(root, 'gate-slow');
  let resolvedAt = 0;
  let presentWhileRecording = true;
  const r = await run(`date +%s%N > ${file}`, {
    onSpawn: async () => {
      await new Promise((resolve) => setTimeout(resolve, 700));
      presentWhileRecording = existsSync(file);
      resolvedAt = Date.now();
    },
  });
  t.is(r.exitCode, 0);
  t.false(r.notStarted);
  t.false(presentWhileRecording, 'the command ran before onSpawn resolved');
  const writtenAtMs = Number(BigInt(readFileSync(file, 'utf8').trim()) / 1_000_000n);
  t.true(writtenAtMs >= resolvedAt, `written at ${writtenAtMs}, onSpawn resolved at ${resolvedAt}`);
});

test('onSpawn gets the identity the command runs with: its group, boot id, start time and marker', async (t) => {
  let info: SpawnInfo | undefined;
  let statAtSpawn = '';
  const r = await run('echo "$$ $ORCHARD_RUN_ID"; cat /proc/$$/stat', {
    onSpawn: (i) => {
      info = i;
      statAtSpawn = readFileSync(`/proc/${i.pgid}/stat`, 'utf8');
    },
  });
  const [first, stat] = r.stdout.split('\n');
  const [pid, marker] = first.split(' ');
  t.is(Number(pid), info!.pgid);
  t.is(marker, info!.marker);
  t.is(info!.bootId, readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
  t.is(info!.bootId, currentBootId());
  // The same process before and after the gate's exec: same start time (field 22).
  const startTime = (text: string) => Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[19]);
  t.is(startTime(statAtSpawn), info!.startTime);
  t.is(startTime(stat), info!.startTime);
});

test('through the gate, bash -c keeps $0, exit codes, syntax errors and fds; the gate fd is closed', async (t) => {
  // A builtin test, before any pipeline: a pipeline's own pipes (opened by this bash) could take fd 4 meanwhile.
  const r = await run('echo "$0 $SHLVL"; if [ -e /proc/$$/fd/4 ]; then echo gate-open; else echo gate-closed; fi; exit 7');
  t.is(r.exitCode, 7);
  const [zero, gate] = r.stdout.split('\n');
  t.is(zero, 'bash 1');
  t.is(gate, 'gate-closed');
  const syntax = await run('if then');
  t.is(syntax.exitCode, 2);
  t.regex(syntax.stderr, /^bash: -c: line 1: syntax error/);
});

test('an abort while onSpawn is pending: the command never runs and the result is cancelled', async (t) => {
  const file = path.join(root, 'gate-aborted');
  const controller = new AbortController();
  const r = await run(`touch ${file}`, {
    signal: controller.signal,
    onSpawn: () => {
      controller.abort();
      return new Promise(() => undefined); // never records
    },
  });
  t.true(r.cancelled);
  t.true(r.notStarted);
  t.deepEqual(r.remaining, []);
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.false(existsSync(file));
});

test('a missing cwd rejects', async (t) => {
  await t.throwsAsync(run('true', { cwd: path.join(root, 'nope') }));
});

test('parseStat handles a comm with spaces and parentheses', (t) => {
  const p = parseStat('4242 (we(ird) ) name)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0');
  t.like(p, { pid: 4242, comm: 'we(ird) ) name)', state: 'S', ppid: 1, pgid: 4242, sid: 4242, startTime: 12345 });
});

test('the command environment is built: no worker secrets, names or values', async (t) => {
  const secrets: Record<string, string> = {
    DATABASE_URL: 'postgres://u:hunter2-db@db/orchard',
    ORCHARD_MODEL_API_KEY: 'sk-model-secret-123',
    TEMPORAL_ADDRESS: 'temporal.internal:7233',
    AWS_SECRET_ACCESS_KEY: 'aws-secret-xyz',
    OPENAI_API_KEY: 'sk-openai-456',
    GITHUB_TOKEN: 'ghp_token_789',
  };
  Object.assign(process.env, secrets);
  try {
    const built = buildCommandEnv({ worktree, sessionId: 'sess-1', branch: 'orchard/sess-1' });
    const r = await runBash({ command: 'env', cwd: worktree, env: built, timeoutMs: 10_000, maxOutputBytes: 1 << 20 });
    t.is(r.exitCode, 0);
    for (const [name, value] of Object.entries(secrets)) {
      t.false(r.stdout.includes(name), `${name} leaked`);
      t.false(r.stdout.includes(value), `value of ${name} leaked`);
    }
    t.false(/^TEMPORAL_/m.test(r.stdout));
    t.true(r.stdout.includes('ORCHARD_SESSION_ID=sess-1\n'));
    t.true(r.stdout.includes('ORCHARD_BRANCH=orchard/sess-1\n'));
    t.true(r.stdout.includes(`HOME=${sessionHomeDir(worktree, 'sess-1')}\n`));
    t.true(r.stdout.includes('GIT_TERMINAL_PROMPT=0\n'));
    t.true(r.stdout.includes('GIT_AUTHOR_EMAIL=agent+sess-1@orchard.invalid\n'));
    t.true(r.stdout.includes('LC_ALL=C.UTF-8\n'));
  } finally {
    for (const name of Object.keys(secrets)) delete process.env[name];
  }
});

test('extra variables with forbidden names are refused', (t) => {
  t.throws(() => buildCommandEnv({ worktree, sessionId: 's', branch: 'orchard/s', extra: { DATABASE_URL: 'x' } }));
  t.throws(() => buildCommandEnv({ worktree, sessionId: 's', branch: 'orchard/s', extra: { GIT_DIR: '/x' } }));
  t.throws(() => buildCommandEnv({ worktree, sessionId: 's', branch: 'orchard/s', extra: { NPM_TOKEN: 'x' } }));
  const ok = buildCommandEnv({ worktree, sessionId: 's', branch: 'orchard/s', extra: { FOO: 'bar' } });
  t.is(ok.FOO, 'bar');
  t.true(isForbiddenEnvName('TEMPORAL_API_KEY'));
  t.true(isForbiddenEnvName('PGPASSWORD'));
  t.false(isForbiddenEnvName('PATH'));
});

test('while a command runs, each tick reports the last 2 KB of what it wrote so far (stdout and stderr)', async (t) => {
  const ticks: string[] = [];
  const result = await run("head -c 5000 /dev/zero | tr '\\0' x; echo; echo 'to stderr' >&2; sleep 0.3; echo 'END-MARKER'; sleep 1.5", {
    tickMs: 100,
    onTick: ({ outputTail }) => ticks.push(outputTail),
  });
  t.is(result.exitCode, 0);
  const whileRunning = ticks.filter((tail) => tail.endsWith('END-MARKER\n'));
  t.true(whileRunning.length > 0, `no tick saw the output: ${JSON.stringify(ticks.map((tail) => tail.slice(-30)))}`);
  for (const tail of ticks) t.true(Buffer.byteLength(tail) <= 2048, `a tail of ${Buffer.byteLength(tail)} bytes`);
  t.true(whileRunning[0].includes('to stderr'));
  t.regex(whileRunning[0], /^x+\n/);
  t.is(Buffer.byteLength(whileRunning[0]), 2048);
});

/**
 * A sandbox that reports a pid namespace (bwrap's `--info-fd` JSON) lets teardown skip its /proc scan only when the
 * report, the group and the tracked tree prove the command gone. This stand-in for bwrap makes no namespace and says
 * what each case needs, so each proof step is the one that must refuse: the process it leaves must still be killed.
 */
// The left process closes fd 5: a report still open when the leader exits is never trusted.
const misreports: Array<[string, string, Partial<RunBashInput>?]> = [
  [
    "the reported pid 1 still runs (outside the leader's group)",
    'setsid sleep 60 5>&- & echo "pid=$!"; printf \'{"child-pid": %s, "pid-namespace": 1}\' $! >&5',
  ],
  [
    "pid 1 reported gone, but a process is left in the leader's group",
    'true & p=$!; wait $p; sleep 60 5>&- & echo "pid=$!"; printf \'{"child-pid": %s, "pid-namespace": 1}\' $p >&5',
  ],
  [
    'pid 1 reported gone, but the scanner tracked a process that left the group',
    'true & p=$!; wait $p; setsid sleep 60 5>&- & echo "pid=$!"; sleep 0.6; printf \'{"child-pid": %s, "pid-namespace": 1}\' $p >&5',
    { snapshotMs: 50 },
  ],
  ['the report names no pid namespace', 'true & p=$!; wait $p; setsid sleep 60 5>&- & echo "pid=$!"; printf \'{"child-pid": %s, "mnt-namespace": 1}\' $p >&5'],
];
// The same misreports for a command stopped before it ended (a cancel): each left process must be killed all the same.
for (const [name, script, extra] of misreports) {
  test(`a cancelled sandbox's namespace report is checked before teardown trusts it: ${name}`, async (t) => {
    const running = `${script}; sleep 30`;
    const abort = new AbortController();
    const r = await run(running, {
      argv: ['bash', '-c', running, '--info-fd', '5'],
      ...extra,
      signal: abort.signal,
      tickMs: 50,
      // After the report is written (one case writes it 0.6 s after the pid).
      onTick: ({ outputTail }) => void (/pid=\d+/.test(outputTail) && setTimeout(() => abort.abort(), 700)),
    });
    t.true(r.cancelled);
    const pids = pidsIn(r.stdout);
    t.is(pids.length, 1);
    t.deepEqual(r.remaining, []);
    for (const pid of pids) t.false(liveState(pid).live, `pid ${pid} outlived the command`);
  });
}
for (const [name, script, extra] of misreports) {
  test(`a sandbox's namespace report is checked before teardown trusts it: ${name}`, async (t) => {
    const r = await run(script, { argv: ['bash', '-c', script, '--info-fd', '5'], ...extra });
    t.is(r.exitCode, 0, r.stderr);
    const pids = pidsIn(r.stdout);
    t.is(pids.length, 1);
    t.deepEqual(r.remaining, []);
    for (const pid of pids) t.false(liveState(pid).live, `pid ${pid} outlived the command`);
  });
}
