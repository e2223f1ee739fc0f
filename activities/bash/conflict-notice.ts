import { runFileText } from './spawner';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';

/**
 * The conflict notice (ARCHITECTURE invariant 10, GUARD.md §5): after a bash call that leaves a conflicted
 * index, the result carries the ownership rule, the exact abort command and the `session send` shape; before a
 * call that asks git to settle conflicts by itself (`-X ours|theirs`, `-s ours`), the same rule. It annotates
 * and never blocks, in every session: nothing here can refuse or change a command.
 */

type ConflictOperation = 'merge' | 'rebase' | 'am' | 'cherry-pick' | 'revert';

export interface ConflictState {
  operation: ConflictOperation;
  /** The exact command that stops the operation and restores the branch. */
  abort: string;
  /** Unmerged paths (each once), as git lists them. */
  unmerged: string[];
}

/** The placeholder in the `session send` shape: the notice never names an owner it does not know. */
export const OWNER_PLACEHOLDER = '<owner-session-id>';
/** Unmerged paths listed in a notice; the rest are counted. */
const MAX_PATHS = 20;
/** Characters kept of one path in a notice. */
const MAX_PATH_CHARS = 200;
const GIT_TIMEOUT_MS = 10_000;

const ABORT: Record<ConflictOperation, string> = {
  merge: 'git merge --abort',
  rebase: 'git rebase --abort',
  am: 'git am --abort',
  'cherry-pick': 'git cherry-pick --abort',
  revert: 'git revert --abort',
};
const CONTINUE: Record<ConflictOperation, string> = {
  merge: 'git commit',
  rebase: 'git rebase --continue',
  am: 'git am --continue',
  'cherry-pick': 'git cherry-pick --continue',
  revert: 'git revert --continue',
};

const SEND_SHAPE = `session send ${OWNER_PLACEHOLDER} "<task: which branches to integrate and which conflicts to resolve>"`;
const PLACEHOLDER_NOTE =
  `(${OWNER_PLACEHOLDER} is a placeholder: use the id of the session that owns the other branch, from the ` + 'roster; never make one up.)';

function ownershipRule(branch: string | undefined): string {
  const yours = branch ? `Your branch is ${branch}; settle` : 'Settle';
  return (
    'Ownership rule: a conflict belongs to the session that owns the branch. ' +
    `${yours} a conflict yourself only when the changes on both sides are yours. If the other side comes from a ` +
    'branch another session owns, do not pick a side for it: that session decides.'
  );
}

const COMMAND_HINT = new RegExp(
  [String.raw`\b(?:merge|rebase|cherry-pick|revert|am|pull|stash|apply|mergetool)\b`, String.raw`\b(?:checkout|switch)\b[^\n;&|]*\s(?:-m|--merge)\b`].join('|'),
);
const OUTPUT_HINT = /conflict|unmerged/i;

/**
 * A cheap hint, not a verdict: true when the command text names an operation that can leave conflicts, or its
 * output mentions conflicts or unmerged paths. It decides only whether probeConflict runs (two git calls), so it
 * leans to yes. It misses a script that runs a merge with its output silenced; the next command whose output
 * shows the conflict (`git status`: "Unmerged paths") or that names one of the operations is probed.
 */
export function mightHaveConflicts(command: string, result: { stdout: string; stderr: string }): boolean {
  return COMMAND_HINT.test(command) || OUTPUT_HINT.test(result.stdout) || OUTPUT_HINT.test(result.stderr);
}

/**
 * git for the probe, in a session worktree but outside the runner's supervision: so only the repository's
 * config is read (not the session HOME's ~/.gitconfig, which the agent can write), fsmonitor is off and hooks
 * are off, and no optional lock is taken.
 */
function git(cwd: string, args: string[]): Promise<string> {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    LC_ALL: 'C',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_OPTIONAL_LOCKS: '0',
  };
  const safe = ['-c', 'core.fsmonitor=false', '-c', 'core.hooksPath=/dev/null'];
  return runFileText('git', [...safe, ...args], { cwd, env, timeoutMs: GIT_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 });
}

const MARKERS = ['rebase-merge', 'rebase-apply', 'MERGE_HEAD', 'CHERRY_PICK_HEAD', 'REVERT_HEAD'] as const;

/** Which operation the markers say is in progress, with git's own precedence (wt-status.c): a rebase wins. */
function operationOf(has: Record<(typeof MARKERS)[number] | 'applying', boolean>): ConflictOperation | undefined {
  if (has['rebase-apply']) return has.applying ? 'am' : 'rebase';
  if (has['rebase-merge']) return 'rebase';
  if (has.MERGE_HEAD) return 'merge';
  if (has.CHERRY_PICK_HEAD) return 'cherry-pick';
  if (has.REVERT_HEAD) return 'revert';
  return undefined;
}

/**
 * The conflict in progress in `worktree`, if any: unmerged index entries *and* an in-progress merge, rebase,
 * am, cherry-pick or revert. The markers are found with `git rev-parse --git-path` (in a linked worktree `.git`
 * is a file and they live in the worktree's admin dir). Unmerged entries without a marker — a `git stash pop`
 * or `git apply --3way` conflict — are not reported: there is no operation to abort. Errors (not a repository,
 * git missing) read as "no conflict": the notice must never fail a command.
 */
export async function probeConflict(worktree: string): Promise<ConflictState | undefined> {
  try {
    const args = ['rev-parse', '--path-format=absolute', ...MARKERS.flatMap((m) => ['--git-path', m])];
    const paths = (await git(worktree, args)).split('\n').slice(0, MARKERS.length);
    if (paths.length < MARKERS.length) return undefined;
    const exists = (p: string) =>
      fs.lstat(p).then(
        () => true,
        () => false,
      );
    const found = await Promise.all(paths.map(exists));
    const has = Object.fromEntries(MARKERS.map((m, i) => [m, found[i]])) as Record<(typeof MARKERS)[number], boolean>;
    const rebaseApply = paths[MARKERS.indexOf('rebase-apply')];
    const applying = has['rebase-apply'] && (await exists(path.join(rebaseApply, 'applying')));
    const operation = operationOf({ ...has, applying });
    if (!operation) return undefined;
    const listed = await git(worktree, ['ls-files', '--unmerged', '-z']);
    // Entries are `<mode> <object> <stage>\t<path>`, one per stage.
    const entries = listed.split('\0').filter(Boolean);
    const unmerged = [...new Set(entries.map((entry) => entry.slice(entry.indexOf('\t') + 1)))];
    if (unmerged.length === 0) return undefined;
    return { operation, abort: ABORT[operation], unmerged };
  } catch {
    return undefined;
  }
}

function shownPath(p: string): string {
  const oneLine = p.replace(/[\r\n]/g, '?');
  return oneLine.length > MAX_PATH_CHARS ? `${oneLine.slice(0, MAX_PATH_CHARS)}…` : oneLine;
}

/** The text appended to a bash result that left `state` behind. At most MAX_PATHS paths; bounded length. */
export function conflictNotice(state: ConflictState, options: { branch: string }): string {
  const n = state.unmerged.length;
  const shown = state.unmerged.slice(0, MAX_PATHS).map((p) => `  ${shownPath(p)}`);
  if (n > MAX_PATHS) shown.push(`  … and ${n - MAX_PATHS} more (git status lists them all)`);
  return [
    `[orchard] A ${state.operation} stopped on conflicts in this worktree (branch ${options.branch}); ` + `${n} unmerged path${n === 1 ? '' : 's'}:`,
    ...shown,
    ownershipRule(options.branch),
    `- Not yours to decide: stop it with \`${state.abort}\` (this restores the branch), then hand the conflict ` + `to its owner: ${SEND_SHAPE}`,
    `  ${PLACEHOLDER_NOTE}`,
    `- Yours: resolve the files, \`git add\` them, then \`${CONTINUE[state.operation]}\`.`,
    'This is a notice; nothing was blocked.',
  ].join('\n');
}

const DECIDING_SUBCOMMANDS = new Set(['merge', 'rebase', 'cherry-pick', 'revert', 'pull']);
/** Global options of git that take the next word as their value. */
const GLOBAL_WITH_VALUE = new Set(['-C', '-c', '--git-dir', '--work-tree', '--namespace', '--config-env', '--super-prefix']);
const SIDES = new Set(['ours', 'theirs']);

/**
 * Splits command text into simple commands of words, with quotes removed: `;`, `&`, `|`, newlines, parentheses,
 * backticks and `$(` end a command. Word level only, no expansion; good enough for a notice.
 */
function simpleCommands(text: string): string[][] {
  const commands: string[][] = [];
  let words: string[] = [];
  let word = '';
  let inWord = false;
  const endWord = () => {
    if (inWord) words.push(word);
    word = '';
    inWord = false;
  };
  const endCommand = () => {
    endWord();
    if (words.length > 0) commands.push(words);
    words = [];
  };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "'") {
      const close = text.indexOf("'", i + 1);
      const end = close < 0 ? text.length : close;
      word += text.slice(i + 1, end);
      inWord = true;
      i = end;
    } else if (c === '"') {
      inWord = true;
      for (i++; i < text.length && text[i] !== '"'; i++) {
        if (text[i] === '\\' && i + 1 < text.length && '"\\$`'.includes(text[i + 1])) i++;
        word += text[i];
      }
    } else if (c === '\\') {
      if (i + 1 < text.length && text[i + 1] !== '\n') {
        word += text[i + 1];
        inWord = true;
      }
      i++;
    } else if (c === '$' && text[i + 1] === '(') {
      endCommand();
      i++;
    } else if (';&|()`\n'.includes(c)) {
      endCommand();
    } else if (/\s/.test(c)) {
      endWord();
    } else {
      word += c;
      inWord = true;
    }
  }
  endCommand();
  return commands;
}

/** The conflict-deciding options of one git invocation's arguments (after the subcommand). */
function decidingOptions(args: string[]): string[] {
  const found: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const next = args[i + 1];
    // Any unique prefix of --strategy-option (`--strategy-` already is one); short options may be bundled.
    const strategyOption = /^--strategy-(?:o(?:p(?:t(?:i(?:o(?:n)?)?)?)?)?)?(?:=(.*))?$/.exec(a);
    const strategy = /^--strategy(?:=(.*))?$/.exec(a);
    const shortX = /^-[A-Za-z]*?X(.*)$/.exec(a);
    const shortS = /^-[A-Za-z]*?s(.*)$/.exec(a);
    if (strategyOption) {
      const value = strategyOption[1] ?? next;
      if (SIDES.has(value ?? '')) found.push(strategyOption[1] === undefined ? `${a} ${value}` : a);
    } else if (strategy) {
      const value = strategy[1] ?? next;
      if (value === 'ours') found.push(strategy[1] === undefined ? `${a} ${value}` : a);
    } else if (shortX) {
      const value = shortX[1] || next;
      if (SIDES.has(value ?? '')) found.push(shortX[1] ? a : `${a} ${value}`);
    } else if (shortS && !a.startsWith('--')) {
      const value = shortS[1] || next;
      if (value === 'ours') found.push(shortS[1] ? a : `${a} ${value}`);
    }
  }
  return found;
}

/** `{ subcommand, options }` for each git invocation in `words` that decides conflicts through a strategy. */
function intentsIn(words: string[]): Array<{ subcommand: string; options: string[] }> {
  const intents: Array<{ subcommand: string; options: string[] }> = [];
  for (let i = 0; i < words.length; i++) {
    if (path.posix.basename(words[i]) !== 'git') continue;
    let j = i + 1;
    while (j < words.length && words[j].startsWith('-')) j += GLOBAL_WITH_VALUE.has(words[j]) ? 2 : 1;
    const subcommand = words[j];
    if (subcommand === undefined || !DECIDING_SUBCOMMANDS.has(subcommand)) continue;
    const options = decidingOptions(words.slice(j + 1));
    if (options.length > 0) intents.push({ subcommand, options });
  }
  return intents;
}

function findIntents(text: string, depth: number): Array<{ subcommand: string; options: string[] }> {
  const intents: Array<{ subcommand: string; options: string[] }> = [];
  for (const words of simpleCommands(text)) {
    intents.push(...intentsIn(words));
    // A quoted word with spaces may be a command itself (`bash -c '…'`, `sh -c "…"`): look inside it too.
    if (depth >= 3) continue;
    for (const w of words) if (/\s/.test(w) && /\bgit\b/.test(w)) intents.push(...findIntents(w, depth + 1));
  }
  return intents;
}

/**
 * The note to show before a command that lets git decide conflicts by itself: `-X ours|theirs` (`-Xours`,
 * `--strategy-option[=| ]ours|theirs`, its unique prefixes) or the `ours` strategy (`-s ours`, `--strategy=ours`)
 * on merge, rebase, cherry-pick, revert or pull. Such a merge ends clean, with no conflicted index for the
 * probe to see, so the intent is what gets annotated. Word level, leaning to false positives (a notice costs
 * nothing): the text of `echo "git merge -X theirs"` or of a commit message counts, and so does a `bash -c '…'`
 * string. Not seen: options inside other files (scripts, aliases, `pull.twohead` config), and words built at
 * run time. An argument of another option (`git log --grep='-X ours'`) is not a git merge and does not count.
 */
export function strategyOptionIntent(command: string, options: { branch?: string } = {}): string | undefined {
  const intents = findIntents(command, 0);
  if (intents.length === 0) return undefined;
  const { subcommand } = intents[0];
  const flags = [...new Set(intents.flatMap((i) => i.options))].map((o) => `\`${o}\``).join(', ');
  const abort = ABORT[subcommand === 'pull' ? 'merge' : (subcommand as ConflictOperation)];
  return [
    `[orchard] This command passes ${flags} to \`git ${subcommand}\`: git settles conflicting changes by itself, ` +
      'keeping one side and dropping the other, and leaves no conflicted index to show it. That decides a conflict.',
    ownershipRule(options.branch),
    `If any conflicting change belongs to another session, run it without that option; when it stops on ` +
      `conflicts, stop it with \`${abort}\`${subcommand === 'pull' ? ' (or `git rebase --abort`)' : ''} and ` +
      `hand the conflict to its owner: ${SEND_SHAPE}`,
    PLACEHOLDER_NOTE,
    'This is a notice; nothing was blocked.',
  ].join('\n');
}

export interface BashNoticeInput {
  /** The session worktree the command ran in. */
  worktree: string;
  /** The session's branch, named in the ownership rule. */
  branch: string;
  command: string;
  result: { stdout: string; stderr: string };
}

/**
 * The notices for one bash call, for the bash tool to add to its result: `before` (from the command text alone;
 * it can be computed before the command runs) and `after` (the probe, run only when the hint says so). Never
 * throws; either field is absent when there is nothing to say.
 */
export async function noticeForBash(input: BashNoticeInput): Promise<{ before?: string; after?: string }> {
  const notices: { before?: string; after?: string } = {};
  const before = strategyOptionIntent(input.command, { branch: input.branch });
  if (before) notices.before = before;
  if (mightHaveConflicts(input.command, input.result)) {
    const state = await probeConflict(input.worktree);
    if (state) notices.after = conflictNotice(state, { branch: input.branch });
  }
  return notices;
}
