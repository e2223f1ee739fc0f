/**
 * Task queue names, in a module that imports nothing (contract/messages.ts re-exports them): the worker's
 * configuration reads them without loading the Temporal SDK, which `orchard --help` and `guard` never need.
 */

/** The shared task queue (workflows and host-free activities) when ORCHARD_TASK_QUEUE names none. */
export const DEFAULT_TASK_QUEUE = 'orchard';

/** Activities that touch a worktree run on the queue of the host whose disk holds it. */
export const hostTaskQueue = (hostId: string): string => `orchard-host-${hostId}`;
