import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { BoardFileError, boardJsonSchema, parseBoardFile } from '../../cli/board-file';
import { CLOSURE_REASONS } from '../../workflows/team/closure';

const DOCS = join(__dirname, '../../docs');
const FIXTURES = join(__dirname, '../fixtures/boards');

const validBoard = () => JSON.parse(readFileSync(join(FIXTURES, 'delivered.json'), 'utf8'));

/** The JSON path and message of the error parsing `value` as a board file. */
function refusal(t: import('ava').ExecutionContext, value: unknown): BoardFileError {
  const err = t.throws(() => parseBoardFile(typeof value === 'string' ? value : JSON.stringify(value), 'b.json'), { instanceOf: BoardFileError });
  t.is(err.code, 'board_file_invalid');
  return err;
}

test('the committed docs/board-format.schema.json is the one generated from the zod schema (regenerate: orchard board schema)', (t) => {
  t.deepEqual(JSON.parse(readFileSync(join(DOCS, 'board-format.schema.json'), 'utf8')), boardJsonSchema());
});

test('a well-formed board file parses to the same board', (t) => {
  const board = validBoard();
  t.deepEqual(parseBoardFile(JSON.stringify(board), 'b.json'), board);
});

test('a malformed board is refused with the JSON path at fault', (t) => {
  const badStatus = validBoard();
  badStatus.tasks[2].status = 'done';
  const status = refusal(t, badStatus);
  t.is(status.path, 'tasks[2].status');
  t.regex(status.message, /^board file b\.json is malformed at tasks\[2\]\.status: /);

  const negative = validBoard();
  negative.blockers.inboxUnread = -1;
  t.is(refusal(t, negative).path, 'blockers.inboxUnread');

  const fractional = validBoard();
  fractional.outputs[1].generation = 1.5;
  t.is(refusal(t, fractional).path, 'outputs[1].generation');

  const badBy = validBoard();
  badBy.tasks[1].cancel.by = 'member';
  t.is(refusal(t, badBy).path, 'tasks[1].cancel.by');

  const { handoffs: _dropped, ...noHandoffs } = validBoard();
  t.is(refusal(t, noHandoffs).path, 'handoffs');

  const badHandoff = validBoard();
  badHandoff.handoffs[0].state = 'done';
  t.is(refusal(t, badHandoff).path, 'handoffs[0].state');
});

test('a misspelt key is refused by name, not silently dropped (a lost replacesTaskId would change the closure)', (t) => {
  const typo = validBoard();
  typo.tasks[2].replaceTaskId = typo.tasks[2].replacesTaskId;
  delete typo.tasks[2].replacesTaskId;
  const err = refusal(t, typo);
  t.is(err.path, 'tasks[2].replaceTaskId');
});

test('text that is not JSON, or not an object, is refused at the root', (t) => {
  const notJson = refusal(t, '{"teamId": ');
  t.is(notJson.path, '$');
  t.regex(notJson.message, /is not valid JSON/);
  t.is(refusal(t, '[]').path, '$');
});

test('docs/board-format.md documents exactly the reason codes the validator gives', (t) => {
  const doc = readFileSync(join(DOCS, 'board-format.md'), 'utf8');
  const table = doc.slice(doc.indexOf('## Reasons'), doc.indexOf('## Example'));
  const documented = [...table.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]);
  t.deepEqual(documented, Object.keys(CLOSURE_REASONS));
});
