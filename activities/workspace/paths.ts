import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { ErrorCode } from '../../contract/errors';

export type WorkspaceErrorCode = Extract<
  ErrorCode,
  | 'invalid_input'
  | 'tool_args_invalid'
  | 'path_outside_worktree'
  | 'file_not_found'
  | 'file_is_directory'
  | 'file_not_text'
  | 'repository_not_found'
  | 'worktree_create_failed'
  | 'git_command_failed'
  | 'branch_not_found'
>;

/** An expected refusal from a workspace primitive; `code` is one of the typed codes in contract/errors.ts. */
export class WorkspaceError extends Error {
  constructor(
    readonly code: WorkspaceErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'WorkspaceError';
  }
}

export interface ResolvedPath {
  /** Real path of the worktree root. */
  root: string;
  /** Absolute path with every existing symlink resolved; the part that does not exist yet is appended. */
  absolute: string;
  /** `absolute` relative to `root` ('' for the root itself). */
  relative: string;
}

/** True when `candidate` is `root` or below it (both absolute). */
export function isInsideDir(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

function refuseGitDir(relPath: string, shown: string): void {
  // Any `.git` component: the worktree's gitfile, the common dir, or a nested repository's metadata.
  if (relPath.split(path.sep).some((segment) => segment.toLowerCase() === '.git')) {
    throw new WorkspaceError('path_outside_worktree', `${shown} is inside .git, which is git's own data and not part of your files; use git commands instead`);
  }
}

/**
 * Resolves a path the model gave (relative to the worktree, or absolute inside it) to a real path inside the
 * worktree. Refuses NUL bytes, `..` escapes, absolute paths elsewhere, symlinks (at any level) whose real path
 * leaves the worktree, dangling symlinks, and anything under `.git`.
 *
 * Limit: this is a check before the operation, so a process changing the tree in between could still redirect
 * it. Tool calls of one session run one at a time and a bash call leaves no process behind (runner.ts), so no
 * such process of the session exists while a file tool runs.
 */
export async function resolveWorktreePath(worktree: string, relPath: string): Promise<ResolvedPath> {
  if (typeof relPath !== 'string' || relPath === '') {
    throw new WorkspaceError('tool_args_invalid', 'path must be a non-empty string');
  }
  if (relPath.includes('\0')) throw new WorkspaceError('tool_args_invalid', 'path must not contain NUL bytes');
  const shown = JSON.stringify(relPath.length > 200 ? `${relPath.slice(0, 200)}…` : relPath);
  const lexicalRoot = path.resolve(worktree);
  let root: string;
  try {
    root = await fs.realpath(lexicalRoot);
  } catch {
    throw new WorkspaceError('invalid_input', `the worktree ${lexicalRoot} does not exist`);
  }
  const outside = (why: string) => new WorkspaceError('path_outside_worktree', `${shown} ${why}; use a path inside your worktree (${root})`);

  let candidate: string;
  if (path.isAbsolute(relPath)) {
    const normalized = path.resolve(relPath);
    if (isInsideDir(lexicalRoot, normalized)) candidate = path.join(root, path.relative(lexicalRoot, normalized));
    else if (isInsideDir(root, normalized)) candidate = normalized;
    else throw outside('is outside the worktree');
  } else {
    candidate = path.resolve(root, relPath);
    if (!isInsideDir(root, candidate)) throw outside('escapes the worktree');
  }
  refuseGitDir(path.relative(root, candidate), shown);

  // The deepest ancestor that exists (the path itself if it does) decides where the path really leads.
  let existing = candidate;
  const missing: string[] = [];
  for (;;) {
    try {
      await fs.lstat(existing);
      break;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || existing === root) throw err;
      missing.unshift(path.basename(existing));
      existing = path.dirname(existing);
    }
  }
  let real: string;
  try {
    real = await fs.realpath(existing);
  } catch {
    // lstat saw it but it does not resolve: a dangling symlink (or a loop). Writing through it could land anywhere.
    throw outside('is a symlink whose target does not exist');
  }
  if (!isInsideDir(root, real)) throw outside('leads outside the worktree through a symlink');
  const absolute = path.join(real, ...missing);
  const relative = path.relative(root, absolute);
  refuseGitDir(relative, shown);
  return { root, absolute, relative };
}

/** The real absolute path of `relPath` inside `worktree` (see resolveWorktreePath for what is refused). */
export async function resolveInWorktree(worktree: string, relPath: string): Promise<string> {
  return (await resolveWorktreePath(worktree, relPath)).absolute;
}
