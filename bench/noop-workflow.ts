import { condition, defineUpdate, setHandler } from '@temporalio/workflow';

/**
 * The route section's baseline (bench/route.ts): the smallest thing a Temporal update can reach. Bundled on its own
 * and run by a Worker of its own queue, so the round trip measured is the server's and the SDK's alone.
 */
export const noopUpdate = defineUpdate<void>('noop');

/** Answers `noop` until cancelled. */
export async function benchNoop(): Promise<void> {
  setHandler(noopUpdate, () => undefined);
  await condition(() => false);
}
