import { cwdInside, describeCwd, resolvePath, type Cwd } from './paths';
import { refusal, type Refusal } from './reasons';
import { exactValue, type Word } from './words';

/**
 * Environment assignments the guard refuses: variables that redirect git (GIT_DIR …), load config or run
 * programs (GIT_CONFIG_*, GIT_SSH_COMMAND, EDITOR, PAGER …), or make bash run code (BASH_ENV, PS4 …).
 */

/** Programs harmless as an editor or pager: they never run anything else. */
const HARMLESS_PROGRAMS = new Set(['', 'cat', 'true', ':', 'false', 'less', 'more', 'less -R', 'less -FRX', 'less -FR']);

const PROGRAM_VARS = new Set([
  'EDITOR', 'VISUAL', 'PAGER', 'GIT_EDITOR', 'GIT_SEQUENCE_EDITOR', 'GIT_PAGER', 'MANPAGER', 'SYSTEMD_PAGER',
]);

const SHELL_VARS = new Set([
  'BASH_ENV', 'ENV', 'PS4', 'PROMPT_COMMAND', 'SHELLOPTS', 'BASHOPTS', 'CDPATH', 'GLOBIGNORE', 'BASH_LOADABLES_PATH',
  'LD_PRELOAD', 'LD_AUDIT', 'LD_LIBRARY_PATH', 'HOME', 'XDG_CONFIG_HOME', 'SSH_ASKPASS', 'SUDO_ASKPASS',
  'EXECIGNORE', 'BASH_XTRACEFD', 'LESSOPEN', 'LESSCLOSE', 'MANOPT', 'BROWSER', 'RSYNC_RSH', 'TAR_OPTIONS', 'GIT_SSH',
]);

/** GIT_* variables that only change identity, output or prompting. */
const GIT_HARMLESS = new Set([
  'GIT_AUTHOR_NAME', 'GIT_AUTHOR_EMAIL', 'GIT_AUTHOR_DATE', 'GIT_COMMITTER_NAME', 'GIT_COMMITTER_EMAIL', 'GIT_COMMITTER_DATE',
  'GIT_TERMINAL_PROMPT', 'GIT_OPTIONAL_LOCKS', 'GIT_FLUSH', 'GIT_MERGE_AUTOEDIT', 'GIT_ADVICE', 'GIT_PROGRESS_DELAY',
  'GIT_REDACT_COOKIES', 'GIT_LITERAL_PATHSPECS', 'GIT_GLOB_PATHSPECS', 'GIT_NOGLOB_PATHSPECS', 'GIT_ICASE_PATHSPECS',
  'GIT_CURL_VERBOSE', 'GIT_NO_REPLACE_OBJECTS', 'GIT_DEFAULT_HASH', 'GIT_PROTOCOL_FROM_USER',
]);

export type AssignmentPlace = 'prefix' | 'persistent';

export function checkAssignment(name: string, value: Word, place: AssignmentPlace, cwd: Cwd, worktree: string, text: string): Refusal | undefined {
  const v = exactValue(value);
  if (PROGRAM_VARS.has(name)) {
    if (v !== undefined && HARMLESS_PROGRAMS.has(v)) return undefined;
    const reason = name.startsWith('GIT_') ? 'git_env_override' : 'shell_env_override';
    return refusal(reason, text, `\`${name}=${value.text}\` names a program that git or other tools run`);
  }
  if (SHELL_VARS.has(name)) {
    return refusal('shell_env_override', text, `\`${name}\` makes bash, git or another program load or run other code`);
  }
  if (!name.startsWith('GIT_')) return undefined;
  if (GIT_HARMLESS.has(name)) return undefined;
  if (/^GIT_TRACE/.test(name) || name === 'GIT_CURL_VERBOSE') {
    if (v !== undefined && /^(|0|1|2|true|false)$/.test(v)) return undefined;
    return refusal('git_env_override', text, `\`${name}=${value.text}\` makes git write a trace file`);
  }
  if (name === 'GIT_DIR' || name === 'GIT_WORK_TREE') {
    if (place === 'persistent') {
      return refusal('git_env_override', text, `setting \`${name}\` for the rest of the command redirects every later git command`);
    }
    if (v === undefined) return refusal('dynamic_argument', text, `\`${name}=${value.text}\` is computed at run time`);
    const where = resolvePath(cwd, v, worktree);
    if (!cwdInside(where, worktree)) {
      return refusal('outside_worktree', text, `\`${name}=${v}\` points at ${describeCwd(where)}, outside ${worktree}`);
    }
    return undefined;
  }
  return refusal(
    'git_env_override',
    text,
    `\`${name}\` redirects git's repository, index, object store, config or programs`,
  );
}

/** `NAME=value` as an argv word (for env, sudo and declaration builtins reached through wrappers). */
export function splitAssignmentWord(w: Word): { name: string; value: Word } | undefined {
  const text = w.value ?? w.prefix;
  const m = /^([A-Za-z_][A-Za-z0-9_]*)=/.exec(text);
  if (!m) return undefined;
  const rest = text.slice(m[0].length);
  const value: Word = w.value !== undefined ? { ...w, value: rest, prefix: rest } : { ...w, prefix: rest };
  return { name: m[1], value };
}
