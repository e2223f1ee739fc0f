import fs from 'node:fs';
import path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { type DevConfig, type DevConfigOverrides, dynamicConfigArgs, freePort, loadDevConfig, searchAttributeArgs, startDevServer } from './dev-server';
import { startEmbeddedPostgres } from './pglite';
import { TemporalCliUnavailableError } from './temporal-cli';
import { isProcessAlive } from './pid';
import { describeTarget, loadTemporalSettings, type TemporalSettings, type TemporalTarget } from '../client/connection';

type Log = (line: string) => void;

/** What the worker, the CLI and the tests need to reach Temporal and PostgreSQL, whoever runs them. */
export interface Stack {
  readonly temporalAddress: string;
  readonly namespace: string;
  /** TLS, API key and gRPC metadata of a configured cluster (none for the embedded dev server). */
  readonly temporalOptions?: TemporalOptions;
  readonly webUiUrl?: string;
  readonly databaseUrl: string;
  /** Which parts this process started (and stop() stops). */
  readonly embedded: { readonly temporal: boolean; readonly postgres: boolean };
  stop(): Promise<void>;
}

export interface BootStackOptions {
  readonly projectRoot: string;
  readonly log: Log;
  /** Overrides for temporal-dev.yaml (tests: `{ port: 0, ui: false, dbFile: null }`). */
  readonly temporal?: DevConfigOverrides;
  /** Where PGlite keeps its data; default `<state dir>/pglite`. */
  readonly postgres?: { readonly dataDir: string | 'memory' };
  /** Read instead of process.env (tests). */
  readonly env?: NodeJS.ProcessEnv;
}

interface Part<T> {
  readonly value: T;
  readonly embedded: boolean;
  stop(): Promise<void>;
}

/**
 * Temporal from TEMPORAL_ADDRESS, else the dev server from temporal-dev.yaml (else, with no binary and no Go, the
 * SDK's downloaded dev server); PostgreSQL from DATABASE_URL, else PGlite. Both are started in parallel; if one fails
 * the other is stopped again.
 */
export async function bootStack(opts: BootStackOptions): Promise<Stack> {
  const env = opts.env ?? process.env;
  const [temporal, postgres] = await Promise.allSettled([bootTemporal(opts, env), bootPostgres(opts, env)]);
  if (temporal.status === 'rejected' || postgres.status === 'rejected') {
    await Promise.all([temporal, postgres].flatMap((r) => (r.status === 'fulfilled' ? [r.value.stop()] : [])));
    throw temporal.status === 'rejected' ? temporal.reason : (postgres as PromiseRejectedResult).reason;
  }
  const t = temporal.value;
  const p = postgres.value;
  let stopping: Promise<void> | undefined;
  return {
    ...t.value,
    databaseUrl: p.value,
    embedded: { temporal: t.embedded, postgres: p.embedded },
    stop: () =>
      (stopping ??= (async () => {
        removeStackFile(opts.projectRoot, { onlyIfOwnedBy: process.pid });
        await Promise.all([t.stop(), p.stop()]);
      })()),
  };
}

type TemporalOptions = Pick<TemporalSettings, 'tls' | 'apiKey' | 'metadata'>;

/** What a connection to the stack's Temporal is made from. */
export function stackTarget(stack: Pick<Stack, 'temporalAddress' | 'namespace' | 'temporalOptions'>): TemporalTarget {
  return { ...stack.temporalOptions, address: stack.temporalAddress, namespace: stack.namespace };
}

interface TemporalPart {
  temporalAddress: string;
  namespace: string;
  temporalOptions?: TemporalOptions;
  webUiUrl?: string;
}

async function bootTemporal(opts: BootStackOptions, env: NodeJS.ProcessEnv): Promise<Part<TemporalPart>> {
  const log = opts.log;
  // Configured the way the Temporal CLI is (TEMPORAL_ADDRESS, temporal.toml profiles): use that cluster as it is.
  const settings = loadTemporalSettings(env);
  if (settings.address) {
    const { address, namespace, ...temporalOptions } = settings;
    log(`using Temporal at ${describeTarget({ ...settings, address })}`);
    return {
      value: { temporalAddress: address, namespace, temporalOptions },
      embedded: false,
      stop: async () => undefined,
    };
  }
  const config = loadDevConfig(opts.projectRoot, opts.temporal, env);
  try {
    const server = await startDevServer(config, log);
    return {
      value: { temporalAddress: server.address, namespace: server.namespace, webUiUrl: server.webUiUrl },
      embedded: !server.reused,
      stop: () => server.stop(),
    };
  } catch (err) {
    if (!(err instanceof TemporalCliUnavailableError)) throw err;
    log(`${err.message}`);
    return bootSdkDevServer(config, log);
  }
}

/**
 * Last resort: the SDK downloads a Temporal CLI release into the temp directory and runs it. Needs network access,
 * and the download is whatever CLI version the SDK picks, not the pinned one.
 */
async function bootSdkDevServer(config: DevConfig, log: Log): Promise<Part<TemporalPart>> {
  const port = config.port || (await freePort(config.ip));
  const uiPort = config.ui ? config.uiPort || (await freePort(config.ip)) : undefined;
  log(`falling back to the Temporal SDK's downloaded dev server on ${config.ip}:${port} (needs network)…`);
  const testEnv = await TestWorkflowEnvironment.createLocal({
    server: {
      ip: config.ip,
      port,
      ui: config.ui,
      uiPort,
      namespace: config.namespace,
      dbFilename: config.dbFile ?? undefined,
      log: { format: 'pretty', level: config.logLevel },
      extraArgs: [...searchAttributeArgs(config), ...dynamicConfigArgs(config)],
    },
  });
  return {
    value: {
      temporalAddress: testEnv.address,
      namespace: config.namespace,
      webUiUrl: uiPort ? `http://${config.ip}:${uiPort}` : undefined,
    },
    embedded: true,
    stop: () => testEnv.teardown(),
  };
}

async function bootPostgres(opts: BootStackOptions, env: NodeJS.ProcessEnv): Promise<Part<string>> {
  if (env.DATABASE_URL) {
    opts.log(`using DATABASE_URL ${redactUrl(env.DATABASE_URL)}`);
    return { value: env.DATABASE_URL, embedded: false, stop: async () => undefined };
  }
  const dataDir = opts.postgres?.dataDir ?? path.join(stateDirOf(opts.projectRoot, env), 'pglite');
  opts.log(`starting embedded PostgreSQL (PGlite, ${dataDir === 'memory' ? 'in memory' : `data in ${dataDir}`})…`);
  const pg = await startEmbeddedPostgres({ dataDir, log: opts.log });
  return { value: pg.url, embedded: true, stop: () => pg.stop() };
}

/** A connection URL fit to print: the password (in the userinfo or a `password=` parameter) replaced by `***`. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
    return parsed.toString();
  } catch {
    // Not a URL (a libpq key=value string, say): blank anything that looks like a password.
    return url.replace(/(password\s*=\s*)('[^']*'|\S+)/gi, '$1***');
  }
}

/** `.orchard/stack.json`: how CLI commands find the stack a running `orchard dev` booted. */
export interface StackFile {
  readonly temporalAddress: string;
  readonly namespace: string;
  readonly webUiUrl?: string;
  /** Carries credentials when DATABASE_URL has them, hence the file's 0600 mode. */
  readonly databaseUrl: string;
  /** The database is the dev process's embedded PGlite (pools must not send session settings to it). */
  readonly databaseEmbedded?: boolean;
  readonly pid: number;
  readonly startedAt: string;
}

/** `<state dir>/stack.json`. */
export function stackFilePath(projectRoot: string, env: NodeJS.ProcessEnv = process.env): string {
  return path.join(stateDirOf(projectRoot, env), 'stack.json');
}

/** ORCHARD_STATE_DIR (relative to the project) or `<project>/.orchard`, as the worker's configuration has it. */
function stateDirOf(projectRoot: string, env: NodeJS.ProcessEnv): string {
  return path.resolve(projectRoot, env.ORCHARD_STATE_DIR ?? '.orchard');
}

export function writeStackFile(projectRoot: string, stack: Stack): void {
  const file = stackFilePath(projectRoot);
  const content: StackFile = {
    temporalAddress: stack.temporalAddress,
    namespace: stack.namespace,
    webUiUrl: stack.webUiUrl,
    databaseUrl: stack.databaseUrl,
    databaseEmbedded: stack.embedded.postgres,
    pid: process.pid,
    startedAt: new Date().toISOString(),
  };
  fs.mkdirSync(path.dirname(file), { recursive: true });
  // Write then rename, so a reader never sees half a file.
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, `${JSON.stringify(content, null, 2)}\n`, { mode: 0o600 });
  fs.renameSync(tmp, file);
}

/** The stack file of a running `orchard dev`, or undefined when there is none or the process that wrote it is gone. */
export function readStackFile(projectRoot: string): StackFile | undefined {
  let content: Partial<StackFile>;
  try {
    content = JSON.parse(fs.readFileSync(stackFilePath(projectRoot), 'utf8')) as Partial<StackFile>;
  } catch {
    return undefined;
  }
  if (
    typeof content.temporalAddress !== 'string' ||
    typeof content.namespace !== 'string' ||
    typeof content.databaseUrl !== 'string' ||
    typeof content.pid !== 'number'
  ) {
    return undefined;
  }
  // A file left by a crashed `orchard dev` points at servers that died with it.
  if (!isProcessAlive(content.pid)) return undefined;
  return content as StackFile;
}

/** Removes the stack file; with `onlyIfOwnedBy`, only when that pid wrote it (another `orchard dev` may own it). */
export function removeStackFile(projectRoot: string, opts: { onlyIfOwnedBy?: number } = {}): void {
  const file = stackFilePath(projectRoot);
  if (opts.onlyIfOwnedBy !== undefined) {
    try {
      const { pid } = JSON.parse(fs.readFileSync(file, 'utf8')) as { pid?: unknown };
      if (pid !== opts.onlyIfOwnedBy) return;
    } catch {
      return;
    }
  }
  fs.rmSync(file, { force: true });
}
