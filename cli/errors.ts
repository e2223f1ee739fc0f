import { isErrorCode, type ErrorCode } from '../contract/errors';

/** What the CLI prints for a failure (`orchard: <code>: <message>`) and how it exits. */
export interface CliFailure {
  readonly code: ErrorCode | 'internal';
  readonly message: string;
  /** 2: a typed refusal the user can act on; 1: a bug or an error Orchard does not know. */
  readonly exitCode: 1 | 2;
}

/** Where the command was talking to, for messages that say what to check. */
export interface CliErrorContext {
  readonly address?: string;
  readonly namespace?: string;
  readonly taskQueue?: string;
}

/** gRPC status codes the Temporal frontend answers with (both the JS client and the native connection). */
const GRPC = {
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  FAILED_PRECONDITION: 9,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

/**
 * Turns any error a CLI command can meet into one line and an exit code: typed Orchard errors as they are,
 * Temporal's transport and service errors into codes that say what to do, anything else as `internal`.
 */
export function describeCliError(err: unknown, context: CliErrorContext = {}): CliFailure {
  const where = context.address ? ` at ${context.address}` : '';
  const namespace = context.namespace ?? 'default';

  const typed = errorWithCode(err);
  if (typed) return { code: typed.code, message: typed.message, exitCode: 2 };

  if (isNamespaceNotFound(err) || /namespace .*(not found|is not found)/i.test(messages(err))) {
    const ns = isNamespaceNotFound(err) ? err.namespace : namespace;
    return fail(
      'namespace_not_found',
      `namespace ${ns} does not exist on the Temporal server${where}: create it ` +
        `(\`temporal operator namespace create --namespace ${ns}\`) or set TEMPORAL_NAMESPACE to one that exists`,
    );
  }

  const status = grpcStatus(err);
  const text = messages(err);
  if (status === GRPC.UNAVAILABLE || isTransportFailure(err, text)) {
    return fail(
      'temporal_unavailable',
      `cannot reach the Temporal server${where}: start it (or \`orchard dev\`), or point TEMPORAL_ADDRESS ` +
        '(or the temporal.toml profile) at a running frontend, then retry',
    );
  }
  if (/before a worker could process it|no poller/i.test(text)) {
    const queue = context.taskQueue ? ` on task queue ${context.taskQueue}` : '';
    return fail(
      'worker_unavailable',
      `no worker answered${queue}: it may have just stopped or died; start \`orchard worker\` (or wait for ` + 'its supervisor to restart it) and retry',
    );
  }
  if (status === GRPC.DEADLINE_EXCEEDED) {
    return fail('temporal_timeout', `the Temporal server${where} did not answer in time: check that it is healthy and retry`);
  }
  if (status === GRPC.UNAUTHENTICATED || status === GRPC.PERMISSION_DENIED) {
    return fail(
      'temporal_auth_failed',
      `the Temporal server${where} refused the credentials for namespace ${namespace}: check TEMPORAL_API_KEY or ` +
        'the TLS client certificate (TEMPORAL_TLS_*, the temporal.toml profile)',
    );
  }
  if (status !== undefined) {
    return fail('temporal_error', `the Temporal server${where} refused the call: ${firstLine(text)}`);
  }
  if (isDatabaseConnectionFailure(err)) {
    return fail('database_unavailable', `cannot use PostgreSQL (${firstLine(text)}): start it, or fix DATABASE_URL`);
  }
  return { code: 'internal', message: `${firstLine(text)} (ORCHARD_DEBUG=1 prints the stack)`, exitCode: 1 };
}

function fail(code: ErrorCode, message: string): CliFailure {
  return { code, message, exitCode: 2 };
}

/** An error that already carries one of Orchard's codes (OrchardError, ConfigError, ModelError, …). */
function errorWithCode(err: unknown): { code: ErrorCode | 'internal'; message: string } | undefined {
  if (!(err instanceof Error)) return undefined;
  const code = (err as { code?: unknown }).code;
  if (isErrorCode(code)) return { code, message: err.message };
  if (code === 'internal' && err.name === 'OrchardError') return { code, message: err.message };
  return undefined;
}

/**
 * The SDK's NamespaceNotFoundError, known by its name (as its own cross-realm instanceof knows it by a name-keyed
 * marker): this module does not import @temporalio/common, so `orchard --help` and `guard` never load it.
 */
function isNamespaceNotFound(err: unknown): err is Error & { namespace: string } {
  return err instanceof Error && err.name === 'NamespaceNotFoundError' && typeof (err as { namespace?: unknown }).namespace === 'string';
}

/** The gRPC status of the error or of one of its causes. */
function grpcStatus(err: unknown): number | undefined {
  for (let e = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') return code;
  }
  return undefined;
}

/** The native connection's TransportError, and the JS client's "Failed to connect before the deadline". */
function isTransportFailure(err: unknown, text: string): boolean {
  if (err instanceof Error && err.name === 'TransportError') return true;
  return /Failed to connect before the deadline|tcp connect error|Connection refused|dns error|No connection established/i.test(text);
}

/** node-postgres failing to connect (refused, unknown host) or being refused by the server (auth, no database). */
function isDatabaseConnectionFailure(err: unknown): boolean {
  const e = err as { code?: unknown; syscall?: unknown; severity?: unknown };
  if (e?.syscall === 'connect' || e?.syscall === 'getaddrinfo') return true;
  // Both localhost addresses refused: node reports an AggregateError that carries only the code.
  if (err instanceof AggregateError && typeof e.code === 'string' && /^E(CONNREFUSED|HOSTUNREACH|TIMEDOUT)$/.test(e.code)) return true;
  // SQLSTATE classes 08 (connection exception), 28 (invalid authorization), 3D000 (no such database).
  return typeof e?.severity === 'string' && typeof e.code === 'string' && /^(08|28|3D)/.test(e.code);
}

function messages(err: unknown): string {
  const parts: string[] = [];
  for (let e = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    parts.push(e instanceof Error ? e.message : String(e));
  }
  return parts.join(': ');
}

function firstLine(text: string): string {
  return text.split('\n')[0].slice(0, 400);
}
