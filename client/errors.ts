/**
 * The client's typed refusal (declared in contract/errors.ts, where activities match on it too). In a module of its own
 * so the CLI can throw it without loading the Temporal client (a third of its start time).
 */
export { OrchardError } from '../contract/errors';
