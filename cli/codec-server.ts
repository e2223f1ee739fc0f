import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { InvalidArgumentError, type Command } from 'commander';
import { OrchardError } from '../client/errors';

/** The Web UI of `temporal server start-dev` (and `orchard dev`), by both of its names. */
const DEFAULT_CODEC_ORIGINS = ['http://127.0.0.1:8233', 'http://localhost:8233'];

const MAX_BODY_BYTES = 64 * 1024 * 1024;

const DEFAULT_CODEC_PORT = 8888;

/**
 * `orchard codec-server [--port N] [--origin URL...] [--host H]`: decodes (and encodes) payloads for the Temporal Web UI
 * and CLI with the keys of ORCHARD_PAYLOAD_KEY* (docs/operations.md#payload-encryption). Runs until SIGINT/SIGTERM.
 */
export function registerCodecServerCommand(program: Command): Command {
  return program
    .command('codec-server')
    .description('serve POST /encode and /decode (Temporal codec server protocol) with the ORCHARD_PAYLOAD_KEY* keys, for the Web UI')
    .option('--port <port>', `port to listen on (default ${DEFAULT_CODEC_PORT})`, portOf)
    .option('--host <host>', 'address to listen on (default 127.0.0.1)')
    .option('--origin <url...>', `Web UI origin(s) allowed by CORS (default ${DEFAULT_CODEC_ORIGINS.join(' ')})`)
    .action(async (options: { port?: number; host?: string; origin?: string[] }) => {
      const { AesGcmPayloadCodec, PayloadKeyError, payloadKeysFromEnv } = await import('../client/codec');
      let keys: ReturnType<typeof payloadKeysFromEnv>;
      try {
        keys = payloadKeysFromEnv();
      } catch (err) {
        if (err instanceof PayloadKeyError) throw new OrchardError(err.code, err.message);
        throw err;
      }
      if (!keys)
        throw new OrchardError('payload_key_invalid', 'ORCHARD_PAYLOAD_KEY is unset: the codec server needs the key(s) the payloads were encrypted with');
      const { server, url } = await startCodecServer({
        codec: new AesGcmPayloadCodec(keys),
        port: options.port ?? DEFAULT_CODEC_PORT,
        host: options.host,
        origins: options.origin,
      });
      const origins = options.origin ?? DEFAULT_CODEC_ORIGINS;
      console.log(
        `[orchard] codec server on ${url} (key id ${keys.current.id}${keys.old.size ? `, old: ${[...keys.old.keys()].join(', ')}` : ''}); CORS for ${origins.join(', ')}`,
      );
      console.log(`[orchard] point the Web UI at it: Data Encoder settings, or \`temporal server start-dev --ui-codec-endpoint ${url}\``);
      await new Promise<void>((resolve) => {
        const stop = () => server.close(() => resolve());
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
    });
}

function portOf(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new InvalidArgumentError('a port number, 0-65535');
  return port;
}

/** A payload in proto JSON form, as the Web UI and `temporal` CLI send it: metadata values and data in base64. */
interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

/**
 * Temporal's codec server protocol: POST /encode and POST /decode with `{payloads: [...]}`, answered in the same
 * shape, through the given codec; CORS for the Web UI's origins (an OPTIONS preflight is answered).
 */
export async function startCodecServer(options: { codec: PayloadCodec; port: number; host?: string; origins?: readonly string[] }): Promise<{
  server: Server;
  url: string;
}> {
  const origins = new Set(options.origins ?? DEFAULT_CODEC_ORIGINS);
  const server = createServer((req, res) => {
    handle(options.codec, origins, req, res).catch((err: unknown) => {
      reply(res, 500, { error: err instanceof Error ? err.message : String(err) });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address() as AddressInfo;
  return { server, url: `http://${address.address}:${address.port}` };
}

async function handle(codec: PayloadCodec, origins: ReadonlySet<string>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const origin = req.headers.origin;
  if (origin && origins.has(origin)) {
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
    res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
    res.setHeader('Access-Control-Allow-Credentials', 'true');
    res.setHeader('Vary', 'Origin');
  }
  const path = (req.url ?? '').split('?')[0]?.replace(/\/+$/, '');
  const endpoint = path === '/encode' ? 'encode' : path === '/decode' ? 'decode' : undefined;
  if (req.method === 'OPTIONS') {
    res.writeHead(endpoint ? 204 : 404).end();
    return;
  }
  if (!endpoint) return reply(res, 404, { error: 'not found: POST /encode or /decode' });
  if (req.method !== 'POST') return reply(res, 405, { error: 'method not allowed: POST' });
  let body: { payloads?: unknown };
  try {
    body = JSON.parse(await readBody(req)) as { payloads?: unknown };
  } catch (err) {
    return reply(res, 400, { error: `body is not JSON: ${err instanceof Error ? err.message : String(err)}` });
  }
  if (!Array.isArray(body?.payloads)) return reply(res, 400, { error: 'body must be {"payloads": [...]}' });
  const payloads = (body.payloads as JsonPayload[]).map(fromJson);
  let result: Payload[];
  try {
    result = endpoint === 'encode' ? await codec.encode(payloads) : await codec.decode(payloads);
  } catch (err) {
    // A payload this server cannot decrypt (unknown key id, failed authentication) is an error, never ciphertext.
    const code = (err as { code?: unknown }).code;
    return reply(res, 400, { error: err instanceof Error ? err.message : String(err), ...(typeof code === 'string' ? { code } : {}) });
  }
  reply(res, 200, { payloads: result.map(toJson) });
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new Error(`body over ${MAX_BODY_BYTES} bytes`));
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
}

function fromJson(payload: JsonPayload): Payload {
  const metadata: Record<string, Uint8Array> = {};
  for (const [key, value] of Object.entries(payload?.metadata ?? {})) metadata[key] = new Uint8Array(Buffer.from(String(value), 'base64'));
  return { metadata, data: new Uint8Array(Buffer.from(payload?.data ?? '', 'base64')) };
}

function toJson(payload: Payload): JsonPayload {
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(payload.metadata ?? {})) if (value) metadata[key] = Buffer.from(value).toString('base64');
  return { metadata, data: Buffer.from(payload.data ?? new Uint8Array()).toString('base64') };
}
