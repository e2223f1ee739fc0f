import readline from 'node:readline';
import { PassThrough } from 'node:stream';
import test from 'ava';
import { progress } from '../../worker/progress';

function capture(isTTY: boolean) {
  // A terminal stands in for the user's: what a tty.WriteStream offers ora (its cursor moves write ANSI sequences).
  const stream = Object.assign(new PassThrough(), { isTTY, columns: 80 });
  Object.assign(stream, {
    cursorTo: (x: number, y?: number) => readline.cursorTo(stream, x, y),
    moveCursor: (dx: number, dy: number) => readline.moveCursor(stream, dx, dy),
    clearLine: (dir: -1 | 0 | 1) => readline.clearLine(stream, dir),
  });
  let out = '';
  stream.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return { stream, out: () => out };
}

test('on a terminal, a spinner runs beside the step in progress and each finished step gets a ✔ (✖ for a failed end)', async (t) => {
  const { stream, out } = capture(true);
  const show = await progress('[x]', { stream, interactive: true });
  show('building');
  await new Promise((r) => setTimeout(r, 250));
  show('booting');
  show.end(false);
  const text = out();
  t.regex(text, /✔ \[x\] building\n/);
  t.regex(text, /✖ \[x\] booting\n/);
  // The spinner drew frames (cursor control) between the lines: not plain text.
  t.regex(text, /\u001b\[/);
});

test('in a pipe, CI or a dumb terminal: one plain line per step, nothing else', async (t) => {
  const { stream, out } = capture(false);
  const show = await progress('[x]', { stream });
  show('building');
  show('booting');
  show.end();
  t.is(out(), '[x] building\n[x] booting\n');
});
