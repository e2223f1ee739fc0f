/**
 * The calls this worker process runs now, by what they run for: its tool calls by lease holder (a session's execution
 * chain), its model calls by workflow (`modelCallKey`). A cancelled session stops its own at once through `stop`,
 * instead of waiting for Temporal to deliver the activity's cancellation with its next heartbeat. What is stopped is
 * told apart from a lost lease or a worker shutting down: the tool call ends `cancelled`, as when the cancellation
 * arrives; a model call asks for its cancellation at once (one heartbeat now).
 */
export class RunningCalls {
  private readonly byHolder = new Map<string, Set<AbortController>>();

  /** Registers a call; its signal aborts when the holder's calls are stopped. `done` unregisters it. */
  enter(holder: string): { signal: AbortSignal; done: () => void } {
    const controller = new AbortController();
    let calls = this.byHolder.get(holder);
    if (!calls) this.byHolder.set(holder, (calls = new Set()));
    calls.add(controller);
    return {
      signal: controller.signal,
      done: () => {
        calls.delete(controller);
        if (calls.size === 0 && this.byHolder.get(holder) === calls) this.byHolder.delete(holder);
      },
    };
  }

  /** Aborts every call running for `holder`; answers how many. */
  stop(holder: string): number {
    const calls = [...(this.byHolder.get(holder) ?? [])];
    for (const c of calls) c.abort();
    return calls.length;
  }
}
