import { loadClientConfigProfile, toClientOptions } from '@temporalio/envconfig';
import type { ConnectionOptions } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import type { TLSConfig } from '@temporalio/common/lib/internal-non-workflow';
import { AesGcmPayloadCodec, payloadKeysFromEnv } from './codec';

/**
 * The one place connection settings are read: the client a service imports, the `orchard` command line and the worker
 * all resolve Temporal through this module.
 *
 * Where Temporal is and how to reach it, read the way the Temporal CLI reads it (`@temporalio/envconfig`):
 * the profile `TEMPORAL_PROFILE` (default `default`) of `TEMPORAL_CONFIG_FILE` (default
 * `~/.config/temporalio/temporal.toml`), overridden by `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`,
 * `TEMPORAL_API_KEY`, `TEMPORAL_TLS*` and `TEMPORAL_GRPC_META_*`.
 */
export interface TemporalSettings {
  /** Frontend `host:port`; undefined when nothing is configured (then the embedded dev server is used). */
  readonly address?: string;
  readonly namespace: string;
  /** true: TLS with the system roots; an object: certificates / server name; false or undefined: plaintext. */
  readonly tls?: TLSConfig | boolean;
  /** Sent as a bearer token; implies TLS unless TLS is explicitly disabled. Never logged. */
  readonly apiKey?: string;
  /** Extra gRPC headers (`TEMPORAL_GRPC_META_*`, `grpc_meta` in the profile). */
  readonly metadata?: Record<string, string>;
}

/** Settings with an address: what a connection is made from. */
export type TemporalTarget = TemporalSettings & { readonly address: string };

export const DEFAULT_NAMESPACE = 'default';

/** temporal.toml cannot be read or parsed, or names a profile that does not exist. */
export class TemporalConfigError extends Error {
  readonly code = 'temporal_config_invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TemporalConfigError';
  }
}

export function loadTemporalSettings(env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  // An empty variable means unset, as everywhere else in Orchard (envconfig would take `TEMPORAL_ADDRESS=` literally).
  const vars: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) if (value !== undefined && value !== '') vars[key] = value;
  let connect: ReturnType<typeof toClientOptions>;
  try {
    connect = toClientOptions(loadClientConfigProfile({ overrideEnvVars: vars }));
  } catch (err) {
    const file = vars.TEMPORAL_CONFIG_FILE ?? '~/.config/temporalio/temporal.toml';
    const profile = vars.TEMPORAL_PROFILE ? ` (profile ${vars.TEMPORAL_PROFILE})` : '';
    const why = err instanceof Error ? err.message : String(err);
    throw new TemporalConfigError(`Temporal client configuration ${file}${profile}: ${why}`, { cause: err });
  }
  const options = connect.connectionOptions;
  const tls = options.tls ?? undefined;
  const apiKey = typeof options.apiKey === 'string' && options.apiKey !== '' ? options.apiKey : undefined;
  // envconfig fills metadata from grpc_meta / TEMPORAL_GRPC_META_*, which are strings.
  const metadata = options.metadata && Object.keys(options.metadata).length > 0 ? { ...(options.metadata as Record<string, string>) } : undefined;
  return {
    address: options.address || undefined,
    namespace: connect.namespace || DEFAULT_NAMESPACE,
    ...(tls !== undefined ? { tls } : {}),
    ...(apiKey ? { apiKey } : {}),
    ...(metadata ? { metadata } : {}),
  };
}

/** Options for a client Connection (the CLI, OrchardClient, the worker's own client). */
export function clientConnectionOptions(target: TemporalTarget): ConnectionOptions {
  return { address: target.address, tls: target.tls, apiKey: target.apiKey, metadata: target.metadata };
}

/** One line for logs: where, which namespace, whether TLS / an API key are in use (never the key itself). */
export function describeTarget(target: TemporalTarget): string {
  const extras = [target.tls ? 'TLS' : undefined, target.apiKey ? 'API key' : undefined].filter(Boolean);
  return `${target.address} (namespace ${target.namespace}${extras.length ? `, ${extras.join(', ')}` : ''})`;
}

/**
 * The failure converter that moves failure messages and stack traces into an encrypted payload (contract/failure-converter.ts),
 * by path: the SDK loads it with `require()` in the client and the worker, and a workflow bundle must be built with it.
 */
export const ENCRYPTED_FAILURE_CONVERTER_PATH = require.resolve('../contract/failure-converter');

/**
 * The data converter client, CLI and worker share: AES-256-GCM payload encryption when ORCHARD_PAYLOAD_KEY is set
 * (client/codec.ts), with failure messages and stack traces encrypted too, else undefined (the SDK's default: plaintext
 * JSON and plaintext failures). Bad key material throws PayloadKeyError.
 */
export function dataConverterFromEnv(env: NodeJS.ProcessEnv = process.env): DataConverter | undefined {
  const keys = payloadKeysFromEnv(env);
  return keys ? { payloadCodecs: [new AesGcmPayloadCodec(keys)], failureConverterPath: ENCRYPTED_FAILURE_CONVERTER_PATH } : undefined;
}
