/**
 * At most `limit` commands of one host run at once (ORCHARD_MAX_COMMANDS): every command costs processes,
 * memory and /proc scans on the machine, and a burst of tool calls must queue rather than thrash the host.
 * Waiters are served in arrival order; a waiter whose signal aborts leaves the queue without a slot.
 */
export class CommandSlots {
  private active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new Error(`command slot limit must be a positive integer, got ${limit}`);
  }

  /** Commands holding a slot now. */
  get running(): number {
    return this.active;
  }

  /** Commands waiting for a slot now. */
  get waiting(): number {
    return this.waiters.length;
  }

  /**
   * Resolves with the release function once a slot is free, or with undefined when `signal` aborts first
   * (then no slot is held). Releasing twice is harmless.
   */
  acquire(signal?: AbortSignal): Promise<(() => void) | undefined> {
    if (signal?.aborted) return Promise.resolve(undefined);
    if (this.active < this.limit && this.waiters.length === 0) {
      this.active++;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve) => {
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        this.active++;
        resolve(this.releaser());
      };
      const onAbort = () => {
        const at = this.waiters.indexOf(grant);
        if (at >= 0) this.waiters.splice(at, 1);
        resolve(undefined);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(grant);
    });
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active--;
      const next = this.waiters.shift();
      next?.();
    };
  }
}

/** ORCHARD_MAX_COMMANDS when unset. */
export const DEFAULT_MAX_COMMANDS = 4;
