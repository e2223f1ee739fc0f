import { randomUUID } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import type { CommandSlots } from './command-slots';
import {
  currentBootId,
  fdLinksSync,
  isLive,
  killGroupAndWait,
  listProcesses,
  openProcessTag,
  processesCarrying,
  ProcessScanner,
  readProcessSync,
  recordTree,
  sendSignal,
  sharedProcessScanner,
  track,
  type ProcessTag,
  type TrackedProcesses,
} from './process-tree';
import { spawnCommand } from './spawner';

/**
 * Keeps at most `maxBytes` of a stream: the first half and the last half, with a marker line for what was
 * dropped between them. Memory stays bounded however much the command writes.
 */
export class BoundedOutput {
  private readonly headLimit: number;
  private readonly tailLimit: number;
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  private total = 0;

  constructor(readonly maxBytes: number) {
    const max = Math.max(0, Math.floor(maxBytes));
    this.headLimit = Math.ceil(max / 2);
    this.tailLimit = max - this.headLimit;
  }

  push(chunk: Buffer): void {
    this.total += chunk.length;
    let rest = chunk;
    if (this.headBytes < this.headLimit) {
      const take = Math.min(this.headLimit - this.headBytes, rest.length);
      this.head.push(rest.subarray(0, take));
      this.headBytes += take;
      rest = rest.subarray(take);
    }
    if (rest.length === 0 || this.tailLimit === 0) return;
    this.tail.push(rest);
    this.tailBytes += rest.length;
    while (this.tail.length > 1 && this.tailBytes - this.tail[0].length >= this.tailLimit) {
      this.tailBytes -= (this.tail.shift() as Buffer).length;
    }
  }

  get totalBytes(): number {
    return this.total;
  }

  get truncated(): boolean {
    return this.total > this.headLimit + this.tailLimit;
  }

  toString(): string {
    const head = Buffer.concat(this.head);
    let tail = Buffer.concat(this.tail);
    if (!this.truncated) return Buffer.concat([head, tail]).toString('utf8');
    tail = tail.subarray(tail.length - this.tailLimit);
    // Cut at character boundaries so the kept text has no replacement characters at the seams.
    const keptHead = head.subarray(0, utf8SafeEnd(head));
    const keptTail = tail.subarray(utf8SafeStart(tail));
    const dropped = this.total - keptHead.length - keptTail.length;
    const text = keptHead.toString('utf8');
    const sep = text === '' || text.endsWith('\n') ? '' : '\n';
    return `${text}${sep}[… ${dropped} bytes truncated …]\n${keptTail.toString('utf8')}`;
  }
}

/** How much of a running command's latest output a tick reports (heartbeat details stay small). */
const OUTPUT_TAIL_BYTES = 2048;

/** The last `maxBytes` of what a command wrote (stdout and stderr as they arrived), for progress reports. */
class OutputTail {
  private buf = Buffer.alloc(0);

  constructor(private readonly maxBytes: number) {}

  push(chunk: Buffer): void {
    const joined = Buffer.concat([this.buf, chunk]);
    this.buf = joined.length > this.maxBytes ? joined.subarray(joined.length - this.maxBytes) : joined;
  }

  toString(): string {
    return this.buf.subarray(utf8SafeStart(this.buf)).toString('utf8');
  }
}

/** Length of `buf` without a trailing incomplete UTF-8 sequence. */
export function utf8SafeEnd(buf: Buffer): number {
  for (let i = buf.length - 1; i >= 0 && i >= buf.length - 4; i--) {
    const b = buf[i];
    if ((b & 0xc0) === 0x80) continue; // continuation byte: keep looking for the lead byte
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return buf.length - i >= need ? buf.length : i;
  }
  return buf.length;
}

/** Offset of the first byte of `buf` that is not a stray continuation byte. */
function utf8SafeStart(buf: Buffer): number {
  let i = 0;
  while (i < buf.length && i < 3 && (buf[i] & 0xc0) === 0x80) i++;
  return i;
}

export interface RunBashInput {
  command: string;
  /**
   * The program that runs the command, when it is not plain `bash -c <command>`: a full argv that ends with the
   * command (the sandbox's `bwrap … -- bash -c <command>`). The gate goes right after its first `--`, so the sandbox is
   * set up while the group is recorded and the command's own code still waits; without a `--`, in front of it.
   */
  argv?: readonly string[];
  /** The worktree. */
  cwd: string;
  /** The complete environment (buildCommandEnv); nothing is inherited from the worker. ORCHARD_RUN_ID is added. */
  env: Record<string, string>;
  /** The command's time bound, counted from the moment its own code may start (after onSpawn). */
  timeoutMs: number;
  /** Kept per stream (head + tail). */
  maxOutputBytes: number;
  signal?: AbortSignal;
  /**
   * Called every tickMs from the call until it returns: while it waits for a slot, while the group is recorded,
   * while the command runs and while it is torn down (the activity heartbeats here), with the last
   * OUTPUT_TAIL_BYTES of what the command wrote so far.
   */
  onTick?: (progress: { outputTail: string }) => void;
  tickMs?: number;
  /**
   * Awaited after the spawn and before any of the command's own code runs (the process waits at a gate): record
   * the group here, so a crash of this worker can never leave an unrecorded command behind. When it rejects, the
   * command never runs and the result has `notStarted`.
   */
  onSpawn?: (info: SpawnInfo) => void | Promise<void>;
  /** The host's command cap: the call waits (heartbeating, cancellable) until a slot is free. */
  slots?: CommandSlots;
  /** Whose /proc scans record the tree while the command runs: by default the worker's shared one. */
  scanner?: ProcessScanner;
  /** A private scanner at this interval instead of the shared one (tests that need another cadence). */
  snapshotMs?: number;
  /** Teardown: SIGTERM → graceMs → SIGKILL, polling every pollMs, giving up after timeoutMs. */
  kill?: { graceMs?: number; pollMs?: number; timeoutMs?: number };
}

/** What identifies a command's processes later, from another worker too (see the reaper). */
export interface SpawnInfo {
  /** The command's process group: the leader's pid. */
  pgid: number;
  /** The boot the start time counts in (/proc/sys/kernel/random/boot_id). */
  bootId: string;
  /** The leader's start time (field 22 of /proc/<pid>/stat): tells it from a later process that reuses the pid. */
  startTime: number;
  /** The value of RUN_MARKER_ENV that every process of the command inherits. */
  marker: string;
}

export interface RunBashResult {
  /** null when the command was killed by a signal (or never started). */
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  timedOut: boolean;
  cancelled: boolean;
  /** None of the command's own code ran: cancelled before it could start, or onSpawn rejected. */
  notStarted: boolean;
  /** Why it did not start, when notStarted. */
  notStartedReason?: string;
  durationMs: number;
  /** The command's process group; null when nothing was spawned (cancelled before, or while waiting for a slot). */
  pgid: number | null;
  /** Processes of the command still alive after teardown gave up (e.g. stuck in D state); normally empty. */
  remaining: number[];
  /** Every pid recorded as part of the command's tree (for diagnostics and tests). */
  trackedPids: number[];
}

/**
 * Added to the environment of every command (the one variable not from `env`): a unique value that lets teardown
 * recognise descendants that left both the process group and the tree (see process-tree.ts).
 */
export const RUN_MARKER_ENV = 'ORCHARD_RUN_ID';
const DEFAULT_TICK_MS = 1000;
const DEFAULT_KILL = { graceMs: 1000, pollMs: 50, timeoutMs: 5000 };
/** After the group is gone the streams reach EOF at once; this only bounds an untracked holder of them. */
const STREAM_CLOSE_GRACE_MS = 500;
/** The gate's descriptor in the spawned process (0-2 are stdio, 3 is the tag). */
const GATE_FD = 4;
/**
 * Where a sandbox reports its pid namespace: an argv that asks for bwrap's info on this descriptor (`--info-fd 5`,
 * buildSandboxArgv's `infoFd`) gets a pipe there, and the runner reads the host pid of the namespace's pid 1 from it.
 */
export const NAMESPACE_INFO_FD = 5;
/**
 * What runs first, in /bin/sh (dash on Debian starts about 1 ms sooner than bash, and this runs before every command): wait
 * for the line `1` on the gate, close it, then become `bash -c <command>` in the same process (exec keeps pid, process
 * group, session, fds and environment; $0 is `bash` and SHLVL counts one shell, as for a bare `bash -c`). When the
 * gate closes without the line (onSpawn rejected, or this worker died), sh exits and no code of the command has run.
 */
const GATE_SCRIPT = `read -r go <&${GATE_FD} && [ "$go" = 1 ] || exit 125; exec ${GATE_FD}<&-; exec bash -c "$1"`;
/**
 * The same gate in front of a given argv (`$@`). In a sandbox's argv it runs inside, as the namespace's pid 1, after
 * bwrap built the namespace (3-4 ms here, overlapping onSpawn's record) and before the command: bwrap passes the gate's
 * descriptor on like any inherited one. Elsewhere it runs in front, and the program replaces it, keeping its group.
 */
const GATE_ARGV_SCRIPT = `read -r go <&${GATE_FD} && [ "$go" = 1 ] || exit 125; exec ${GATE_FD}<&-; exec "$@"`;
/** What the worker writes to open the gate (a whole line: sh's `read` fails on a line without its newline). */
const GATE_OPEN = '1\n';

/**
 * Runs `bash -c <command>` as its own process group and resolves once its output is collected and the whole
 * group (plus every descendant recorded outside it) is verified gone.
 *
 * Nothing outlives the call: when the leader exits, whatever it left running in the background (`sleep 100 &`,
 * a dev server) is killed too. A tool call is one bounded step, the next call must not race a leftover
 * writer in the worktree, and a handoff must be able to prove that no process of the old execution lives.
 *
 * Timeout and abort resolve (never reject) with `timedOut`/`cancelled`, after the same teardown. The only
 * rejection is a failure to spawn (e.g. the cwd does not exist).
 */
export async function runBash(input: RunBashInput): Promise<RunBashResult> {
  const started = performance.now();
  const stdout = new BoundedOutput(input.maxOutputBytes);
  const stderr = new BoundedOutput(input.maxOutputBytes);
  const tail = new OutputTail(OUTPUT_TAIL_BYTES);
  const kill: typeof DEFAULT_KILL = {
    graceMs: input.kill?.graceMs ?? DEFAULT_KILL.graceMs,
    pollMs: input.kill?.pollMs ?? DEFAULT_KILL.pollMs,
    timeoutMs: input.kill?.timeoutMs ?? DEFAULT_KILL.timeoutMs,
  };
  const result = (partial: Partial<RunBashResult>): RunBashResult => ({
    exitCode: null,
    signal: null,
    stdout: stdout.toString(),
    stderr: stderr.toString(),
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
    timedOut: false,
    cancelled: false,
    notStarted: false,
    durationMs: performance.now() - started,
    pgid: null,
    remaining: [],
    trackedPids: [],
    ...partial,
  });

  // Cancelled before it started: the command never runs (a tool call runs at most once, and this is "not at all").
  if (input.signal?.aborted) return result({ cancelled: true, notStarted: true, notStartedReason: 'cancelled before it started' });

  const tick = setInterval(() => {
    try {
      input.onTick?.({ outputTail: tail.toString() });
    } catch {
      // a failed heartbeat must not leave the command unsupervised
    }
  }, input.tickMs ?? DEFAULT_TICK_MS);
  try {
    const release = input.slots ? await input.slots.acquire(input.signal) : () => undefined;
    if (!release) {
      return result({ cancelled: true, notStarted: true, notStartedReason: 'cancelled while waiting for a command slot' });
    }
    try {
      const marker = randomUUID();
      const tag = openProcessTag(marker);
      try {
        return await supervise(input, { marker, tag, stdout, stderr, tail, kill, result });
      } finally {
        tag?.close();
      }
    } finally {
      release();
    }
  } finally {
    clearInterval(tick);
  }
}

interface Run {
  /** Value of RUN_MARKER_ENV for this command. */
  marker: string;
  tag: ProcessTag | undefined;
  stdout: BoundedOutput;
  stderr: BoundedOutput;
  tail: OutputTail;
  kill: typeof DEFAULT_KILL;
  result: (partial: Partial<RunBashResult>) => RunBashResult;
}

async function supervise(input: RunBashInput, run: Run): Promise<RunBashResult> {
  const { marker, tag, stdout, stderr, tail, kill, result } = run;
  const gated = input.argv ? gatedArgv(input.argv) : ['/bin/sh', '-c', GATE_SCRIPT, 'sh', input.command];
  const reportsNamespace = input.argv !== undefined && asksForNamespaceInfo(input.argv);
  // Through the spawner (spawner.ts): a start from the worker itself would block its event loop for a fork of it.
  const child = spawnCommand({
    file: gated[0],
    args: gated.slice(1),
    cwd: input.cwd,
    env: { ...input.env, [RUN_MARKER_ENV]: marker },
    detached: true, // setsid(): own session and process group, pgid = pid
    // fd 3 is the tag (openProcessTag): an empty read-only file the command can ignore. fd 4 is the gate. fd 5, when
    // the sandbox asks for it, is where bwrap reports its pid namespace (bwrap closes it before the command runs).
    stdio: ['ignore', 'pipe', 'pipe', tag ? { path: tag.path } : 'ignore', 'pipe', ...(reportsNamespace ? (['pipe'] as const) : [])],
  });
  const spawnError = await new Promise<Error | undefined>((resolve) => {
    child.once('spawn', () => resolve(undefined));
    child.once('error', (err: Error) => resolve(err));
  });
  tag?.unlink();
  if (spawnError || child.pid === undefined) {
    throw new Error(`could not start bash in ${input.cwd}: ${spawnError?.message ?? 'no pid'}`);
  }
  // The leader's stdout/stderr channels and its identity: it waits at the gate (or, in a sandbox, bwrap builds the
  // namespace before the gate), so it is there to be read unless it failed before the gate.
  const outputLinks = fdLinksSync(child.pid, [1, 2]);
  const leader = readProcessSync(child.pid);
  child.on('error', () => undefined); // e.g. a failed kill(): teardown goes through process-tree, not child.kill
  const pgid = child.pid;
  const out = child.stdout as Readable;
  const err = child.stderr as Readable;
  const gate = child.stdio[GATE_FD] as Writable;
  gate.on('error', () => undefined); // the gate process was killed: teardown reports it
  const namespace = reportsNamespace ? readNamespaceInfo((child.stdio as unknown as Readable[])[NAMESPACE_INFO_FD]) : undefined;

  const tracked: TrackedProcesses = new Map();
  if (leader) track(tracked, [leader]);

  out.on('data', (chunk: Buffer) => {
    stdout.push(chunk);
    tail.push(chunk);
  });
  err.on('data', (chunk: Buffer) => {
    stderr.push(chunk);
    tail.push(chunk);
  });
  const closed = (stream: Readable) =>
    new Promise<void>((resolve) => {
      if (stream.closed) resolve();
      stream.once('close', () => resolve());
      stream.on('error', () => resolve()); // a destroyed pipe must not crash the worker
    });
  const streamsClosed = Promise.all([closed(out), closed(err)]);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode });
    }
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });

  let stopReason: 'timeout' | 'abort' | undefined;
  let stop: (reason: 'timeout' | 'abort') => void = () => undefined;
  const stopped = new Promise<void>((resolve) => {
    stop = (reason) => {
      stopReason ??= reason;
      resolve();
    };
  });
  const onAbort = () => stop('abort');
  input.signal?.addEventListener('abort', onAbort, { once: true });
  if (input.signal?.aborted) stop('abort'); // aborted while we waited for the spawn: the event has been dispatched
  let timeout: NodeJS.Timeout | undefined;
  let unsubscribe: () => void = () => undefined;

  try {
    // Record, then open the gate: the command's own code runs only once its group is on record.
    let notStartedReason: string | undefined;
    if (!leader) {
      const early = child.exitCode ?? child.signalCode;
      notStartedReason = early !== null ? `it ended (${early}) before its gate opened` : 'its process could not be identified in /proc';
    } else {
      const info: SpawnInfo = { pgid, bootId: currentBootId(), startTime: leader.startTime, marker };
      const recorded = Promise.resolve()
        .then(() => input.onSpawn?.(info))
        .then(
          () => undefined,
          (e: unknown) => `recording its process group failed: ${e instanceof Error ? e.message : String(e)}`,
        );
      notStartedReason = await Promise.race([recorded, stopped.then(() => 'cancelled before it started')]);
    }
    if (notStartedReason === undefined) {
      gate.end(GATE_OPEN);
      timeout = setTimeout(() => stop('timeout'), Math.max(0, input.timeoutMs));
      const scanner = input.scanner ?? (input.snapshotMs !== undefined ? new ProcessScanner(input.snapshotMs) : sharedProcessScanner());
      unsubscribe = scanner.subscribe((processes) => recordTree(pgid, tracked, processes));
      await Promise.race([exited, stopped]);
    } else {
      gate.destroy(); // EOF at the gate: bash exits without running the command
    }
    // An abort that arrives during the teardown of a finished command does not make it "cancelled".
    const reason = stopReason;
    clearTimeout(timeout);
    unsubscribe();

    let remaining: number[];
    const proven =
      notStartedReason === undefined &&
      namespace !== undefined &&
      (reason === undefined ? await namespaceGone(namespace, pgid, tracked) : await stopNamespace(namespace, pgid, tracked, kill));
    if (proven) {
      // Proven without a /proc scan: see namespaceGone (and stopNamespace for a command stopped before it ended).
      remaining = [];
    } else {
      // Whatever carries one of the command's marks came from the command, wherever it moved since.
      const fdLinks = [...(tag?.links ?? []), ...outputLinks];
      // One scan serves both: what carries the marks, then the first look of the teardown.
      const scan = await listProcesses();
      track(tracked, await processesCarrying({ fdLinks, env: { name: RUN_MARKER_ENV, value: marker }, startedSince: leader?.startTime }, scan));
      ({ remaining } = await killGroupAndWait(pgid, { ...kill, tracked, scan }));
    }

    // The leader is in the group, so it has exited by now unless teardown gave up on it.
    const exit = await Promise.race([exited, delay(remaining.includes(pgid) ? 0 : kill.timeoutMs)]);
    // With every writer gone the streams reach EOF and deliver what is buffered; an untracked holder
    // (see process-tree.ts) must not hang the call, so close them after a short grace.
    if (!(await Promise.race([streamsClosed.then(() => true), delay(STREAM_CLOSE_GRACE_MS).then(() => false)]))) {
      out.destroy();
      err.destroy();
      await streamsClosed;
    }
    const common = { pgid, remaining, trackedPids: [...tracked.keys()].sort((a, b) => a - b) };
    if (notStartedReason !== undefined) {
      return result({ ...common, notStarted: true, notStartedReason, cancelled: reason === 'abort' });
    }
    return result({
      ...common,
      exitCode: exit ? exit.code : null,
      signal: exit ? exit.signal : null,
      timedOut: reason === 'timeout',
      cancelled: reason === 'abort',
    });
  } finally {
    clearTimeout(timeout);
    unsubscribe();
    input.signal?.removeEventListener('abort', onAbort);
  }
}

/** `argv` with the gate after its first `--` (inside the sandbox), or in front of it when it has none. */
function gatedArgv(argv: readonly string[]): string[] {
  const gate = ['/bin/sh', '-c', GATE_ARGV_SCRIPT, 'sh'];
  const end = argv.indexOf('--');
  return end < 0 ? [...gate, ...argv] : [...argv.slice(0, end + 1), ...gate, ...argv.slice(end + 1)];
}

/** Whether `argv` (a sandbox's, before its `--`) asks for bwrap's info on NAMESPACE_INFO_FD. */
function asksForNamespaceInfo(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  const options = end < 0 ? argv : argv.slice(0, end);
  return options.some((arg, i) => arg === '--info-fd' && options[i + 1] === String(NAMESPACE_INFO_FD));
}

/** What bwrap reported about the command's pid namespace. */
interface NamespaceInfo {
  /** Resolves once bwrap closed the descriptor: whether it reported a new pid namespace, and its pid 1 as seen here. */
  readonly reported: Promise<{ pidNamespace: boolean; root: TrackedRoot | undefined }>;
}

/** The namespace's pid 1 as first seen: its start time, or `gone` when it had already exited and been reaped. */
type TrackedRoot = { pid: number; startTime: number } | { pid: number; gone: true };

/**
 * Reads bwrap's `--info-fd` JSON (`{"child-pid": N, …, "pid-namespace": inode}`). The pid 1's start time is read as
 * soon as its pid arrives, so that a later look can tell it from a process that reuses the pid.
 */
function readNamespaceInfo(stream: Readable): NamespaceInfo {
  let text = '';
  let root: TrackedRoot | undefined;
  const reported = new Promise<{ pidNamespace: boolean; root: TrackedRoot | undefined }>((resolve) => {
    const done = () => resolve({ pidNamespace: /"pid-namespace":\s*\d+/.test(text), root });
    stream.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
      const pid = text.match(/"child-pid":\s*(\d+)\s*[,}\n]/)?.[1];
      if (root === undefined && pid !== undefined) {
        const info = readProcessSync(Number(pid));
        root = info ? { pid: info.pid, startTime: info.startTime } : { pid: Number(pid), gone: true };
      }
    });
    stream.once('close', done);
    stream.on('error', done);
  });
  return { reported };
}

/**
 * Whether a sandboxed command that ended on its own is proven gone without a /proc scan. Its processes are the leader
 * (bwrap, which starts one process: the namespace's pid 1, the gate and then the command) and that pid 1 with its descendants, which can
 * never leave the pid namespace (no capability, no user namespace of their own); and when a pid namespace's pid 1 exits,
 * the kernel kills every other process in it and waits until all are reaped before pid 1 becomes a zombie. So: the leader
 * has exited (this runner reaped it), no process is left in its group, every process the scanner tracked is gone, and
 * pid 1 is a zombie or gone (absent, or its pid now another process's) ⇒ nothing of the command is alive. With
 * `--as-pid-1` pid 1 is the command itself and bwrap exits only after reaping it, so this holds at once; anything
 * else (no report, pid 1 still running) returns false and the caller scans /proc as for any command.
 * Limit: the scan would also kill a process outside the sandbox that the command handed its tag fd or output pipe over a
 * Unix socket; such a process is not the command's, and it is not looked for here.
 */
async function namespaceGone(namespace: NamespaceInfo, pgid: number, tracked: TrackedProcesses): Promise<boolean> {
  const info = await Promise.race([namespace.reported, delay(STREAM_CLOSE_GRACE_MS)]);
  if (!info?.pidNamespace || !info.root) return false;
  const root = info.root;
  if (!('gone' in root)) {
    const now = readProcessSync(root.pid);
    if (now && now.startTime === root.startTime && isLive(now)) return false;
  }
  try {
    process.kill(-pgid, 0);
    return false; // something is still in the leader's group
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') return false;
  }
  for (const t of tracked.values()) {
    const now = readProcessSync(t.pid);
    if (now && now.startTime === t.startTime && isLive(now)) return false;
  }
  return true;
}

/**
 * Stops a sandboxed command that has not ended (cancelled, timed out) through its pid namespace, without a /proc scan:
 * SIGTERM to the leader's group and to every process the scanner tracked, then, after the grace, SIGKILL to them and
 * to the namespace's pid 1 — whose end takes every process of the namespace with it (bwrap runs it with
 * --die-with-parent, so the leader's end ends it too). Polls `namespaceGone`, which reads a few /proc files, not all
 * of them. False when the report does not allow the proof or the teardown's time ran out: the caller then scans /proc
 * and tears down as for any command. At a hundred cancels at once (a team's reassigns), the scans this saves were
 * most of the worker's teardown time.
 */
async function stopNamespace(namespace: NamespaceInfo, pgid: number, tracked: TrackedProcesses, kill: typeof DEFAULT_KILL): Promise<boolean> {
  const info = await Promise.race([namespace.reported, delay(STREAM_CLOSE_GRACE_MS)]);
  if (!info?.pidNamespace || !info.root) return false;
  const root = info.root;
  const deadline = Date.now() + kill.timeoutMs;
  const signal = (sig: NodeJS.Signals) => {
    sendSignal(-pgid, sig);
    for (const t of [...tracked.values(), ...('gone' in root ? [] : [root])]) {
      const now = readProcessSync(t.pid);
      if (now && now.startTime === t.startTime && isLive(now)) sendSignal(t.pid, sig);
    }
  };
  signal('SIGTERM');
  const graceEnds = Date.now() + kill.graceMs;
  let killed = false;
  for (;;) {
    if (await namespaceGone({ reported: Promise.resolve(info) }, pgid, tracked)) return true;
    if (Date.now() >= deadline) return false;
    if (!killed && Date.now() >= graceEnds) {
      signal('SIGKILL');
      killed = true;
    }
    await delay(kill.pollMs);
  }
}

/** A timer that does not keep the process alive: it only bounds waits that normally end sooner. */
function delay(ms: number): Promise<undefined> {
  return new Promise((resolve) => setTimeout(() => resolve(undefined), ms).unref());
}
