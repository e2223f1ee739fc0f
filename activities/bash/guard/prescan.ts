import { refusal, type Refusal } from './reasons';

/** Longer commands are refused outright (Claude Code draws the same line). */
const MAX_COMMAND_LENGTH = 10_000;

/**
 * Checks on the raw text, before parsing: length, control characters, and backslash-newline inside a word
 * (bash joins `br\⏎anch` into `branch`; tree-sitter-bash sees two words). A continuation after a blank
 * (`git commit \⏎ -m x`) is what both read the same way and is allowed.
 */
export function prescan(source: string): Refusal | undefined {
  if (source.length > MAX_COMMAND_LENGTH) {
    return refusal('unsupported_input', `${source.slice(0, 80)}…`, `the command is ${source.length} characters long (limit ${MAX_COMMAND_LENGTH})`);
  }
  const control = /[\x00-\x08\x0b-\x1f\x7f]/.exec(source);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).padStart(2, '0');
    return refusal('unsupported_input', around(source, control.index), `the command contains the control character U+00${code}`);
  }
  const continuation = /\\+\n/g;
  for (let m = continuation.exec(source); m; m = continuation.exec(source)) {
    const slashes = m[0].length - 1;
    if (slashes % 2 === 0) continue; // an escaped backslash, then a real newline
    // After a blank or an operator both read a continuation; at the start of a line tree-sitter-bash also
    // swallows the newline before it (`a⏎\⏎b` becomes one command `a b`), so that is refused too.
    const before = m.index === 0 ? '' : source[m.index - 1];
    const lineStart = source.lastIndexOf('\n', m.index - 1);
    const blankLine = /^[ \t]*$/.test(source.slice(lineStart + 1, m.index));
    if (!blankLine && (before === ' ' || before === '\t' || before === '&' || before === '|' || before === ';')) continue;
    return refusal(
      'parser_blind_spot',
      around(source, m.index),
      'a backslash-newline inside a word or at the start of a line: bash joins the lines, the parser reads them differently',
    );
  }
  return undefined;
}

function around(source: string, index: number): string {
  const start = Math.max(0, index - 30);
  return `${start > 0 ? '…' : ''}${source.slice(start, index + 30)}${index + 30 < source.length ? '…' : ''}`;
}
