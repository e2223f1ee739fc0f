import type { LogLevel, LogMetadata, Logger } from '@temporalio/common';
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
 * Routes the Temporal SDK's logs (worker, workflow and activity loggers) into pino. With `sdkMetricsAddress`
 * (`host:port`), the runtime also exports the SDK's metrics there in Prometheus' format (worker/metrics-server.ts
 * passes them on at `/metrics/temporal`).
 */
export function installSdkLogger(logger: pino.Logger, sdkMetricsAddress?: string): void {
  const write = (level: LogLevel, message: string, meta?: LogMetadata) => {
    // A host-queue worker runs no workflows by design; the SDK warns about that on every start.
    const effective = message.startsWith('No workflows registered') ? 'DEBUG' : level;
    logger[LEVELS[effective]](meta ?? {}, message);
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
