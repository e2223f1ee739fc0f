import { spawnCommand } from '../bash/spawner';
import * as path from 'node:path';
import { sessionBranch, sessionIdProblem } from '../../contract/ids';
import { buildCommandEnv } from '../bash/env';
import { BoundedOutput } from '../bash/runner';
import { resolveWorktreePath, WorkspaceError } from '../workspace/paths';

/**
 * git_status, git_diff and git_commit. They run in the worker, outside the bash runner's process-group
 * supervision, so they must not execute code the agent controls: hooks are off (core.hooksPath may point into
 * the worktree, e.g. husky's .husky/), fsmonitor is off, external diff and textconv drivers are off, and the
 * global config (the session HOME's ~/.gitconfig, which the agent can write) is not read. The repository's
 * own config is still read: it is the operator's, and the bash guard keeps agents from writing it.
 */
const SAFE_CONFIG = ['core.hooksPath=/dev/null', 'core.fsmonitor=false'];
const GIT_TIMEOUT_MS = 60_000;
/** Output read whole (status, names, messages): far beyond any real answer, and still bounded. */
const GIT_OUTPUT_MAX = 64 * 1024 * 1024;
/** Rows shown per status section; the rest are counted. */
const STATUS_ROWS = 100;

function toolEnv(worktree: string): Record<string, string> {
  const base = path.basename(path.resolve(worktree));
  const sessionId = sessionIdProblem(base) ? 'unknown' : base;
  const env = buildCommandEnv({ worktree, sessionId, branch: sessionBranch(sessionId) });
  // git does not page or edit without a terminal; these are dropped so no agent-set program is ever named.
  delete env.PAGER;
  delete env.GIT_PAGER;
  delete env.GIT_EDITOR;
  env.GIT_CONFIG_GLOBAL = '/dev/null';
  return env;
}

function message(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).trim();
}

/**
 * git's whole stdout, run in `worktree` with the tools' safe settings (no hooks, no fsmonitor, no global config);
 * a non-zero exit, or a git killed by a signal or the timeout, is an error (never an empty
 * answer: an empty `symbolic-ref` read as "detached HEAD" once when a git had in fact failed). `exitOk` lists
 * other exit codes that are answers (`symbolic-ref --quiet` exits 1 on a detached HEAD).
 */
export async function git(worktree: string, args: string[], exitOk: readonly number[] = [], stdin?: string, env?: Record<string, string>): Promise<string> {
  const { code, out, stderr } = await runGit(worktree, args, GIT_OUTPUT_MAX, stdin, env);
  if (out.truncated) throw new WorkspaceError('git_command_failed', `git ${args[0]} wrote more than ${GIT_OUTPUT_MAX} bytes`);
  if (code !== 0 && !exitOk.includes(code)) throw new WorkspaceError('git_command_failed', `git ${args[0]} exited with ${code}: ${stderr}`);
  return code === 0 ? out.toString() : '';
}

const STATUS_WORDS: Record<string, string> = {
  M: 'modified',
  A: 'new file',
  D: 'deleted',
  R: 'renamed',
  C: 'copied',
  T: 'type changed',
};
const CONFLICT_WORDS: Record<string, string> = {
  DD: 'both deleted',
  AU: 'added by us',
  UD: 'deleted by them',
  UA: 'added by them',
  DU: 'deleted by us',
  AA: 'both added',
  UU: 'both modified',
};

function describeBranch(header: string): string {
  if (header.startsWith('No commits yet on ')) return `${header.slice('No commits yet on '.length)} (no commits yet)`;
  if (header.startsWith('HEAD (no branch)')) return 'detached HEAD';
  const m = /^(.*?)(?:\.\.\.(\S+))?(?: \[(.*)\])?$/.exec(header);
  if (!m) return header;
  const [, branch, upstream, track] = m;
  if (!upstream) return branch;
  return track ? `${branch} (upstream ${upstream}: ${track})` : `${branch} (up to date with ${upstream})`;
}

function section(title: string, rows: string[]): string[] {
  if (rows.length === 0) return [];
  const shown = rows.slice(0, STATUS_ROWS).map((r) => `  ${r}`);
  if (rows.length > STATUS_ROWS) shown.push(`  … and ${rows.length - STATUS_ROWS} more`);
  return [`${title} (${rows.length}):`, ...shown];
}

/** `git status` as compact text: branch, ahead/behind, then staged, not staged, conflicted and untracked paths. */
export async function gitStatus(worktree: string): Promise<string> {
  const raw = await git(worktree, ['status', '--porcelain=v1', '--branch', '-z']);
  const fields = raw.split('\0');
  let branch = 'unknown branch';
  const staged: string[] = [];
  const unstaged: string[] = [];
  const conflicted: string[] = [];
  const untracked: string[] = [];
  for (let i = 0; i < fields.length; i++) {
    const field = fields[i];
    if (field === '') continue;
    if (field.startsWith('## ')) {
      branch = describeBranch(field.slice(3));
      continue;
    }
    const xy = field.slice(0, 2);
    let file = field.slice(3);
    // Renames and copies carry the source path as the next field.
    if (xy[0] === 'R' || xy[0] === 'C' || xy[1] === 'R' || xy[1] === 'C') file = `${fields[++i]} -> ${file}`;
    if (xy === '??') untracked.push(file);
    else if (xy === '!!') continue;
    else if (CONFLICT_WORDS[xy]) conflicted.push(`${CONFLICT_WORDS[xy]}: ${file}`);
    else {
      if (xy[0] !== ' ') staged.push(`${STATUS_WORDS[xy[0]] ?? xy[0]}: ${file}`);
      if (xy[1] !== ' ') unstaged.push(`${STATUS_WORDS[xy[1]] ?? xy[1]}: ${file}`);
    }
  }
  const lines = [`On branch ${branch}`];
  const body = [...section('Conflicted', conflicted), ...section('Staged', staged), ...section('Not staged', unstaged), ...section('Untracked', untracked)];
  lines.push(...(body.length > 0 ? body : ['Nothing to commit, working tree clean.']));
  return lines.join('\n');
}

/** Runs git with its stdout bounded (a diff can be any size); rejects on a non-zero exit. */
async function gitBounded(worktree: string, args: string[], maxBytes: number): Promise<BoundedOutput> {
  const { code, out, stderr } = await runGit(worktree, args, maxBytes);
  if (code !== 0) throw new WorkspaceError('git_command_failed', `git ${args[0]} exited with ${code}: ${stderr}`);
  return out;
}

/**
 * Runs git with the safe config and the tool environment, stdout bounded to `maxBytes`. Resolves with the exit
 * code; rejects when git could not start, was killed by a signal, or ran past the timeout (killed then).
 */
function runGit(
  worktree: string,
  args: string[],
  maxBytes: number,
  stdin?: string,
  env?: Record<string, string>,
): Promise<{ code: number; out: BoundedOutput; stderr: string }> {
  return new Promise((resolve, reject) => {
    // Through the worker's spawner when it runs one (activities/bash/spawner.ts): no fork of the whole worker.
    const child = spawnCommand({
      file: 'git',
      args: [...SAFE_CONFIG.flatMap((c) => ['-c', c]), ...args],
      cwd: worktree,
      env: { ...toolEnv(worktree), ...env },
      detached: false,
      stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    // git may exit before reading all of it (a bad revision): that EPIPE is its answer, not ours to throw.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(stdin);
    const out = new BoundedOutput(maxBytes);
    const err = new BoundedOutput(4096);
    child.stdout!.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr!.on('data', (chunk: Buffer) => err.push(chunk));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, GIT_TIMEOUT_MS);
    child.once('error', (e: Error) => {
      clearTimeout(timer);
      reject(new WorkspaceError('git_command_failed', `git ${args[0]} could not start: ${e.message}`));
    });
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      const stderr = err.toString().trim();
      if (code !== null) return resolve({ code, out, stderr });
      const why = timedOut ? `ran past ${GIT_TIMEOUT_MS / 1000} s and was killed` : `was killed (${signal})`;
      reject(new WorkspaceError('git_command_failed', `git ${args[0]} ${why}${stderr ? `: ${stderr}` : ''}`));
    });
  });
}

/**
 * The diff of the worktree against HEAD (staged and unstaged changes), or of the index against HEAD with
 * `staged`. Optionally limited to one path. Long diffs keep their head and tail with a truncation marker.
 */
export async function gitDiff(worktree: string, options: { staged?: boolean; path?: string; maxBytes: number }): Promise<string> {
  const args = ['diff', '--no-color', '--no-ext-diff', '--no-textconv', options.staged ? '--cached' : 'HEAD'];
  if (options.path !== undefined) {
    const { relative } = await resolveWorktreePath(worktree, options.path);
    args.push('--', relative === '' ? '.' : relative);
  }
  const out = await gitBounded(worktree, args, options.maxBytes);
  if (out.totalBytes === 0) {
    const what = options.staged ? 'No staged changes' : 'No changes against HEAD';
    const scope = options.path === undefined ? '' : ` in ${options.path}`;
    return `${what}${scope} (untracked files are not diffed; see git_status).`;
  }
  return out.toString();
}

export interface GitCommitResult {
  /** false when there was nothing to commit; nothing was changed then. */
  committed: boolean;
  /** The new commit, or HEAD when nothing was committed. */
  commit: string;
  branch: string;
  /** Text for the model: `[branch abc1234] subject` and the diffstat, or why nothing was committed. */
  summary: string;
}

/**
 * Stages everything (or only `paths`, each checked with resolveWorktreePath) and commits it on the worktree's
 * current branch. With `paths`, only those paths are committed even if other changes were staged before.
 * "Nothing to commit" is a result, not an error. `branch`, when given, must be the checked-out branch: the
 * commit is refused rather than landing on some other branch or a detached HEAD.
 */
export async function gitCommit(worktree: string, options: { message: string; paths?: readonly string[]; branch?: string }): Promise<GitCommitResult> {
  if (typeof options.message !== 'string' || options.message.trim() === '') {
    throw new WorkspaceError('tool_args_invalid', 'a commit message is required');
  }
  const branch = (await git(worktree, ['symbolic-ref', '--quiet', '--short', 'HEAD'], [1])).trim();
  if (!branch) throw new WorkspaceError('git_command_failed', 'HEAD is detached: switch back to your branch first');
  if (options.branch !== undefined && branch !== options.branch) {
    throw new WorkspaceError(
      'git_command_failed',
      `the worktree is on ${branch}, not on ${options.branch}; switch back to ${options.branch} before committing`,
    );
  }

  let pathspec: string[] = [];
  if (options.paths !== undefined) {
    if (options.paths.length === 0) {
      throw new WorkspaceError('tool_args_invalid', 'paths is empty; omit it to commit everything');
    }
    const resolved = await Promise.all(options.paths.map((p) => resolveWorktreePath(worktree, p)));
    pathspec = ['--', ...resolved.map((r) => (r.relative === '' ? '.' : r.relative))];
  }
  try {
    await git(worktree, ['add', '-A', ...pathspec]);
  } catch (err) {
    const what = options.paths ? 'those paths' : 'changes';
    throw new WorkspaceError('tool_args_invalid', `could not stage ${what}: ${message(err)}`);
  }
  const staged = await git(worktree, ['diff', '--cached', '--name-only', '-z', ...pathspec]);
  const toCommit = staged.split('\0').filter(Boolean);
  if (toCommit.length === 0) {
    const head = (await git(worktree, ['rev-parse', 'HEAD'])).trim();
    const scope = options.paths ? ` in ${options.paths.join(', ')}` : '';
    return { committed: false, commit: head, branch, summary: `Nothing to commit${scope}: no changes against HEAD.` };
  }
  await git(worktree, ['commit', '--quiet', '-m', options.message, ...pathspec]);
  const commit = (await git(worktree, ['rev-parse', 'HEAD'])).trim();
  const subject = (await git(worktree, ['log', '-1', '--format=%h %s', commit])).trim();
  const stat = (await git(worktree, ['show', '--stat', '--format=', '--no-color', commit])).trim();
  const statLines = stat.split('\n');
  const shownStat =
    statLines.length > STATUS_ROWS + 1
      ? [...statLines.slice(0, STATUS_ROWS), `  … ${statLines.length - STATUS_ROWS - 1} more files`, statLines.at(-1)]
      : statLines;
  return { committed: true, commit, branch, summary: [`[${branch} ${subject}]`, ...shownStat].join('\n') };
}
