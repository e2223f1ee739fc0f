import { spawn } from 'node:child_process';
import { constants as fsConstants, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isProcessAlive } from './pid';

/** The Temporal CLI Go module we build when no binary is installed; pinned so every machine runs the same server. */
export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal@v1.5.1';

/** No `temporal` binary exists and none can be built here (no Go): the caller falls back to the SDK download. */
export class TemporalCliUnavailableError extends Error {
  readonly code = 'temporal_cli_unavailable';
  constructor(message: string) {
    super(message);
    this.name = 'TemporalCliUnavailableError';
  }
}

/** Thrown when `go install` of the CLI fails; carries the tail of its output. */
export class TemporalCliBuildError extends Error {
  readonly code = 'temporal_cli_build_failed';
  constructor(
    message: string,
    readonly outputTail: string,
  ) {
    super(`${message}\n${outputTail}`);
    this.name = 'TemporalCliBuildError';
  }
}

type Log = (line: string) => void;

/** Orchard's cache directory, `${XDG_CACHE_HOME:-~/.cache}/orchard`, shared by every checkout on the machine. */
export function temporalCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  // The XDG spec says to ignore a relative value.
  const base = xdg && path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), '.cache');
  return path.join(base, 'orchard');
}

/** Where a built CLI lives: `<cache>/bin/temporal` (the GOBIN of our `go install`). */
export function cachedTemporalCliPath(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(temporalCacheDir(env), 'bin', 'temporal');
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
export async function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/**
 * A path to the `temporal` binary: PATH, then `ORCHARD_TEMPORAL_CLI`, then the cache; when none exists and Go is on
 * PATH, builds it into the cache (several minutes the first time). Throws `TemporalCliUnavailableError` when there is
 * no binary and no Go.
 */
export async function resolveTemporalCli(log: Log, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const onPath = await findOnPath('temporal', env);
  if (onPath) return onPath;

  const fromEnv = env.ORCHARD_TEMPORAL_CLI;
  if (fromEnv) {
    // An explicit setting that points nowhere is a mistake to report, not to paper over with a build.
    if (await isExecutableFile(fromEnv)) return fromEnv;
    throw new TemporalCliUnavailableError(`ORCHARD_TEMPORAL_CLI=${fromEnv} is not an executable file`);
  }

  const cacheDir = temporalCacheDir(env);
  const cached = cachedTemporalCliPath(env);
  const lockPath = path.join(cacheDir, 'temporal-build.lock');
  // A binary next to a live build lock may still be half-written by a process that does not stage its output.
  if ((await isExecutableFile(cached)) && (await lockHolder(lockPath)) === undefined) return cached;

  const go = await findOnPath('go', env);
  if (!go) {
    if (await isExecutableFile(cached)) return cached;
    throw new TemporalCliUnavailableError(
      `no temporal binary on PATH, in ORCHARD_TEMPORAL_CLI or at ${cached}, ` +
        `and no go to build ${TEMPORAL_CLI_MODULE}; ` +
        'install the Temporal CLI, or let the SDK download its dev server (needs network)',
    );
  }

  await fs.mkdir(cacheDir, { recursive: true });
  const release = await acquireBuildLock(lockPath, log);
  try {
    // Another process may have built it while we waited for the lock.
    if (await isExecutableFile(cached)) return cached;
    await buildTemporalCli(go, cacheDir, cached, log, env);
    return cached;
  } finally {
    await release();
  }
}

async function buildTemporalCli(go: string, cacheDir: string, target: string, log: Log, env: NodeJS.ProcessEnv) {
  // Build into a private GOBIN and rename, so nobody ever runs a half-copied binary.
  const staging = await fs.mkdtemp(path.join(cacheDir, 'bin-staging-'));
  try {
    log(
      `building the Temporal CLI (go install ${TEMPORAL_CLI_MODULE}) into ${path.dirname(target)}; ` +
        'the first build takes several minutes…',
    );
    const started = Date.now();
    let result = await runGoInstall(go, { ...env, GOBIN: staging }, log);
    if (result.code !== 0 && isChecksumDbUnreachable(result.output) && env.GOSUMDB !== 'off') {
      log(
        'sum.golang.org is unreachable; retrying once with GOSUMDB=off ' +
          '(module hashes are then trusted from the Go module proxy/cache unchecked)',
      );
      result = await runGoInstall(go, { ...env, GOBIN: staging, GOSUMDB: 'off' }, log);
    }
    if (result.code !== 0) {
      const message = `go install ${TEMPORAL_CLI_MODULE} failed (exit ${result.code})`;
      throw new TemporalCliBuildError(message, tail(result.output, 30));
    }
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.rename(path.join(staging, 'temporal'), target);
    log(`built the Temporal CLI at ${target} in ${Math.round((Date.now() - started) / 1000)}s`);
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}

function runGoInstall(go: string, env: NodeJS.ProcessEnv, log: Log): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(go, ['install', TEMPORAL_CLI_MODULE], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const started = Date.now();
    const seconds = () => Math.round((Date.now() - started) / 1000);
    const ticker = setInterval(() => log(`still building the Temporal CLI… ${seconds()}s`), 20_000);
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
 * One builder per machine: the lock file holds the builder's pid; later processes wait for it. A lock whose pid is
 * dead is stale and taken over. (A pid is only meaningful on this host: the cache must not be shared over NFS.)
 */
async function acquireBuildLock(lockPath: string, log: Log): Promise<() => Promise<void>> {
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
      throw new TemporalCliUnavailableError(
        `gave up waiting ${Math.round(waited / 60_000)} min for the build lock ${lockPath} (pid ${holder})`,
      );
    }
    if (lastReport === undefined || Date.now() - lastReport >= 20_000) {
      log(`another process (pid ${holder}) is building the Temporal CLI; waiting… ${Math.round(waited / 1000)}s`);
      lastReport = Date.now();
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}
