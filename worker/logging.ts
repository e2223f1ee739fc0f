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

/** Routes the Temporal SDK's logs (worker, workflow and activity loggers) into pino. */
export function installSdkLogger(logger: pino.Logger): void {
  const sdkLogger: Logger = {
    log: (level: LogLevel, message: string, meta?: LogMetadata) => logger[LEVELS[level]](meta ?? {}, message),
    trace: (message, meta) => logger.trace(meta ?? {}, message),
    debug: (message, meta) => logger.debug(meta ?? {}, message),
    info: (message, meta) => logger.info(meta ?? {}, message),
    warn: (message, meta) => logger.warn(meta ?? {}, message),
    error: (message, meta) => logger.error(meta ?? {}, message),
  };
  Runtime.install({ logger: sdkLogger });
}
