import { cwdInside, describeCwd, isInside, resolvePath, type Cwd } from './paths';
import { refusal, type GuardReason, type Refusal } from './reasons';
import { exactValue, type Word } from './words';

/**
 * Environment assignments the guard refuses: variables that redirect git (GIT_DIR …), load config or run
 * programs (GIT_CONFIG_*, GIT_SSH_COMMAND, EDITOR, PAGER …), or make bash run code (BASH_ENV, PS4 …).
 */

/** Programs harmless as an editor or pager: they never run anything else. */
const HARMLESS_PROGRAMS = new Set(['', 'cat', 'true', ':', 'false', 'less', 'more', 'less -R', 'less -FRX', 'less -FR']);

const PROGRAM_VARS = new Set(['EDITOR', 'VISUAL', 'PAGER', 'GIT_EDITOR', 'GIT_SEQUENCE_EDITOR', 'GIT_PAGER', 'MANPAGER', 'SYSTEMD_PAGER']);

const SHELL_VARS = new Set([
  'BASH_ENV',
  'ENV',
  'PS4',
  'PROMPT_COMMAND',
  'SHELLOPTS',
  'BASHOPTS',
  'CDPATH',
  'GLOBIGNORE',
  'BASH_LOADABLES_PATH',
  'LD_PRELOAD',
  'LD_AUDIT',
  'LD_LIBRARY_PATH',
  'HOME',
  'XDG_CONFIG_HOME',
  'SSH_ASKPASS',
  'SUDO_ASKPASS',
  'EXECIGNORE',
  'BASH_XTRACEFD',
  'LESSOPEN',
  'LESSCLOSE',
  'MANOPT',
  'BROWSER',
  'RSYNC_RSH',
  'TAR_OPTIONS',
  'GIT_SSH',
]);

/** GIT_* variables that only change identity, output or prompting. */
const GIT_HARMLESS = new Set([
  'GIT_AUTHOR_NAME',
  'GIT_AUTHOR_EMAIL',
  'GIT_AUTHOR_DATE',
  'GIT_COMMITTER_NAME',
  'GIT_COMMITTER_EMAIL',
  'GIT_COMMITTER_DATE',
  'GIT_TERMINAL_PROMPT',
  'GIT_OPTIONAL_LOCKS',
  'GIT_FLUSH',
  'GIT_MERGE_AUTOEDIT',
  'GIT_ADVICE',
  'GIT_PROGRESS_DELAY',
  'GIT_REDACT_COOKIES',
  'GIT_LITERAL_PATHSPECS',
  'GIT_GLOB_PATHSPECS',
  'GIT_NOGLOB_PATHSPECS',
  'GIT_ICASE_PATHSPECS',
  'GIT_CURL_VERBOSE',
  'GIT_NO_REPLACE_OBJECTS',
  'GIT_DEFAULT_HASH',
  'GIT_PROTOCOL_FROM_USER',
]);

/**
 * Variables that make an interpreter load code before (or instead of) what its command line says. A literal
 * NODE_OPTIONS with only tuning flags loads nothing; anything else is code the guard does not see.
 */
const INTERPRETER_CODE_VARS = new Set([
  'NODE_OPTIONS',
  'NODE_PATH',
  'PERL5OPT',
  'PERL5LIB',
  'PERLLIB',
  'PERL5DB',
  'PYTHONSTARTUP',
  'PYTHONPATH',
  'PYTHONHOME',
  'PYTHONUSERBASE',
  'RUBYOPT',
  'RUBYLIB',
  'LUA_INIT',
  'LUA_PATH',
  'LUA_CPATH',
  'JAVA_TOOL_OPTIONS',
  '_JAVA_OPTIONS',
  'JDK_JAVA_OPTIONS',
  'PHP_INI_SCAN_DIR',
  'PHPRC',
  'R_PROFILE',
  'R_PROFILE_USER',
  'TCLLIBPATH',
  'GEM_HOME',
  'GEM_PATH',
  'BUNDLE_GEMFILE',
]);
const NODE_OPTIONS_LOADING =
  /(^|\s)(-r|--require|--import|--loader|--experimental-loader|--experimental-specifier-resolution|--env-file|--openssl-config|--icu-data-dir)\b/;

export type AssignmentPlace = 'prefix' | 'persistent';

/**
 * Refuses assignments that redirect git or make bash run code; `onUnsure` hears about assignments whose effect the
 * text cannot settle (code an interpreter will load).
 */
export function checkAssignment(
  name: string,
  value: Word,
  place: AssignmentPlace,
  cwd: Cwd,
  worktree: string,
  text: string,
  onUnsure?: (why: string, reason?: GuardReason) => void,
  /** Reads a literal editor or pager as the shell code it is (its refusal, or undefined); without it such a value is refused. */
  readProgram?: (source: string, origin: string) => Refusal | undefined,
): Refusal | undefined {
  const v = exactValue(value);
  if (/^BASH_FUNC_/.test(name)) {
    return refusal('function_or_alias', text, `\`${name}\` is a function bash imports from the environment: it can replace any command name, git included`);
  }
  if (INTERPRETER_CODE_VARS.has(name)) {
    const harmless = name === 'NODE_OPTIONS' && v !== undefined && !NODE_OPTIONS_LOADING.test(v);
    if (!harmless) onUnsure?.(`\`${name}\` makes interpreters load code the guard does not read`);
    return undefined;
  }
  if (PROGRAM_VARS.has(name)) {
    if (v !== undefined && HARMLESS_PROGRAMS.has(v)) return undefined;
    const reason = name.startsWith('GIT_') ? 'git_env_override' : 'shell_env_override';
    const why = `\`${name}=${value.text}\` names a program that git or other tools run`;
    // For this one command (a rebase's sequence editor), a literal value is read as the shell code git runs it as;
    // set for the rest of the shell it would also reach commands judged without it, so it stays refused there.
    if (place === 'prefix' && v !== undefined && readProgram) return readProgram(v, name);
    return refusal(reason, text, why);
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
  return refusal('git_env_override', text, `\`${name}\` redirects git's repository, index, object store, config or programs`);
}

/**
 * A PATH that names a directory the command can write (the worktree, /tmp, a relative entry, an empty entry) or a
 * value read at run time ahead of the inherited `$PATH`: a command name may then run a program written there.
 */
export function pathIsWritable(value: Word, cwd: Cwd, worktree: string): boolean {
  const text = value.value ?? value.text.replaceAll('"', '');
  for (const entry of text.split(':')) {
    if (value.value === undefined && (entry === '$PATH' || entry === '${PATH}')) return false; // later entries come after the system's
    if (value.value === undefined && /[$`]/.test(entry)) return true;
    if (entry === '' || !entry.startsWith('/')) return true;
    const where = resolvePath(cwd, entry, worktree);
    if (where.kind !== 'known' || isInside(where.path, worktree) || /^\/(tmp|var\/tmp|dev\/shm)(\/|$)/.test(where.path)) return true;
  }
  return false;
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
