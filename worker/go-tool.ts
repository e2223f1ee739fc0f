import { spawn } from 'node:child_process';
import { constants as fsConstants, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isProcessAlive } from './pid';

/** A binary Orchard builds with `go install` into its cache when the machine has none (the Temporal CLI, Toxiproxy). */
export interface GoTool {
  /** The `go install` target, version pinned so every machine runs the same binary. */
  module: string;
  /** What the binary is called on PATH and in `<cache>/bin`. */
  binary: string;
  /** What `go install` names it, when that differs from `binary` (a module's `cmd/server` builds `server`). */
  builtName?: string;
  /** Named in progress lines and errors, e.g. 'the Temporal CLI'. */
  label: string;
  /** An environment variable that may name the binary explicitly (checked after PATH). */
  envVar?: string;
  /** Said when there is no binary and no Go: what to do instead. */
  unavailableHint?: string;
}

/** No binary exists and none can be built here (no Go, or building is not allowed): the message says what to do. */
export class GoToolUnavailableError extends Error {
  readonly code: string = 'go_tool_unavailable';
  constructor(message: string) {
    super(message);
    this.name = 'GoToolUnavailableError';
  }
}

/** Thrown when `go install` fails; carries the tail of its output. */
export class GoToolBuildError extends Error {
  readonly code: string = 'go_tool_build_failed';
  constructor(
    readonly summary: string,
    readonly outputTail: string,
  ) {
    super(`${summary}\n${outputTail}`);
    this.name = 'GoToolBuildError';
  }
}

type Log = (line: string) => void;

/** Orchard's cache directory, `${XDG_CACHE_HOME:-~/.cache}/orchard`, shared by every checkout on the machine. */
export function orchardCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  // The XDG spec says to ignore a relative value.
  const base = xdg && path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), '.cache');
  return path.join(base, 'orchard');
}

/** Where a built tool lives: `<cache>/bin/<binary>` (the cache's bin is where our `go install` puts it). */
function cachedGoToolPath(tool: Pick<GoTool, 'binary'>, env: NodeJS.ProcessEnv = process.env): string {
  return path.join(orchardCacheDir(env), 'bin', tool.binary);
}

/** True when `go install` failed because the checksum database was unreachable (an offline or firewalled machine). */
export function isChecksumDbUnreachable(output: string): boolean {
  return /sum\.golang\.org|checksum database/i.test(output) && !/SECURITY ERROR|checksum mismatch/i.test(output);
}

async function isExecutableFile(file: string): Promise<boolean> {
  try {
    const stat = await fs.stat(file);
    if (!stat.isFile()) return false;
    await fs.access(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The first executable called `name` on PATH, like `which`. */
async function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

export interface ResolveGoToolOptions {
  env?: NodeJS.ProcessEnv;
  /** false: only look (PATH, the variable, the cache), never build; a missing binary is GoToolUnavailableError. */
  build?: boolean;
}

/**
 * A path to the tool's binary: PATH, then its environment variable, then the cache; when none exists and Go is on
 * PATH, builds it into the cache (one builder per machine, under a lock; minutes for a large module). Throws
 * `GoToolUnavailableError` when there is no binary and it cannot be built, `GoToolBuildError` when the build fails.
 */
export async function resolveGoTool(tool: GoTool, log: Log, options: ResolveGoToolOptions = {}): Promise<string> {
  const env = options.env ?? process.env;
  const onPath = await findOnPath(tool.binary, env);
  if (onPath) return onPath;

  const fromEnv = tool.envVar ? env[tool.envVar] : undefined;
  if (fromEnv) {
    // An explicit setting that points nowhere is a mistake to report, not to paper over with a build.
    if (await isExecutableFile(fromEnv)) return fromEnv;
    throw new GoToolUnavailableError(`${tool.envVar}=${fromEnv} is not an executable file`);
  }

  const cacheDir = orchardCacheDir(env);
  const cached = cachedGoToolPath(tool, env);
  const lockPath = path.join(cacheDir, `${tool.binary}-build.lock`);
  // A binary next to a live build lock may still be half-written by a process that does not stage its output.
  if ((await isExecutableFile(cached)) && (await lockHolder(lockPath)) === undefined) return cached;

  const where = `no ${tool.binary} binary on PATH${tool.envVar ? `, in ${tool.envVar}` : ''} or at ${cached}`;
  if (options.build === false) {
    if (await isExecutableFile(cached)) return cached;
    throw new GoToolUnavailableError(`${where}${tool.unavailableHint ? `; ${tool.unavailableHint}` : ''}`);
  }
  const go = await findOnPath('go', env);
  if (!go) {
    if (await isExecutableFile(cached)) return cached;
    throw new GoToolUnavailableError(`${where}, and no go to build ${tool.module}${tool.unavailableHint ? `; ${tool.unavailableHint}` : ''}`);
  }

  await fs.mkdir(cacheDir, { recursive: true });
  const release = await acquireBuildLock(lockPath, tool, log);
  try {
    // Another process may have built it while we waited for the lock.
    if (await isExecutableFile(cached)) return cached;
    await buildGoTool(tool, go, cacheDir, cached, log, env);
    return cached;
  } finally {
    await release();
  }
}

async function buildGoTool(tool: GoTool, go: string, cacheDir: string, target: string, log: Log, env: NodeJS.ProcessEnv) {
  // Build into a private GOBIN and rename, so nobody ever runs a half-copied binary.
  const staging = await fs.mkdtemp(path.join(cacheDir, 'bin-staging-'));
  try {
    log(`building ${tool.label} (go install ${tool.module}) into ${path.dirname(target)}; the first build may take minutes…`);
    const started = Date.now();
    let result = await runGoInstall(tool, go, { ...env, GOBIN: staging }, log);
    if (result.code !== 0 && isChecksumDbUnreachable(result.output) && env.GOSUMDB !== 'off') {
      log('sum.golang.org is unreachable; retrying once with GOSUMDB=off ' + '(module hashes are then trusted from the Go module proxy/cache unchecked)');
      result = await runGoInstall(tool, go, { ...env, GOBIN: staging, GOSUMDB: 'off' }, log);
    }
    if (result.code !== 0) {
      throw new GoToolBuildError(`go install ${tool.module} failed (exit ${result.code})`, tail(result.output, 30));
    }
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.rename(path.join(staging, tool.builtName ?? tool.binary), target);
    log(`built ${tool.label} at ${target} in ${Math.round((Date.now() - started) / 1000)}s`);
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

function runGoInstall(tool: GoTool, go: string, env: NodeJS.ProcessEnv, log: Log): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(go, ['install', tool.module], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const started = Date.now();
    const seconds = () => Math.round((Date.now() - started) / 1000);
    const ticker = setInterval(() => log(`still building ${tool.label}… ${seconds()}s`), 20_000);
    const onChunk = (chunk: Buffer) => {
      const text = chunk.toString();
      output = (output + text).slice(-64 * 1024);
      // Without -x, go install prints only downloads and errors: all worth showing.
      for (const line of text.split('\n')) if (line.trim()) log(`  ${line.trimEnd()}`);
    };
    child.stdout.on('data', onChunk);
    child.stderr.on('data', onChunk);
    child.on('error', (err) => {
      clearInterval(ticker);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearInterval(ticker);
      resolve({ code: code ?? (signal ? 128 : 1), output });
    });
  });
}

function tail(text: string, lines: number): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/** The pid holding the lock file, or undefined when there is no lock or its holder is dead. */
async function lockHolder(lockPath: string): Promise<number | undefined> {
  let text: string;
  try {
    text = await fs.readFile(lockPath, 'utf8');
  } catch {
    return undefined;
  }
  const pid = Number.parseInt(text, 10);
  if (!Number.isInteger(pid) || pid <= 0) {
    // A lock being written right now may still be empty; one that stays empty was left by a crash.
    const stat = await fs.stat(lockPath).catch(() => undefined);
    return stat && Date.now() - stat.mtimeMs < 10_000 ? -1 : undefined;
  }
  return isProcessAlive(pid) ? pid : undefined;
}

const LOCK_WAIT_LIMIT_MS = 30 * 60_000;

/**
 * One builder per tool per machine: the lock file holds the builder's pid; later processes wait for it. A lock whose
 * pid is dead is stale and taken over. (A pid is only meaningful on this host: the cache must not be shared over NFS.)
 */
async function acquireBuildLock(lockPath: string, tool: GoTool, log: Log): Promise<() => Promise<void>> {
  const started = Date.now();
  let lastReport: number | undefined;
  for (;;) {
    try {
      const handle = await fs.open(lockPath, 'wx');
      await handle.writeFile(`${process.pid}\n`);
      await handle.close();
      return async () => {
        await fs.rm(lockPath, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = await lockHolder(lockPath);
    if (holder === undefined) {
      // Stale: its builder died. Remove it and race for it again.
      await fs.rm(lockPath, { force: true });
      continue;
    }
    const waited = Date.now() - started;
    if (waited > LOCK_WAIT_LIMIT_MS) {
      throw new GoToolUnavailableError(`gave up waiting ${Math.round(waited / 60_000)} min for the build lock ${lockPath} (pid ${holder})`);
    }
    if (lastReport === undefined || Date.now() - lastReport >= 20_000) {
      log(`another process (pid ${holder}) is building ${tool.label}; waiting… ${Math.round(waited / 1000)}s`);
      lastReport = Date.now();
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}
