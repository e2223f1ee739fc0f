import { ApplicationFailure, type LogLevel, type LogMetadata, type Logger } from '@temporalio/common';
import { isErrorCode } from '../contract/errors';
import { Runtime } from '@temporalio/worker';
import pino from 'pino';

/**
 * Structured logs (JSON lines on stderr) for the worker and the SDK. ORCHARD_LOG_LEVEL picks the level;
 * the default `warn` keeps worker lifecycle chatter out of the way of progress lines.
 */
export function createLogger(level = process.env.ORCHARD_LOG_LEVEL ?? 'warn'): pino.Logger {
  return pino({ name: 'orchard', level }, pino.destination(2));
}

const LEVELS: Record<LogLevel, pino.Level> = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' };

/**
 * The level an SDK log line is written at. Two of the SDK's warnings are not problems here: a host-queue worker runs
 * no workflows by design (debug), and an activity or workflow that failed with one of Orchard's typed, final refusals
 * (`repository_not_found`, `scenario_exhausted`, …) did what it should — that is information (info), not a warning;
 * a failure that will be retried, or one Orchard does not know, stays a warning.
 */
export function sdkLogLevel(level: LogLevel, message: string, meta?: LogMetadata): LogLevel {
  if (message.startsWith('No workflows registered')) return 'DEBUG';
  if (level === 'WARN' && (message === 'Activity failed' || message === 'Workflow failed') && isTypedRefusal(meta?.error)) return 'INFO';
  return level;
}

function isTypedRefusal(error: unknown): boolean {
  // The workflow's failure may wrap the activity's (ActivityFailure → ApplicationFailure): look through causes.
  for (let e = error, depth = 0; e && typeof e === 'object' && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    // By shape, not instanceof: a workflow's log reaches the worker through a sink, copied out of the isolate.
    const failure = e as Partial<ApplicationFailure>;
    if (failure.name === 'ApplicationFailure' || e instanceof ApplicationFailure) return failure.nonRetryable === true && isErrorCode(failure.type);
  }
  return false;
}

/**
 * Routes the Temporal SDK's logs (worker, workflow and activity loggers) into pino. With `sdkMetricsAddress`
 * (`host:port`), the runtime also exports the SDK's metrics there in Prometheus' format (worker/metrics-server.ts
 * passes them on at `/metrics/temporal`).
 */
export function installSdkLogger(logger: pino.Logger, sdkMetricsAddress?: string): void {
  const write = (level: LogLevel, message: string, meta?: LogMetadata) => {
    logger[LEVELS[sdkLogLevel(level, message, meta)]](meta ?? {}, message);
  };
  const sdkLogger: Logger = {
    log: write,
    trace: (message, meta) => write('TRACE', message, meta),
    debug: (message, meta) => write('DEBUG', message, meta),
    info: (message, meta) => write('INFO', message, meta),
    warn: (message, meta) => write('WARN', message, meta),
    error: (message, meta) => write('ERROR', message, meta),
  };
  // The core's own logs (Rust) are forwarded into the same logger: left to the default they are printed on stdout
  // with terminal colours, where they break `--json` output (seen: `orchard demo team --json` on a loaded machine).
  Runtime.install({
    logger: sdkLogger,
    telemetryOptions: {
      logging: { forward: {}, filter: { core: 'WARN', other: 'ERROR' } },
      ...(sdkMetricsAddress ? { metrics: { prometheus: { bindAddress: sdkMetricsAddress } } } : {}),
    },
  });
}
