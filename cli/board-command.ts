import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { ClosureResult } from '../workflows/team/closure';

/**
 * `orchard board check <file.json> [--json]`: the completion closure validator the TeamRun workflow certifies
 * with, run on a board described in a file (docs/board-format.md). Exit 0 for any outcome; a file that cannot be
 * read or does not match the format is `board_file_invalid` with the JSON path at fault, exit 2 (through main).
 * `orchard board schema` prints the format's JSON Schema. The validator and its schema (zod) load when a board
 * command runs, not with every other command.
 */
export function registerBoardCommand(program: Command): Command {
  const board = program.command('board').description('check a team board file against the completion closure rules');
  board
    .command('check <file>')
    .description('print the outcome (delivered | not_delivered | not_applicable | cancelled) and the reasons; exit 0 for any outcome')
    .option('--json', 'print {outcome, candidate, reasons, evidence, validatorVersion} as JSON')
    .action(async (file: string, options: { json?: boolean }) => {
      const { BoardFileError, parseBoardFile } = await import('./board-file');
      const { validateClosure } = await import('../workflows/team/closure');
      const path = resolve(file);
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (err) {
        throw new BoardFileError('$', `cannot read board file ${path}: ${err instanceof Error ? err.message : String(err)}`);
      }
      const result = validateClosure(parseBoardFile(text, path));
      console.log(options.json ? JSON.stringify(result, null, 2) : formatClosure(result));
    });
  board
    .command('schema')
    .description('print the JSON Schema of the board file (docs/board-format.schema.json)')
    .action(async () => {
      const { boardJsonSchema } = await import('./board-file');
      console.log(JSON.stringify(boardJsonSchema(), null, 2));
    });
  return board;
}

function formatClosure(result: ClosureResult): string {
  const { evidence } = result;
  const lines = [`outcome: ${result.outcome} (candidate: ${result.candidate})`];
  if (result.reasons.length === 0) lines.push('reasons: none');
  else {
    lines.push(`reasons (${result.reasons.length}):`);
    for (const r of result.reasons) lines.push(`  ${r.code}${r.taskId === undefined ? '' : ` [${r.taskId}]`}: ${r.detail}`);
  }
  lines.push(`evidence: ${evidence.taskIds.length} closed task(s), ${evidence.outputIds.length} output(s), validator ${result.validatorVersion}`);
  for (const r of evidence.resolutions) {
    const how = r.kind === 'replaced_by' ? ` ${r.by}` : r.kind === 'user_scope_removed' ? ` (user event ${r.userEventId})` : '';
    lines.push(`  ${r.taskId}: ${r.kind}${how}`);
  }
  return lines.join('\n');
}
