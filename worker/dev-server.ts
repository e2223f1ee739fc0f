import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import { parseDocument } from 'yaml';
import { z } from 'zod';
import type { SearchAttributeType } from '@temporalio/common';
import { SearchAttributesMissingError, searchAttributeProblems } from './search-attributes';
import { resolveTemporalCli } from './temporal-cli';

type Log = (line: string) => void;

const DEV_CONFIG_FILE = 'temporal-dev.yaml';

/** The CLI's `--search-attribute` type names (it matches them case-insensitively; we accept exactly these). */
const SEARCH_ATTRIBUTE_TYPES = ['Text', 'Keyword', 'Int', 'Double', 'Bool', 'Datetime', 'KeywordList'] as const;
export type SearchAttributeTypeName = (typeof SEARCH_ATTRIBUTE_TYPES)[number];

/** Custom search-attribute slots in the dev server's SQLite store (server v1.29 `sqlDbCustomSearchAttributes`). */
const SQLITE_SLOTS: Record<SearchAttributeTypeName, number> = {
  Text: 3,
  Keyword: 10,
  Int: 3,
  Double: 3,
  Bool: 3,
  Datetime: 3,
  KeywordList: 3,
};

const port = z.number().int().min(0).max(65535);

const devConfigSchema = z
  .strictObject({
    ip: z.string().min(1).default('127.0.0.1'),
    /** 0 picks a free port at start (tests). */
    port: port.default(7233),
    uiPort: port.default(8233),
    /** false runs the server headless. */
    ui: z.boolean().default(true),
    namespace: z.string().min(1).default('default'),
    /** Relative to the project root; null keeps everything in memory. */
    dbFile: z.string().min(1).nullable().default('.orchard/temporal.db'),
    logLevel: z.enum(['debug', 'info', 'warn', 'error', 'never']).default('warn'),
    searchAttributes: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an identifier'), z.enum(SEARCH_ATTRIBUTE_TYPES)).default({}),
    dynamicConfig: z.record(z.string().regex(/^[A-Za-z0-9_.]+$/, 'must be a dotted identifier'), z.json()).default({}),
  })
  .superRefine((config, ctx) => {
    const used = new Map<SearchAttributeTypeName, number>();
    for (const type of Object.values(config.searchAttributes)) used.set(type, (used.get(type) ?? 0) + 1);
    for (const [type, count] of used) {
      if (count > SQLITE_SLOTS[type]) {
        ctx.addIssue({
          code: 'custom',
          path: ['searchAttributes'],
          message: `${count} ${type} attributes, but the dev server's SQLite store has only ${SQLITE_SLOTS[type]}`,
        });
      }
    }
  });

/** temporal-dev.yaml after validation, with `dbFile` made absolute. */
export type DevConfig = z.output<typeof devConfigSchema>;
export type DevConfigOverrides = Partial<DevConfig>;

/** temporal-dev.yaml is missing, is not YAML, or does not match the schema; `problems` lists each one. */
export class DevConfigError extends Error {
  readonly code = 'dev_config_invalid';
  constructor(
    readonly file: string,
    readonly problems: readonly string[],
  ) {
    super(`${file}: ${problems.join('; ')}`);
    this.name = 'DevConfigError';
  }
}

/** Parses and validates the text of a temporal-dev.yaml; pure, so tests need no file. */
export function parseDevConfig(text: string, opts: { file: string; projectRoot: string; overrides?: DevConfigOverrides }): DevConfig {
  const doc = parseDocument(text);
  if (doc.errors.length > 0) {
    throw new DevConfigError(
      opts.file,
      doc.errors.map((e) => e.message.split('\n')[0].replace(/:$/, '')),
    );
  }
  const raw: unknown = doc.toJS() ?? {};
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new DevConfigError(opts.file, ['the top level must be a mapping']);
  }
  const parsed = devConfigSchema.safeParse({ ...raw, ...opts.overrides });
  if (!parsed.success) {
    throw new DevConfigError(
      opts.file,
      parsed.error.issues.map((issue) => (issue.path.length ? `${issue.path.join('.')}: ${issue.message}` : issue.message)),
    );
  }
  const config = parsed.data;
  return { ...config, dbFile: config.dbFile === null ? null : path.resolve(opts.projectRoot, config.dbFile) };
}

/**
 * Reads `<projectRoot>/temporal-dev.yaml`; the environment's ORCHARD_TEMPORAL_PORT and ORCHARD_UI_PORT (a port, 0 for
 * any free one, or `off` for no Web UI) win over the file, and `overrides` over both (tests pass `{ port: 0, dbFile: null }`).
 */
export function loadDevConfig(projectRoot: string, overrides?: DevConfigOverrides, env: NodeJS.ProcessEnv = process.env): DevConfig {
  const file = path.join(projectRoot, DEV_CONFIG_FILE);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new DevConfigError(file, [`cannot read it (${(err as NodeJS.ErrnoException).code ?? String(err)})`]);
  }
  const config = parseDevConfig(text, { file, projectRoot, overrides: { ...portsFromEnv(env), ...overrides } });
  // A state directory of its own keeps the dev server's store file there too (a second stack beside the first).
  if (env.ORCHARD_STATE_DIR && config.dbFile !== null && overrides?.dbFile === undefined) {
    return { ...config, dbFile: path.join(path.resolve(projectRoot, env.ORCHARD_STATE_DIR), path.basename(config.dbFile)) };
  }
  return config;
}

/** The embedded stack's ports as the environment sets them; a value that is no port is refused, naming the variable. */
function portsFromEnv(env: NodeJS.ProcessEnv): DevConfigOverrides {
  const problems: string[] = [];
  const portOf = (name: string): number | undefined => {
    const value = env[name]?.trim();
    if (value === undefined || value === '') return undefined;
    const n = Number(value);
    if (/^\d+$/.test(value) && n <= 65535) return n;
    problems.push(`${name}=${JSON.stringify(value)} is not a port (0-65535${name === 'ORCHARD_UI_PORT' ? ', or off' : ''})`);
    return undefined;
  };
  const out: DevConfigOverrides = {};
  const port = portOf('ORCHARD_TEMPORAL_PORT');
  if (port !== undefined) out.port = port;
  if (env.ORCHARD_UI_PORT?.trim() === 'off') out.ui = false;
  else {
    const uiPort = portOf('ORCHARD_UI_PORT');
    if (uiPort !== undefined) Object.assign(out, { ui: true, uiPort });
  }
  if (problems.length > 0) throw new DevConfigError('the environment', problems);
  return out;
}

/** One `--search-attribute NAME=TYPE` per attribute. */
export function searchAttributeArgs(config: Pick<DevConfig, 'searchAttributes'>): string[] {
  return Object.entries(config.searchAttributes).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]);
}

/** One `--dynamic-config-value KEY=JSON` per entry (the CLI parses the value as JSON). */
export function dynamicConfigArgs(config: Pick<DevConfig, 'dynamicConfig'>): string[] {
  return Object.entries(config.dynamicConfig).flatMap(([key, value]) => ['--dynamic-config-value', `${key}=${JSON.stringify(value)}`]);
}

/** argv for `temporal server start-dev` (flags as in CLI v1.5.1). Ports must be concrete: resolve 0 first. */
export function devServerArgs(config: DevConfig): string[] {
  if (config.port === 0 || (config.ui && config.uiPort === 0)) {
    throw new Error('devServerArgs needs concrete ports; startDevServer picks free ones for port 0');
  }
  return [
    'server',
    'start-dev',
    '--ip',
    config.ip,
    '--port',
    String(config.port),
    ...(config.ui ? ['--ui-port', String(config.uiPort)] : ['--headless']),
    '--namespace',
    config.namespace,
    ...(config.dbFile ? ['--db-filename', config.dbFile] : []),
    '--log-level',
    config.logLevel,
    ...searchAttributeArgs(config),
    ...dynamicConfigArgs(config),
  ];
}

export interface DevServer {
  /** host:port of the frontend gRPC service. */
  readonly address: string;
  readonly namespace: string;
  readonly webUiUrl?: string;
  /** True when a server already answered on the port and we use it instead of starting one. */
  readonly reused: boolean;
  /** SIGTERM, then SIGKILL after a grace period; resolves once the process has exited. A no-op when reused. */
  stop(): Promise<void>;
}

export interface StartDevServerOptions {
  /** Path to `temporal`; resolved (and built if need be) with `resolveTemporalCli` when absent. */
  readonly cliPath?: string;
  /** How long the frontend may take to answer; a cold start with a new db file takes a few seconds. */
  readonly readyTimeoutMs?: number;
  /** Pass all the server's log lines to `log`, not only errors (the last lines are kept for error messages anyway). */
  readonly forwardServerLogs?: boolean;
  /** How a port configured as 0 is picked (tests hand out a taken one); `freePort` when absent. */
  readonly pickPort?: (ip: string) => Promise<number>;
}

/**
 * A free TCP port on `ip`. Picked below the kernel's ephemeral range when it can be: a port the kernel hands out for
 * `listen(0)` is also what it hands out as the local port of any outgoing connection, so on a busy machine (a test
 * suite opening hundreds of connections) another process's connect() could take it before our server binds it. A port
 * outside that range is taken only by another process that listens on it; `startDevServer` retries on a fresh pick.
 */
export async function freePort(ip: string): Promise<number> {
  const [low] = ephemeralRange();
  const floor = 20_000;
  if (low > floor + 1000) {
    for (let attempt = 0; attempt < 20; attempt++) {
      const candidate = floor + Math.floor(Math.random() * (low - floor));
      if (await canListen(ip, candidate)) return candidate;
    }
  }
  return listenAndClose(ip, 0);
}

/** The kernel's ephemeral port range (Linux); the IANA default elsewhere. */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high)) return [low, high];
  } catch {
    // not Linux
  }
  return [49152, 65535];
}

async function canListen(ip: string, port: number): Promise<boolean> {
  try {
    await listenAndClose(ip, port);
    return true;
  } catch {
    return false;
  }
}

function listenAndClose(ip: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(port, ip, () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

function formatAddress(ip: string, port: number): string {
  return `${ip.includes(':') ? `[${ip}]` : ip}:${port}`;
}

/** True when a Temporal frontend answers `GetSystemInfo` at `address` within `timeoutMs`. */
async function temporalAnswers(address: string, timeoutMs = 1000): Promise<boolean> {
  // lazy + ensureConnected rather than connect(): a failed connect() leaves its channel open, and with it the socket.
  const connection = Connection.lazy({ address, connectTimeout: timeoutMs });
  try {
    await connection.ensureConnected();
    await connection.workflowService.getSystemInfo({});
    return true;
  } catch {
    return false;
  } finally {
    await connection.close().catch(() => undefined);
  }
}

async function httpAnswers(url: string, timeoutMs = 1000): Promise<boolean> {
  try {
    await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return true;
  } catch {
    return false;
  }
}

/** The dev server process this process spawned: the only server `orchard dev` may register search attributes on. */
export interface SpawnedDevServer {
  readonly pid: number;
  readonly address: string;
  readonly port: number;
}

/**
 * Registers every search attribute in `wanted` that the namespace lacks, on the dev server this process spawned
 * and nowhere else: it first checks that the process listening on the port is that child (a port taken by another
 * server meanwhile, or a cluster reached through a tunnel, is never written to). The dev server registers them
 * only when it creates the namespace, so a db file from an older temporal-dev.yaml may miss some.
 */
export async function registerSearchAttributesOnSpawned(
  server: SpawnedDevServer,
  namespace: string,
  wanted: Record<string, SearchAttributeTypeName>,
  log: Log,
): Promise<void> {
  if (Object.keys(wanted).length === 0) return;
  const owner = processListensOn(server.pid, server.port);
  if (owner === false || (owner === undefined && !isAlive(server.pid))) {
    throw new Error(
      `refusing to register search attributes on ${server.address}: the server answering there is not the dev server ` +
        `this process started (pid ${server.pid})`,
    );
  }
  const connection = await Connection.connect({ address: server.address });
  try {
    const problems = await searchAttributeProblems(connection, namespace, sdkKeys(wanted));
    if (problems.wrongType.length > 0) throw new SearchAttributesMissingError(namespace, { missing: [], wrongType: problems.wrongType });
    if (problems.missing.length === 0) return;
    log(`registering search attributes ${problems.missing.map((a) => a.name).join(', ')} in namespace ${namespace}`);
    const missing: Record<string, number> = {};
    for (const { name } of problems.missing) missing[name] = indexedValueType(wanted[name]);
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing });
  } catch (err) {
    if (err instanceof SearchAttributesMissingError) throw err;
    const reason = err instanceof Error ? err.message : String(err);
    throw new Error(`search attributes of namespace ${namespace} on ${server.address}: ${reason}`, { cause: err });
  } finally {
    await connection.close().catch(() => undefined);
  }
}

/**
 * A server this process did not start is only checked: when it lacks attributes, the error gives the commands
 * for its operator. Registering them there is not `orchard dev`'s call.
 */
async function checkSearchAttributesOnForeign(address: string, namespace: string, wanted: Record<string, SearchAttributeTypeName>): Promise<void> {
  if (Object.keys(wanted).length === 0) return;
  const connection = await Connection.connect({ address });
  try {
    const problems = await searchAttributeProblems(connection, namespace, sdkKeys(wanted));
    if (problems.missing.length > 0 || problems.wrongType.length > 0) throw new SearchAttributesMissingError(namespace, problems);
  } finally {
    await connection.close().catch(() => undefined);
  }
}

/**
 * Whether process `pid` holds the listening TCP socket on `port` (Linux: the socket inodes of /proc/net/tcp{,6}
 * against the process's descriptors); undefined where /proc cannot tell.
 */
function processListensOn(pid: number, port: number): boolean | undefined {
  const inodes = new Set<string>();
  let readAny = false;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(table, 'utf8');
      readAny = true;
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is HEXIP:HEXPORT; state 0A is LISTEN; field 9 is the socket inode.
      if (fields.length < 10 || fields[3] !== '0A') continue;
      if (Number.parseInt(fields[1].split(':').pop() ?? '', 16) === port) inodes.add(fields[9]);
    }
  }
  if (!readAny) return undefined;
  let fds: string[];
  try {
    fds = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  return fds.some((fd) => {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      return match !== null && inodes.has(match[1]);
    } catch {
      return false;
    }
  });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const SDK_TYPE: Record<SearchAttributeTypeName, SearchAttributeType> = {
  Text: 'TEXT',
  Keyword: 'KEYWORD',
  Int: 'INT',
  Double: 'DOUBLE',
  Bool: 'BOOL',
  Datetime: 'DATETIME',
  KeywordList: 'KEYWORD_LIST',
};

function sdkKeys(wanted: Record<string, SearchAttributeTypeName>): { name: string; type: SearchAttributeType }[] {
  return Object.entries(wanted).map(([name, type]) => ({ name, type: SDK_TYPE[type] }));
}

function indexedValueType(type: SearchAttributeTypeName): number {
  const name = type === 'KeywordList' ? 'KEYWORD_LIST' : (type.toUpperCase() as Uppercase<Exclude<SearchAttributeTypeName, 'KeywordList'>>);
  const encoded = encodeSearchAttributeIndexedValueType(name);
  if (encoded === undefined) throw new Error(`unknown search attribute type ${type}`);
  return encoded;
}

/**
 * Starts `temporal server start-dev` from `config` and waits until its frontend answers. When the configured port
 * already answers as a Temporal frontend, that server is reused instead.
 */
export async function startDevServer(config: DevConfig, log: Log, opts: StartDevServerOptions = {}): Promise<DevServer> {
  if (config.port !== 0) {
    const address = formatAddress(config.ip, config.port);
    if (await temporalAnswers(address)) {
      const uiUrl = config.ui ? `http://${formatAddress(config.ip, config.uiPort)}` : undefined;
      const webUiUrl = uiUrl && (await httpAnswers(uiUrl)) ? uiUrl : undefined;
      log(`Temporal already answers on ${address}; reusing it instead of starting a second server`);
      await checkSearchAttributesOnForeign(address, config.namespace, config.searchAttributes);
      return { address, namespace: config.namespace, webUiUrl, reused: true, stop: async () => undefined };
    }
  }

  // A port we picked can be taken by another process before the server binds it: pick again (a configured one is
  // the operator's, and taken stays taken).
  const picks = (config.port === 0 ? 1 : 0) + (config.ui && config.uiPort === 0 ? 1 : 0);
  const pickPort = opts.pickPort ?? freePort;
  for (let attempt = 1; ; attempt++) {
    const resolved: DevConfig = {
      ...config,
      port: config.port || (await pickPort(config.ip)),
      uiPort: config.ui && config.uiPort === 0 ? await pickPort(config.ip) : config.uiPort,
    };
    try {
      return await spawnDevServer(resolved, log, opts);
    } catch (err) {
      if (!(err instanceof PortTakenError) || picks === 0 || attempt >= 5) throw err;
      log(`${err.message.split('\n')[0]}; picking other ports`);
    }
  }
}

/** The server ended during startup because a port it was given was bound by another process. */
class PortTakenError extends Error {}

async function spawnDevServer(resolved: DevConfig, log: Log, opts: StartDevServerOptions): Promise<DevServer> {
  const address = formatAddress(resolved.ip, resolved.port);
  const webUiUrl = resolved.ui ? `http://${formatAddress(resolved.ip, resolved.uiPort)}` : undefined;
  const cliPath = opts.cliPath ?? (await resolveTemporalCli(log));
  if (resolved.dbFile) fs.mkdirSync(path.dirname(resolved.dbFile), { recursive: true });
  log(
    `booting Temporal dev server on ${address} (${webUiUrl ? `Web UI ${webUiUrl}` : 'headless'}, ` +
      `${resolved.dbFile ? `state in ${resolved.dbFile}` : 'in memory'})…`,
  );
  const started = Date.now();

  const child = spawn(cliPath, devServerArgs(resolved), { stdio: ['ignore', 'pipe', 'pipe'] });
  const output = new OutputTail(60);
  let stopping: Promise<void> | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  let spawnError: Error | undefined;
  child.on('error', (err) => (spawnError = err));
  child.stdout?.on('data', (chunk: Buffer) => output.push(chunk));
  child.stderr?.on('data', (chunk: Buffer) => {
    for (const line of output.push(chunk)) {
      // Warnings are mostly poller chatter (a flood of them at shutdown); errors are worth a line while it runs.
      if (opts.forwardServerLogs || (!stopping && line.includes('level=ERROR'))) log(`temporal: ${line}`);
    }
  });
  // If this process exits without stop() (an uncaught error, process.exit), take the server down with it.
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      process.removeListener('exit', killOnExit);
      // No pid: it never started (spawn error), so there is no exit to wait for.
      if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const killTimer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(killTimer);
    })();
    return stopping;
  };

  let ready = false;
  void exited.then(({ code, signal }) => {
    // After startup nobody is waiting on the process: say so when it dies under us.
    if (ready && !stopping) {
      log(`Temporal dev server on ${address} exited (${signal ?? `code ${code}`}):\n${output.text()}`);
    }
  });

  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000;
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    const ended = await Promise.race([exited, delay(250).then(() => undefined)]);
    if (spawnError || ended) {
      await stop();
      const how = spawnError?.message ?? (ended?.signal ? `signal ${ended.signal}` : `exit code ${ended?.code}`);
      const message = `temporal server start-dev (${cliPath}) ended during startup (${how}):\n${output.text()}`;
      throw /address already in use/.test(output.text()) ? new PortTakenError(message) : new Error(message);
    }
    if (await temporalAnswers(address, 1000)) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`Temporal dev server did not answer on ${address} within ${readyTimeoutMs} ms:\n${output.text()}`);
    }
  }

  try {
    await registerSearchAttributesOnSpawned({ pid: child.pid!, address, port: resolved.port }, resolved.namespace, resolved.searchAttributes, log);
  } catch (err) {
    await stop();
    throw err;
  }
  ready = true;
  log(`Temporal dev server ready on ${address}, namespace ${resolved.namespace} (${Date.now() - started} ms)`);
  return { address, namespace: resolved.namespace, webUiUrl, reused: false, stop };
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The last lines a child printed, for error messages. */
class OutputTail {
  private lines: string[] = [];
  private partial = '';
  constructor(private readonly max: number) {}

  /** Adds a chunk; returns the complete lines it finished. */
  push(chunk: Buffer): string[] {
    const parts = (this.partial + chunk.toString()).split('\n');
    this.partial = parts.pop() ?? '';
    const complete = parts.map((line) => line.trimEnd()).filter((line) => line.length > 0);
    this.lines.push(...complete);
    if (this.lines.length > this.max) this.lines.splice(0, this.lines.length - this.max);
    return complete;
  }

  text(): string {
    return [...this.lines, this.partial].filter(Boolean).join('\n') || '(no output)';
  }
}
