import type { Writable } from 'node:stream';

/** Progress of a long operation (building the Temporal CLI, booting the stack, a demo), step by step. */
export interface Progress {
  /** A new step: on a terminal the previous one is marked done and a spinner runs beside this one. */
  (line: string): void;
  /** Ends the display: the step in progress is marked done (`ok`) or failed; nothing spins any more. */
  end(ok?: boolean): void;
}

/**
 * On an interactive terminal, a spinner (ora) beside the step in progress and a ✔ beside each finished one; anywhere
 * else (a pipe, a file, CI, TERM=dumb) one plain `<prefix> <line>` per step, so logs stay greppable.
 */
export async function progress(prefix: string, options: { stream?: Writable & { isTTY?: boolean }; interactive?: boolean } = {}): Promise<Progress> {
  const stream = options.stream ?? process.stderr;
  const interactive = options.interactive ?? (stream.isTTY === true && !process.env.CI && process.env.TERM !== 'dumb');
  if (!interactive) {
    const plain = ((line: string) => void stream.write(`${prefix} ${line}\n`)) as Progress;
    plain.end = () => undefined;
    return plain;
  }
  const { default: ora } = await import('ora');
  const spinner = ora({ stream, isEnabled: true, discardStdin: false });
  let current: string | undefined;
  const show = ((line: string) => {
    if (current !== undefined) spinner.stopAndPersist({ symbol: '✔', text: `${prefix} ${current}` });
    current = line;
    spinner.start(`${prefix} ${line}`);
  }) as Progress;
  show.end = (ok = true) => {
    if (current !== undefined) spinner.stopAndPersist({ symbol: ok ? '✔' : '✖', text: `${prefix} ${current}` });
    current = undefined;
    spinner.stop();
  };
  return show;
}
