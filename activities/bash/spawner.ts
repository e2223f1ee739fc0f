import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { closeSync, openSync } from 'node:fs';
import * as path from 'node:path';
import { PassThrough, Writable, type Readable } from 'node:stream';

/**
 * Starts the worker's commands from a small helper process (spawner-helper.cjs) instead of the worker itself.
 *
 * Node starts a child with fork(), which copies the parent's page tables on the event loop's thread: the cost grows
 * with the parent's resident memory, and a worker holds hundreds of MB (the bench's: 460 MB at 10 concurrent handoffs,
 * 636 MB at 100). Measured there: each start blocked the worker's event loop 10-12 ms (1,722 starts of git, bwrap and
 * commands in one bench run: 20.7 s of blocked event loop). The helper is ~50 MB: about 1 ms, on its own thread.
 *
 * What comes back is a CommandChild: the part of ChildProcess the runner uses (pid, exit, the piped descriptors as
 * streams, `spawn` and `error`). The helper's children are its own, not the worker's; the runner never relied on
 * being their parent (it signals process groups and reads /proc), and bwrap's --die-with-parent now means the
 * helper, which exits when the worker's channel closes. When the helper cannot be started, the worker spawns directly;
 * when it dies, its running commands end as killed (the runner then tears down by /proc) and the next start begins a
 * new helper.
 */

/** The subset of ChildProcess the runner reads. */
export interface CommandChild extends EventEmitter {
  readonly pid?: number;
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  readonly stdio: ReadonlyArray<Readable | Writable | null | undefined>;
  kill(signal?: NodeJS.Signals): boolean;
}

/**
 * One descriptor of the child: nothing, a pipe to the worker (written by the worker at WRITABLE_FDS, read
 * elsewhere), or a file opened read-only for the child alone (the runner's process tag).
 */
type StdioSpec = 'ignore' | 'pipe' | { readonly path: string };

/** Pipes the worker writes (stdin, the runner's gate); every other pipe is read. */
const WRITABLE_FDS: ReadonlySet<number> = new Set([0, 4]);

export interface SpawnRequest {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Record<string, string>;
  readonly detached: boolean;
  readonly stdio: readonly StdioSpec[];
}

type FromHelper =
  | { t: 'spawned'; id: number; pid: number }
  | { t: 'failed'; id: number; message: string; code?: string }
  | { t: 'data'; id: number; fd: number; data: Uint8Array }
  | { t: 'closed'; id: number; fd: number }
  | { t: 'exit'; id: number; code: number | null; signal: NodeJS.Signals | null }
  | { t: 'done'; id: number };

const HELPER_SCRIPT = path.join(__dirname, 'spawner-helper.cjs');

/** A child the helper started: events and streams fed by the helper's messages. */
class HelperChild extends EventEmitter implements CommandChild {
  pid: number | undefined;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly stdio: Array<Readable | Writable | null>;
  private exited = false;

  constructor(post: (message: object) => void, id: number, specs: readonly StdioSpec[]) {
    super();
    this.stdio = specs.map((spec, fd) => {
      if (spec !== 'pipe') return null;
      if (!WRITABLE_FDS.has(fd)) {
        // Destroyed before the helper closed it (the runner gives up on a pipe an untracked process still holds): the
        // helper stops reading it too, so its child can settle.
        const stream: PassThrough = new PassThrough({
          destroy: (err, done) => {
            if (!stream.writableEnded) post({ t: 'destroy', id, fd });
            done(err);
          },
        });
        return stream;
      }
      return new Writable({
        write: (chunk: Buffer, _encoding, done) => {
          post({ t: 'write', id, fd, data: chunk });
          done();
        },
        final: (done) => {
          post({ t: 'end', id, fd });
          done();
        },
        destroy: (err, done) => {
          post({ t: 'destroy', id, fd });
          done(err);
        },
      });
    });
  }

  get stdin(): Writable | null {
    return this.stdio[0] as Writable | null;
  }

  get stdout(): Readable | null {
    return this.stdio[1] as Readable | null;
  }

  get stderr(): Readable | null {
    return this.stdio[2] as Readable | null;
  }

  deliver(message: FromHelper): void {
    switch (message.t) {
      case 'spawned':
        this.pid = message.pid;
        this.emit('spawn');
        return;
      case 'failed':
        this.emit('error', Object.assign(new Error(message.message), { code: message.code }));
        this.endStreams();
        return;
      case 'data':
        (this.stdio[message.fd] as PassThrough | null)?.write(Buffer.from(message.data.buffer, message.data.byteOffset, message.data.byteLength));
        return;
      case 'closed':
        (this.stdio[message.fd] as PassThrough | null)?.end();
        return;
      case 'exit':
        this.exit(message.code, message.signal);
        return;
      case 'done':
        this.endStreams();
        return;
    }
  }

  /** Signals the child itself (this worker may signal the helper's children: same user). */
  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    if (this.pid === undefined || this.exited) return false;
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  /** The helper died: a child it ran ends as killed (the runner's teardown then looks in /proc for what is left). */
  lost(): void {
    if (this.pid === undefined) this.emit('error', new Error('the spawner helper exited before the command started'));
    else this.exit(null, 'SIGKILL');
    this.endStreams();
  }

  private exit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    this.exitCode = code;
    this.signalCode = signal;
    this.emit('exit', code, signal);
  }

  /** Ends the read pipes; `close` follows once each has been read to its end (as ChildProcess's does). */
  private endStreams(): void {
    if (this.closing) return;
    this.closing = true;
    const reads = this.stdio.filter((stream): stream is PassThrough => stream instanceof PassThrough);
    let open = reads.length;
    const closed = () => {
      if (--open <= 0) this.emit('close', this.exitCode, this.signalCode);
    };
    if (open === 0) queueMicrotask(() => this.emit('close', this.exitCode, this.signalCode));
    for (const stream of reads) {
      if (stream.readableEnded) closed();
      else stream.once('end', closed);
      if (!stream.writableEnded) stream.end();
    }
  }

  private closing = false;
}

/** The helper process and the children it runs for this worker. */
class Helper {
  private readonly children = new Map<number, HelperChild>();
  private nextId = 1;

  constructor(private readonly child: ChildProcess) {
    child.on('message', (message: FromHelper) => {
      this.children.get(message.id)?.deliver(message);
      if (message.t === 'failed' || message.t === 'done') {
        this.children.delete(message.id);
        this.holdOpen();
      }
    });
    child.once('exit', () => {
      if (helper === this) helper = undefined;
      for (const lost of this.children.values()) lost.lost();
      this.children.clear();
    });
    child.on('error', () => {
      // It could not start at all: this process spawns directly from now on. (A failed send: its exit follows.)
      if (child.pid !== undefined) return;
      if (helper === this) helper = undefined;
      wanted = false;
      for (const lost of this.children.values()) lost.lost();
      this.children.clear();
    });
    // An idle helper never keeps the worker alive (it exits when the channel closes); a command it runs does, as a
    // child of the worker's own would.
    child.unref();
    this.holdOpen();
  }

  /** The channel keeps this process alive while a command runs, and not otherwise. */
  private holdOpen(): void {
    const channel = this.child.channel as { ref?: () => void; unref?: () => void } | null | undefined;
    if (this.children.size > 0) channel?.ref?.();
    else channel?.unref?.();
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  spawn(request: SpawnRequest): CommandChild {
    const id = this.nextId++;
    const post = (message: object) => {
      if (this.child.connected) this.child.send(message);
    };
    const child = new HelperChild(post, id, request.stdio);
    this.children.set(id, child);
    this.holdOpen();
    if (this.child.connected) post({ t: 'spawn', id, ...request });
    else queueMicrotask(() => child.lost());
    return child;
  }
}

let helper: Helper | undefined;
let wanted = false;

/**
 * From now on this process starts its commands through a helper, started here so the first command does not wait for
 * it. A worker's host activities call it (createHostActivities); a one-shot CLI (`orchard exec`) is small, so a fork of
 * it is cheap and a helper's start (a Node process, ~40 ms) would be the larger cost. ORCHARD_SPAWNER=off keeps the
 * direct start.
 */
export function startSpawner(): void {
  wanted = process.env.ORCHARD_SPAWNER !== 'off';
  currentHelper();
}

/** The running helper (started again after it died), or undefined when this process spawns directly. */
function currentHelper(): Helper | undefined {
  if (helper || !wanted) return helper;
  try {
    const child = spawn(process.execPath, [HELPER_SCRIPT], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      serialization: 'advanced',
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    helper = new Helper(child);
  } catch {
    wanted = false; // cannot start one here: spawn directly, as before
  }
  return helper;
}

/** The helper's pid while it runs: it holds the other end of every command's pipes, so teardown leaves it alone. */
export function spawnerPid(): number | undefined {
  return helper?.pid;
}

/**
 * Starts `request` through the helper (directly when there is none). Emits `spawn` once the child runs, or `error`
 * when it could not start; then `exit` (code, signal). Each piped descriptor's stream ends after the child's last
 * write to it.
 */
export function spawnCommand(request: SpawnRequest): CommandChild {
  const via = currentHelper();
  if (via) return via.spawn(request);
  const opened: number[] = [];
  try {
    const stdio = request.stdio.map((spec) => {
      if (typeof spec !== 'object') return spec;
      const fd = openSync(spec.path, 'r');
      opened.push(fd);
      return fd;
    });
    return spawn(request.file, [...request.args], { cwd: request.cwd, env: request.env, detached: request.detached, stdio });
  } finally {
    for (const fd of opened) closeSync(fd);
  }
}

/** How a program run to its end by runFile went. */
export interface FileRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** A run that did not give an exit code: could not start, killed, past its time or its output bound. */
export class FileRunError extends Error {
  constructor(
    message: string,
    readonly stderr = '',
  ) {
    super(message);
    this.name = 'FileRunError';
  }
}

/**
 * Runs a program to its end through the spawner (the worker's git calls: execFile's job, without a fork of the worker)
 * and resolves with its exit code and output, whatever the code. Rejects when it could not start, was killed by a
 * signal, ran past `timeoutMs` (killed then) or wrote more than `maxBuffer` bytes to a stream (killed then).
 */
export function runFile(
  file: string,
  args: readonly string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; maxBuffer?: number; stdin?: string } = {},
): Promise<FileRun> {
  const env = Object.fromEntries(Object.entries(options.env ?? process.env).filter((e): e is [string, string] => e[1] !== undefined));
  const maxBuffer = options.maxBuffer ?? 1024 * 1024;
  const what = `${file} ${args.slice(0, 2).join(' ')}`;
  return new Promise((resolve, reject) => {
    const child = spawnCommand({
      file,
      args,
      cwd: options.cwd ?? process.cwd(),
      env,
      detached: false,
      stdio: [options.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    child.stdin?.on('error', () => undefined); // it may exit before reading all of it: its exit code says why
    child.stdin?.end(options.stdin);
    const chunks: [Buffer[], Buffer[]] = [[], []];
    const sizes = [0, 0];
    let stopped: string | undefined;
    const stop = (why: string) => {
      stopped ??= why;
      child.kill('SIGKILL');
    };
    [child.stdout, child.stderr].forEach((stream, i) =>
      stream?.on('data', (chunk: Buffer) => {
        sizes[i] += chunk.length;
        if (sizes[i] > maxBuffer) return stop(`wrote more than ${maxBuffer} bytes`);
        chunks[i].push(chunk);
      }),
    );
    const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => stop(`ran past ${options.timeoutMs} ms`), options.timeoutMs);
    child.once('error', (err: Error) => {
      clearTimeout(timer);
      reject(new FileRunError(`${what} could not start: ${err.message}`));
    });
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      const [stdout, stderr] = chunks.map((c) => Buffer.concat(c).toString('utf8'));
      if (stopped !== undefined) return reject(new FileRunError(`${what} ${stopped} and was killed`, stderr));
      if (code === null) return reject(new FileRunError(`${what} was killed by ${signal ?? 'a signal'}`, stderr));
      resolve({ code, stdout, stderr });
    });
  });
}

/** runFile that resolves with stdout on exit 0 and rejects otherwise, saying what git (or the program) said. */
export async function runFileText(file: string, args: readonly string[], options: Parameters<typeof runFile>[2] = {}): Promise<string> {
  const run = await runFile(file, args, options);
  if (run.code === 0) return run.stdout;
  throw new FileRunError(run.stderr.trim() || `${file} ${args.slice(0, 2).join(' ')} exited with ${run.code}`, run.stderr);
}
