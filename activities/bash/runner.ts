import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import {
  fdLinksSync,
  killGroupAndWait,
  openProcessTag,
  processesCarrying,
  readProcessSync,
  snapshotTree,
  track,
  type ProcessTag,
  type TrackedProcesses,
} from './process-tree';

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
export function utf8SafeStart(buf: Buffer): number {
  let i = 0;
  while (i < buf.length && i < 3 && (buf[i] & 0xc0) === 0x80) i++;
  return i;
}

export interface RunBashInput {
  command: string;
  /** The worktree. */
  cwd: string;
  /** The complete environment (buildCommandEnv); nothing is inherited from the worker. ORCHARD_RUN_ID is added. */
  env: Record<string, string>;
  timeoutMs: number;
  /** Kept per stream (head + tail). */
  maxOutputBytes: number;
  signal?: AbortSignal;
  /** Called every tickMs while the command runs and while it is torn down (the activity heartbeats here). */
  onTick?: () => void;
  tickMs?: number;
  /** Called once with the process group id right after the spawn, before the command can do much. */
  onSpawn?: (pgid: number) => void;
  /** How often the process tree is recorded, to find descendants that leave the group. */
  snapshotMs?: number;
  /** Teardown: SIGTERM → graceMs → SIGKILL, polling every pollMs, giving up after timeoutMs. */
  kill?: { graceMs?: number; pollMs?: number; timeoutMs?: number };
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
  durationMs: number;
  /** The command's process group; null only when the signal was already aborted and nothing was spawned. */
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
const DEFAULT_SNAPSHOT_MS = 200;
const DEFAULT_KILL = { graceMs: 1000, pollMs: 50, timeoutMs: 5000 };
/** After the group is gone the streams reach EOF at once; this only bounds an untracked holder of them. */
const STREAM_CLOSE_GRACE_MS = 500;

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
    durationMs: performance.now() - started,
    pgid: null,
    remaining: [],
    trackedPids: [],
    ...partial,
  });

  // Cancelled before it started: the command never runs (a tool call runs at most once, and this is "not at all").
  if (input.signal?.aborted) return result({ cancelled: true });

  const marker = randomUUID();
  const tag = openProcessTag(marker);
  try {
    return await supervise(input, { marker, tag, stdout, stderr, kill, result });
  } finally {
    tag?.close();
  }
}

interface Run {
  /** Value of RUN_MARKER_ENV for this command. */
  marker: string;
  tag: ProcessTag | undefined;
  stdout: BoundedOutput;
  stderr: BoundedOutput;
  kill: typeof DEFAULT_KILL;
  result: (partial: Partial<RunBashResult>) => RunBashResult;
}

async function supervise(input: RunBashInput, run: Run): Promise<RunBashResult> {
  const { marker, tag, stdout, stderr, kill, result } = run;
  const child = spawn('bash', ['-c', input.command], {
    cwd: input.cwd,
    env: { ...input.env, [RUN_MARKER_ENV]: marker },
    detached: true, // setsid(): own session and process group, pgid = pid
    // fd 3 is the tag (openProcessTag): an empty read-only file the command can ignore.
    stdio: tag ? ['ignore', 'pipe', 'pipe', tag.fd] : ['ignore', 'pipe', 'pipe'],
  });
  // Before anything else runs on the event loop: the leader's stdout/stderr channels and its identity. Best
  // effort, since a very short command may already have exited; the tag and the marker do not depend on it.
  const outputLinks = child.pid === undefined ? [] : fdLinksSync(child.pid, [1, 2]);
  const leader = child.pid === undefined ? undefined : readProcessSync(child.pid);
  const spawnError = await new Promise<Error | undefined>((resolve) => {
    child.once('spawn', () => resolve(undefined));
    child.once('error', (err) => resolve(err));
  });
  if (spawnError || child.pid === undefined) {
    throw new Error(`could not start bash in ${input.cwd}: ${spawnError?.message ?? 'no pid'}`);
  }
  child.on('error', () => undefined); // e.g. a failed kill(): teardown goes through process-tree, not child.kill
  const pgid = child.pid;
  const out = child.stdout as Readable;
  const err = child.stderr as Readable;

  const tracked: TrackedProcesses = new Map();
  if (leader) track(tracked, [leader]);
  try {
    input.onSpawn?.(pgid);
  } catch {
    // the caller's bookkeeping must not leave the command unsupervised
  }

  out.on('data', (chunk: Buffer) => stdout.push(chunk));
  err.on('data', (chunk: Buffer) => stderr.push(chunk));
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
  const timeout = setTimeout(() => stop('timeout'), Math.max(0, input.timeoutMs));
  const tick = setInterval(() => {
    try {
      input.onTick?.();
    } catch {
      // a failed heartbeat must not leave the command unsupervised
    }
  }, input.tickMs ?? DEFAULT_TICK_MS);
  let snapshotting = false;
  const snapshots = setInterval(() => {
    if (snapshotting) return;
    snapshotting = true;
    snapshotTree(pgid, tracked)
      .catch(() => undefined)
      .finally(() => (snapshotting = false));
  }, input.snapshotMs ?? DEFAULT_SNAPSHOT_MS);

  try {
    await Promise.race([exited, stopped]);
    // An abort that arrives during the teardown of a finished command does not make it "cancelled".
    const reason = stopReason;
    clearTimeout(timeout);
    clearInterval(snapshots);

    // Whatever carries one of the command's marks came from the command, wherever it moved since.
    const fdLinks = [...(tag?.links ?? []), ...outputLinks];
    track(tracked, await processesCarrying({ fdLinks, env: { name: RUN_MARKER_ENV, value: marker } }));
    const { remaining } = await killGroupAndWait(pgid, { ...kill, tracked });

    // The leader is in the group, so it has exited by now unless teardown gave up on it.
    const exit = await Promise.race([exited, delay(remaining.includes(pgid) ? 0 : kill.timeoutMs)]);
    // With every writer gone the streams reach EOF and deliver what is buffered; an untracked holder
    // (see process-tree.ts) must not hang the call, so close them after a short grace.
    if (!(await Promise.race([streamsClosed.then(() => true), delay(STREAM_CLOSE_GRACE_MS).then(() => false)]))) {
      out.destroy();
      err.destroy();
      await streamsClosed;
    }
    return result({
      exitCode: exit ? exit.code : null,
      signal: exit ? exit.signal : null,
      timedOut: reason === 'timeout',
      cancelled: reason === 'abort',
      pgid,
      remaining,
      trackedPids: [...tracked.keys()].sort((a, b) => a - b),
    });
  } finally {
    clearTimeout(timeout);
    clearInterval(tick);
    clearInterval(snapshots);
    input.signal?.removeEventListener('abort', onAbort);
  }
}

/** A timer that does not keep the process alive: it only bounds waits that normally end sooner. */
function delay(ms: number): Promise<undefined> {
  return new Promise((resolve) => setTimeout(() => resolve(undefined), ms).unref());
}
