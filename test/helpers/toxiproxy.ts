import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../../worker/dev-server';
import type { TestFn } from 'ava';
import { Toxiproxy, type Proxy } from 'toxiproxy-node-client';
import { resolveToxiproxyServer } from '../../worker/toxiproxy';

/** How long the server may take to answer after its start (ORCHARD_TEST_TOXIPROXY_START_MS). */
const START_MS = Number(process.env.ORCHARD_TEST_TOXIPROXY_START_MS ?? 15_000);

/** A proxy in front of one upstream: connections through `listen` reach it until `cut()`. */
export interface CuttableProxy {
  /** `127.0.0.1:<port>` the proxy listens on. */
  readonly listen: string;
  /** The upstream `host:port`. */
  readonly upstream: string;
  /** Drops every connection through the proxy and refuses new ones, until `restore()`. */
  cut(): Promise<void>;
  /** Accepts connections again (on the same port). */
  restore(): Promise<void>;
  /** `cut()`, then `restore()` after `ms`. */
  cutFor(ms: number): Promise<void>;
}

export interface ToxiproxyServer {
  /** The API, e.g. `http://127.0.0.1:<port>`. */
  readonly api: string;
  /** A proxy on a free loopback port in front of `upstream` (`host:port`). */
  proxy(upstream: string): Promise<CuttableProxy>;
  /** A proxy in front of the PostgreSQL server of `databaseUrl`, and that URL rewritten to go through it. */
  proxyDatabase(databaseUrl: string): Promise<CuttableProxy & { url: string }>;
  stop(): Promise<void>;
}

/**
 * One toxiproxy-server for the whole test file, started before its tests and stopped after them; call at the top
 * level. Without a server binary the tests fail (never skip), with the reason `.ci/run` recorded when its build failed.
 */
export function sharedToxiproxy(test: TestFn): () => ToxiproxyServer {
  let server: ToxiproxyServer | undefined;
  test.before(async () => {
    server = await startToxiproxy();
  });
  test.after.always(async () => {
    await server?.stop();
  });
  return () => {
    if (!server) throw new Error('sharedToxiproxy: the before hook has not run');
    return server;
  };
}

async function serverBinary(): Promise<string> {
  try {
    // Built by `.ci/run` (scripts/ensure-toxiproxy.ts), never here: a first build inside a hook's timeout would flake.
    return await resolveToxiproxyServer(() => undefined, { build: false });
  } catch (err) {
    const recorded = process.env.ORCHARD_TOXIPROXY_UNAVAILABLE;
    const reason = recorded ? `its build failed: ${recorded}` : (err as Error).message;
    throw new Error(`toxiproxy-server is unavailable, and the fault tests need it: ${reason}`);
  }
}

export async function startToxiproxy(): Promise<ToxiproxyServer> {
  const binary = await serverBinary();
  // A free port can be taken between our probe and the server's bind: try a few.
  let lastFailure = '';
  for (let attempt = 0; attempt < 3; attempt += 1) {
    const port = await freePort('127.0.0.1');
    const started = await launch(binary, port);
    if ('server' in started) return started.server;
    lastFailure = started.failure;
  }
  throw new Error(`toxiproxy-server did not start: ${lastFailure}`);
}

async function launch(binary: string, port: number): Promise<{ server: ToxiproxyServer } | { failure: string }> {
  const child = spawn(binary, ['-host', '127.0.0.1', '-port', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4096));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let exited: string | undefined;
  const exit = new Promise<void>((resolve) => {
    child.on('exit', (code, signal) => {
      exited = `exited (${signal ?? code})`;
      resolve();
    });
    child.on('error', (err) => {
      exited = err.message;
      resolve();
    });
  });
  const api = `http://127.0.0.1:${port}`;
  const toxiproxy = new Toxiproxy(api);
  const deadline = Date.now() + START_MS;
  for (;;) {
    if (exited) return { failure: `${exited}: ${output.trim()}` };
    try {
      await toxiproxy.getVersion();
      break;
    } catch {
      if (Date.now() > deadline) {
        await stop(child, exit);
        return { failure: `no answer on ${api} within ${START_MS} ms: ${output.trim()}` };
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  let proxies = 0;
  const proxy = async (upstream: string): Promise<CuttableProxy> => {
    proxies += 1;
    // Port 0: the server binds a free one and reports it as the proxy's listen address.
    let current: Proxy = await toxiproxy.createProxy({ name: `p${proxies}`, listen: '127.0.0.1:0', upstream });
    const listen = current.listen;
    const setEnabled = async (enabled: boolean) => {
      current = await current.update({ enabled, listen, upstream });
    };
    return {
      listen,
      upstream,
      cut: () => setEnabled(false),
      restore: () => setEnabled(true),
      async cutFor(ms) {
        await setEnabled(false);
        await new Promise((resolve) => setTimeout(resolve, ms));
        await setEnabled(true);
      },
    };
  };
  return {
    server: {
      api,
      proxy,
      async proxyDatabase(databaseUrl) {
        const url = new URL(databaseUrl);
        const cuttable = await proxy(`${url.hostname}:${url.port || '5432'}`);
        const [host, port] = splitHostPort(cuttable.listen);
        url.hostname = host;
        url.port = port;
        return { ...cuttable, url: url.toString() };
      },
      stop: () => stop(child, exit),
    },
  };
}

async function stop(child: ChildProcess, exit: Promise<void>): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exit;
  clearTimeout(killer);
}

function splitHostPort(address: string): [string, string] {
  const at = address.lastIndexOf(':');
  return [address.slice(0, at), address.slice(at + 1)];
}
