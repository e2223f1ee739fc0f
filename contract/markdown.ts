/**
 * Markdown that shows text as itself: what the Temporal Web UI renders as a workflow's Current Details. Titles, tasks,
 * commands and error messages come from users and agents, so every piece of them is escaped here, in one place: a
 * `<id> <task>` is not swallowed as HTML, a `|` does not split a table cell, a leading `#` or `-` starts no heading
 * or list, and a newline starts no new block. Pure and workflow-safe: the workflows and the client (static details) use it.
 */

/**
 * The punctuation that can mean something in Markdown (HTML, emphasis, code, links, tables, headings, lists,
 * strikethrough, entities, autolinks). Only these: the Web UI's renderer honours no backslash before `" % ' , / ; = ?
 * @` and would show the backslash (seen in Chromium against UI 2.42), and none of them means anything here.
 */
const PUNCTUATION = /[\\`*_{}[\]()#+\-.!<>|~^:&]/g;

/** `text` on one line, cut to `max` characters (an ellipsis says it was cut). */
function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Plain text, shown as itself inline: one line, at most `max` characters, every punctuation character escaped. */
export function mdText(text: string, max = 200): string {
  return oneLine(text, max).replace(PUNCTUATION, (c) => `\\${c}`);
}

/**
 * A code span showing `text` as itself (a command, an id, a branch): one line, at most `max` characters. Its fence is
 * one backtick longer than the longest run inside, padded with spaces when the text starts or ends with a backtick.
 * In a table cell (`inTable`) a `|` is written `\|`, which GFM turns back into `|` inside the span.
 */
export function mdCode(text: string, max = 120, inTable = false): string {
  const flat = oneLine(text, max);
  if (flat === '') return '';
  const longest = Math.max(0, ...(flat.match(/`+/g) ?? []).map((run) => run.length));
  const fence = '`'.repeat(longest + 1);
  const pad = flat.startsWith('`') || flat.endsWith('`') ? ' ' : '';
  const body = inTable ? flat.replace(/\|/g, '\\|') : flat;
  return `${fence}${pad}${body}${pad}${fence}`;
}

/** One table cell: plain text, or a code span. */
export type MdCell = string | { readonly code: string };

/** A GFM table: a header row, then one row per entry, every cell escaped (text) or fenced (code) on one line. */
export function mdTable(header: readonly string[], rows: readonly (readonly MdCell[])[]): string {
  const cell = (c: MdCell): string => (typeof c === 'string' ? mdText(c, 120) : mdCode(c.code, 120, true));
  const line = (cells: readonly MdCell[]) => `| ${header.map((_, i) => cell(cells[i] ?? '')).join(' | ')} |`;
  return [line(header), `|${header.map(() => ' --- |').join('')}`, ...rows.map(line)].join('\n');
}

/** Blocks (paragraphs, tables, lists) separated by blank lines, so none runs into the next. Empty ones are dropped. */
export function mdBlocks(blocks: readonly (string | undefined | false)[]): string {
  return blocks.filter((b): b is string => typeof b === 'string' && b !== '').join('\n\n');
}
