/**
 * Polls `probe` until it gives a value (anything but undefined or false) and returns it; fails after `timeoutMs`.
 * For tests only: they wait on what the system did, never on a fixed sleep.
 */
export async function waitFor<T>(probe: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
