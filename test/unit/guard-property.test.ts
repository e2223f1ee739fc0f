import test from 'ava';
import fc from 'fast-check';
import type { Parser } from 'web-tree-sitter';
import { decideCommand, loadBashParser } from '../../activities/bash/guard';
import { BRANCH, CORPUS_ENTRIES, WORKTREE } from './guard-corpus';

/**
 * Wrapping never launders a command: whatever the guard refuses stays refused inside `sh -c`, a subshell, a
 * group, a list, a pipe, a substitution, xargs or a wrapper, at any nesting. And wrapping alone does not make
 * the guard refuse commands it allows (otherwise "refuse everything" would pass the first property).
 */

const context = { branch: BRANCH, worktree: WORKTREE, isolated: true };
let parser: Parser;
test.before(async () => {
  parser = await loadBashParser();
});

/** Single-quotes a string for bash. */
const shQuote = (s: string) => `'${s.replace(/'/g, `'"'"'`)}'`;
/** Escapes a command for use inside backticks (bash un-escapes `\\`, `` \` `` and `\$` there). */
const backtickEscape = (s: string) => s.replace(/[\\`$]/g, (c) => `\\${c}`);

// Newlines (not `;`) close groups, so a trailing comment or heredoc in the inner command stays intact.
const WRAPPERS: Record<string, (c: string) => string> = {
  'sh -c': (c) => `sh -c ${shQuote(c)}`,
  'bash -lc': (c) => `bash -lc ${shQuote(c)}`,
  'zsh -lc': (c) => `zsh -lc ${shQuote(c)}`,
  subshell: (c) => `( ${c}\n)`,
  group: (c) => `{ ${c}\n}`,
  'true &&': (c) => `true && ${c}`,
  'false ||': (c) => `false || ${c}`,
  '; true': (c) => `${c}\ntrue`,
  'ls;': (c) => `ls; ${c}`,
  'echo |': (c) => `echo | ${c}`,
  // A space after `$(` / `<(`: `$((` and `((` are arithmetic to bash, which the guard refuses.
  '$(…)': (c) => `echo "$( ${c}\n)"`,
  'x=$(…)': (c) => `x=$( ${c}\n)`,
  '<(…)': (c) => `cat <( ${c}\n)`,
  'if': (c) => `if true; then ${c}\nfi`,
  'while': (c) => `while true; do ${c}\nbreak; done`,
  xargs: (c) => `echo | xargs -0 sh -c ${shQuote(c)} _`,
  env: (c) => `env sh -c ${shQuote(c)}`,
  'env -i': (c) => `env -i PATH=/usr/bin bash -c ${shQuote(c)}`,
  'timeout 5': (c) => `timeout 5 sh -c ${shQuote(c)}`,
  'nice -n 5': (c) => `nice -n 5 bash -c ${shQuote(c)}`,
  'command': (c) => `command bash -c ${shQuote(c)}`,
  'find -exec': (c) => `find . -maxdepth 0 -exec sh -c ${shQuote(c)} \\;`,
};
const BACKTICK = (c: string) => `echo \`${backtickEscape(c)}\``;

const refusedCommands = CORPUS_ENTRIES.filter((e) => e.expect === 'deny').map((e) => e.command);
const wrapperNames = Object.keys(WRAPPERS);

const wrapAll = (command: string, names: readonly string[]) =>
  names.reduce((inner, name) => (name === 'backtick' ? BACKTICK(inner) : WRAPPERS[name](inner)), command);

test('wrapping a refused command never makes it allowed', (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom(...refusedCommands),
      fc.array(fc.constantFrom(...wrapperNames, 'backtick'), { minLength: 1, maxLength: 3 }),
      (command, names) => {
        const wrapped = wrapAll(command, names);
        const d = decideCommand(parser, wrapped, context);
        if (d.allowed) t.log(`allowed after wrapping in ${names.join(' → ')}:\n${wrapped}`);
        return !d.allowed;
      },
    ),
    { numRuns: 3000, seed: 20260601 },
  );
  t.pass();
});

test('every refused corpus command stays refused under every single wrapper', (t) => {
  const leaks: string[] = [];
  for (const command of refusedCommands) {
    for (const name of [...wrapperNames, 'backtick']) {
      const wrapped = wrapAll(command, [name]);
      if (decideCommand(parser, wrapped, context).allowed) leaks.push(`${name}: ${wrapped}`);
    }
  }
  t.deepEqual(leaks, []);
});

const allowedSimple = [
  'git status',
  'git log --oneline -3',
  'git diff --stat',
  'git push origin HEAD',
  'git commit -m "merge the rebase notes"',
  'echo "git merge"',
  'grep -r checkout .',
  'git -C src status',
];

test('wrapping an allowed command keeps it allowed', (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom(...allowedSimple),
      fc.array(fc.constantFrom(...wrapperNames), { minLength: 1, maxLength: 3 }),
      (command, names) => {
        const wrapped = wrapAll(command, names);
        const d = decideCommand(parser, wrapped, context);
        if (!d.allowed) t.log(`refused after wrapping in ${names.join(' → ')}: ${d.reason} ${d.why}\n${wrapped}`);
        return d.allowed;
      },
    ),
    { numRuns: 1000, seed: 20260602 },
  );
  t.pass();
});

test('a refused command anywhere in a list refuses the list', (t) => {
  fc.assert(
    fc.property(
      fc.array(fc.constantFrom(...allowedSimple), { maxLength: 3 }),
      fc.constantFrom(...refusedCommands),
      fc.array(fc.constantFrom(...allowedSimple), { maxLength: 3 }),
      fc.constantFrom('\n', ' && ', ' || ', ' | '),
      (before, refused, after, sep) => {
        const parts = [...before, refused, ...after];
        // `;`-free separators and newlines keep heredocs and comments in the refused command intact.
        const list = sep === '\n' ? parts.join('\n') : parts.map((p) => `{ ${p}\n}`).join(sep);
        return !decideCommand(parser, list, context).allowed;
      },
    ),
    { numRuns: 1000, seed: 20260603 },
  );
  t.pass();
});
