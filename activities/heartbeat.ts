import { Context } from '@temporalio/activity';

/**
 * Binds `signal` to every call `work` makes that waits on something outside (e.g. every Temporal call on
 * a client: `client.withAbortSignal`). An activity that waits on Temporal, for example on a session's update that only
 * a workflow worker can complete, would otherwise outlive its cancellation: a worker shutting down stops taking
 * workflow tasks, so that wait never ends and neither does the shutdown.
 */
export type AbortBinding = <T>(signal: AbortSignal, work: () => Promise<T>) => Promise<T>;

/**
 * Runs `work` while heartbeating (every second unless `everyMs` says): its heartbeat timeout then notices a lost
 * worker in seconds whatever the work waits on (Temporal, git, a process), and a cancellation (a cancel, a lost
 * heartbeat, the worker shutting down) reaches the attempt and, through `bind`, what it waits on. Outside an activity (a test calling the function
 * directly) it just runs the work.
 */
async function heartbeating<T>(work: () => Promise<T>, options: { everyMs?: number; bind?: AbortBinding } = {}): Promise<T> {
  let context: Context;
  try {
    context = Context.current();
  } catch {
    return work();
  }
  context.heartbeat();
  const beat = setInterval(() => context.heartbeat(), options.everyMs ?? 1000);
  try {
    return await (options.bind ? options.bind(context.cancellationSignal, work) : work());
  } finally {
    clearInterval(beat);
  }
}

/**
 * The same activities, those named heartbeating while they run (their options give them a heartbeat timeout), with
 * their attempt's cancellation bound to what they wait on (`bind`).
 */
export function withHeartbeats<A extends object, K extends keyof A & string>(activities: A, names: readonly K[], bind?: AbortBinding, everyMs?: number): A {
  const wrapped: Record<string, unknown> = { ...(activities as Record<string, unknown>) };
  for (const name of names) {
    const fn = activities[name] as unknown as (...args: unknown[]) => Promise<unknown>;
    wrapped[name] = (...args: unknown[]) => heartbeating(() => fn(...args), { bind, everyMs });
  }
  return wrapped as A;
}
