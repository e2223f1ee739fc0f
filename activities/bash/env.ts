import * as path from 'node:path';
import { sessionIdProblem } from '../../contract/ids';

/**
 * The environment of an agent command is built from this allowlist, never inherited wholesale: the worker
 * holds DATABASE_URL, the model API key and Temporal credentials, and agents get none of them (ARCHITECTURE,
 * "Trust"). The same environment is used for git commands the worker runs on a session's behalf.
 */

/** Copied from the worker when set: none of them carries a credential. */
const INHERITED_ENV_NAMES: readonly string[] = ['PATH', 'USER', 'LOGNAME', 'TZ', 'TMPDIR'];

/** Used when the worker has no PATH (a bare container entrypoint). */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Set to the same value for every session. */
const FIXED_ENV: Readonly<Record<string, string>> = {
  SHELL: '/bin/bash',
  LANG: 'C.UTF-8',
  LC_ALL: 'C.UTF-8',
  // No terminal: stdin is closed and output is captured, so colour codes and pagers only get in the way.
  TERM: 'dumb',
  NO_COLOR: '1',
  PAGER: 'cat',
  GIT_PAGER: 'cat',
  // Anything that would prompt (credentials, editors) must fail instead of hanging until the timeout.
  GIT_TERMINAL_PROMPT: '0',
  GIT_EDITOR: 'true',
  GIT_MERGE_AUTOEDIT: 'no',
  // The system gitconfig may name a credential helper or other host-wide settings meant for operators.
  GIT_CONFIG_NOSYSTEM: '1',
  // The session HOME is writable by any program the agent runs: a ~/.gitconfig written there could make an
  // allowed `git status` run an fsmonitor, alias or hooksPath program. Git reads no global config at all.
  GIT_CONFIG_GLOBAL: '/dev/null',
};

/** The identity git records for an agent's commits (GIT_AUTHOR_* and GIT_COMMITTER_*). */
function agentIdentity(sessionId: string): { name: string; email: string } {
  return { name: 'Orchard agent', email: `agent+${sessionId}@orchard.invalid` };
}

/**
 * A session's HOME: `<worktreeRoot>/.homes/<sessionId>`, beside the worktrees. Not inside the worktree, so
 * tool caches and dotfiles (~/.npm, ~/.cache, ~/.gitconfig) never show up as untracked files or get committed;
 * one per session, so one agent cannot plant ~/.bashrc or ~/.gitconfig for another; and never the worker's
 * HOME, which may hold credentials (~/.git-credentials, ~/.aws, ~/.pgpass, tokens in ~/.npmrc). A session id
 * starts with a letter or digit, so `.homes` never collides with a worktree.
 */
export function sessionHomeDir(worktree: string, sessionId: string): string {
  return path.join(path.dirname(path.resolve(worktree)), '.homes', sessionId);
}

const FORBIDDEN_NAMES = new Set([
  'DATABASE_URL',
  'ORCHARD_MODEL_API_KEY',
  'OPENAI_API_KEY',
  // Shell start-up files: a value here runs code before every command.
  'BASH_ENV',
  'ENV',
  // Redirect git to another repository, index or config (GUARD.md §3.3).
  'GIT_DIR',
  'GIT_WORK_TREE',
  'GIT_COMMON_DIR',
  'GIT_INDEX_FILE',
  'GIT_OBJECT_DIRECTORY',
  'GIT_ALTERNATE_OBJECT_DIRECTORIES',
  'GIT_NAMESPACE',
  'GIT_EXEC_PATH',
  'GIT_ASKPASS',
  'SSH_ASKPASS',
  'GIT_SSH',
  'GIT_SSH_COMMAND',
  'GIT_EXTERNAL_DIFF',
]);

const FORBIDDEN_PATTERNS: readonly RegExp[] = [
  /^TEMPORAL_/i,
  /^PG[A-Z]*$/, // libpq reads PGPASSWORD, PGHOST, … directly
  /^GIT_CONFIG/i, // GIT_CONFIG_COUNT/KEY_n/VALUE_n, _PARAMETERS, _GLOBAL, _SYSTEM
  /_KEY$/i,
  /_TOKEN$/i,
  /_SECRET$/i,
  /PASSWORD/i,
  /PASSWD/i,
  /CREDENTIAL/i,
  /^AWS_/i,
];

/** True for names an agent command must never receive from the worker, nor be given through `extra` (FIXED_ENV
 * is applied regardless). */
export function isForbiddenEnvName(name: string): boolean {
  return FORBIDDEN_NAMES.has(name.toUpperCase()) || FORBIDDEN_PATTERNS.some((p) => p.test(name));
}

export interface CommandEnvInput {
  worktree: string;
  sessionId: string;
  branch: string;
  /** Additional variables (e.g. a per-run setting). Forbidden names throw: this is a programming error. */
  extra?: Readonly<Record<string, string>>;
  /** The worker's environment to copy INHERITED_ENV_NAMES from; process.env by default. */
  from?: NodeJS.ProcessEnv;
}

/** The complete environment of one agent command. */
export function buildCommandEnv(input: CommandEnvInput): Record<string, string> {
  // The id becomes part of HOME's path.
  const problem = sessionIdProblem(input.sessionId);
  if (problem) throw new Error(`buildCommandEnv: ${problem}`);
  const from = input.from ?? process.env;
  const env: Record<string, string> = {};
  for (const name of INHERITED_ENV_NAMES) {
    const value = from[name];
    if (value !== undefined && value !== '') env[name] = value;
  }
  env.PATH ??= DEFAULT_PATH;
  Object.assign(env, FIXED_ENV);
  for (const [name, value] of Object.entries(input.extra ?? {})) {
    if (isForbiddenEnvName(name)) throw new Error(`buildCommandEnv: ${name} must not be passed to agent commands`);
    env[name] = value;
  }
  // Last, so `extra` cannot disguise the session or its identity.
  const identity = agentIdentity(input.sessionId);
  env.HOME = sessionHomeDir(input.worktree, input.sessionId);
  env.GIT_AUTHOR_NAME = identity.name;
  env.GIT_AUTHOR_EMAIL = identity.email;
  env.GIT_COMMITTER_NAME = identity.name;
  env.GIT_COMMITTER_EMAIL = identity.email;
  env.ORCHARD_SESSION_ID = input.sessionId;
  env.ORCHARD_BRANCH = input.branch;
  return env;
}
