import type { ErrorCode } from '../contract/errors';

/**
 * A refusal with a typed code (see contract/errors.ts) and a message that says what to do instead. In a module
 * of its own so the CLI can throw it without loading the Temporal client (a third of its start time).
 */
export class OrchardError extends Error {
  constructor(
    readonly code: ErrorCode | 'internal',
    message: string,
  ) {
    super(message);
    this.name = 'OrchardError';
  }
}
