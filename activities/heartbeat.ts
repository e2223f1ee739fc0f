import { Context } from '@temporalio/activity';

/**
 * Runs `work` while heartbeating every second: its heartbeat timeout then notices a lost worker in seconds whatever
 * the work waits on (Temporal, git, a process), and a cancellation reaches the attempt. Outside an activity (a test
 * calling the function directly) it just runs the work.
 */
export async function heartbeating<T>(work: () => Promise<T>, everyMs = 1000): Promise<T> {
  let context: Context;
  try {
    context = Context.current();
  } catch {
    return work();
  }
  context.heartbeat();
  const beat = setInterval(() => context.heartbeat(), everyMs);
  try {
    return await work();
  } finally {
    clearInterval(beat);
  }
}

/** The same activities, those named heartbeating while they run (their options give them a heartbeat timeout). */
export function withHeartbeats<A extends Record<string, unknown>, K extends keyof A & string>(activities: A, names: readonly K[]): A {
  const wrapped: Record<string, unknown> = { ...activities };
  for (const name of names) {
    const fn = activities[name] as unknown as (...args: unknown[]) => Promise<unknown>;
    wrapped[name] = (...args: unknown[]) => heartbeating(() => fn(...args));
  }
  return wrapped as A;
}
