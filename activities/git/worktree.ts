import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { FileRunError, runFile } from '../bash/spawner';
import { sessionBranch, sessionIdProblem } from '../../contract/ids';
import { migrateSessionBranch } from '../bash/sandbox';
import { sessionHomeDir } from '../bash/env';
import { WorkspaceError } from '../workspace/paths';
import type { PreparedWorktree } from '../../contract/activities';

export interface PrepareWorktreeInput {
  /** The repository the session works on (its main checkout, a linked worktree of it, or a bare repository). */
  repo: string;
  sessionId: string;
  /** Directory that holds this host's session worktrees; the worktree is `<worktreeRoot>/<sessionId>`. */
  worktreeRoot: string;
  /** Commit-ish the new branch starts from; HEAD of `repo` by default. Ignored when the branch exists. */
  baseRef?: string;
}

export interface WorktreeEntry {
  path: string;
  head?: string;
  /** Full ref (`refs/heads/…`), absent when detached or bare. */
  branch?: string;
  bare: boolean;
  prunable: boolean;
}

/** Parses `git worktree list --porcelain -z`: attributes end in NUL, entries in an extra NUL. */
export function parseWorktreeList(output: string): WorktreeEntry[] {
  const entries: WorktreeEntry[] = [];
  let current: WorktreeEntry | undefined;
  for (const field of output.split('\0')) {
    if (field === '') {
      if (current) entries.push(current);
      current = undefined;
      continue;
    }
    const space = field.indexOf(' ');
    const key = space < 0 ? field : field.slice(0, space);
    const value = space < 0 ? '' : field.slice(space + 1);
    if (key === 'worktree') {
      if (current) entries.push(current);
      current = { path: value, bare: false, prunable: false };
    } else if (current) {
      if (key === 'HEAD') current.head = value;
      else if (key === 'branch') current.branch = value;
      else if (key === 'bare') current.bare = true;
      else if (key === 'prunable') current.prunable = true;
    }
  }
  if (current) entries.push(current);
  return entries;
}

/** git in one directory: its stdout (see gitIn). */
type Git = (args: string[]) => Promise<string>;

/** A run of git past this is taken for hung and killed (git worktree add of a large checkout stays far below it). */
const GIT_TIMEOUT_MS = 10 * 60_000;

/**
 * git in `dir`, started by the worker's spawner (activities/bash/spawner.ts): its stdout, unless it exited non-zero
 * and said why on stderr (thrown, with that text as the message). A non-zero exit with nothing on stderr is an answer
 * (`rev-parse --verify --quiet` of a name that resolves to nothing), as simple-git's `raw` had it before.
 */
function gitIn(dir: string): Git {
  return async (args) => {
    const run = await runFile('git', args, { cwd: dir, timeoutMs: GIT_TIMEOUT_MS, maxBuffer: Number.POSITIVE_INFINITY });
    if (run.code !== 0 && run.stderr.length > 0) throw new FileRunError(run.stderr, run.stderr);
    return run.stdout;
  };
}

async function samePath(a: string, b: string): Promise<boolean> {
  const real = (p: string) => fs.realpath(p).catch(() => path.resolve(p));
  return (await real(a)) === (await real(b));
}

function message(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).trim();
}

/**
 * The commit a session branch was created from: the oldest entry of its reflog ("branch: Created from …"),
 * else its merge base with `fallbackRef`, else its tip.
 */
async function branchBase(git: Git, ref: string, fallbackRef: string): Promise<string> {
  try {
    const reflog = (await git(['reflog', 'show', '--format=%H', ref])).trim().split('\n').filter(Boolean);
    if (reflog.length > 0) return reflog[reflog.length - 1];
  } catch {
    // no reflog (core.logAllRefUpdates off, or expired)
  }
  try {
    const base = (await git(['merge-base', ref, fallbackRef])).trim();
    if (base) return base;
  } catch {
    // unrelated histories or a bad fallback
  }
  return (await git(['rev-parse', '--verify', `${ref}^{commit}`])).trim();
}

/**
 * Why a session cannot start on `repo`, or undefined when it can: the directory must exist and be a git repository
 * with a commit to start from — `baseRef` when given, else HEAD — unless the session's branch already exists (a
 * session created again finds its own work there). The worktree preparation and `orchard session create` (before
 * anything starts, when the repository is on this host) ask the same question.
 */
export async function repositoryProblem(repo: string, options: { baseRef?: string; sessionId?: string } = {}): Promise<WorkspaceError | undefined> {
  const stat = await fs.stat(repo).catch(() => undefined);
  if (!stat?.isDirectory()) return new WorkspaceError('repository_not_found', `${repo} is not a directory`);
  const git = gitIn(repo);
  try {
    await git(['rev-parse', '--git-dir']);
  } catch (err) {
    // Only git's own verdict (`fatal: not a git repository`, `fatal: detected dubious ownership`) means "not one";
    // anything else (a process killed on a loaded machine, a spawn that failed) is a fault, thrown so that the caller
    // retries rather than failing the session for good.
    if (!/fatal:/i.test(message(err))) throw err;
    return new WorkspaceError('repository_not_found', `${repo} is not a git repository: ${message(err)}`);
  }
  // "No commit" only on git's own verdict (`fatal: Needed a single revision`); a success that printed no hash (a git
  // killed on a loaded machine ends with no output) or any other failure is a fault, thrown so that the caller
  // retries instead of refusing a repository that has commits.
  const commitOf = (ref: string) =>
    git(['rev-parse', '--verify', '--end-of-options', `${ref}^{commit}`]).then(
      (out) => {
        const hash = out.trim();
        if (!/^[0-9a-f]{40,64}$/.test(hash)) throw new Error(`git rev-parse --verify ${ref} answered ${JSON.stringify(hash)}, not a commit id`);
        return hash;
      },
      (err: unknown) => {
        if (/Needed a single revision/i.test(message(err))) return '';
        throw err;
      },
    );
  if (options.sessionId && (await commitOf(`refs/heads/${sessionBranch(options.sessionId)}`))) return undefined;
  if (options.baseRef !== undefined) {
    if (options.baseRef === '' || options.baseRef.startsWith('-') || !(await commitOf(options.baseRef))) {
      return new WorkspaceError('invalid_input', `base ref ${JSON.stringify(options.baseRef)} does not name a commit in ${repo}`);
    }
  } else if (!(await commitOf('HEAD'))) {
    return new WorkspaceError('repository_not_found', `${repo} is a git repository with no commit yet: commit something to start a session from`);
  }
  return undefined;
}

/**
 * What git says when another worktree of the same repository is half-written (its admin dir made, its `commondir` or
 * `gitdir` not yet: seen with 100 sessions prepared at once) or a lock file of the shared repository is held for a
 * moment ("Unable to create '….lock': File exists"). A ref that cannot be created for what it is (a D/F conflict:
 * "cannot lock ref …: '…' exists") stays a refusal.
 */
const SIBLING_FAULT = /failed to read .*worktrees\/[^/]+\/(commondir|gitdir)|Unable to create '[^']*\.lock': File exists/i;

/**
 * Creates (or finds again) the session's worktree `<worktreeRoot>/<sessionId>` on branch `orchard/<sessionId>/work`.
 * Idempotent, because an activity retried after a worker crash must not fail on its own earlier success:
 * an existing worktree for that branch is returned with `created: false`, and an existing branch without a
 * worktree is checked out again (its commits are the session's work). Also creates the session's HOME
 * (bash/env.ts), so agent commands have a home from their first call.
 */
export async function prepareWorktree(input: PrepareWorktreeInput): Promise<PreparedWorktree> {
  const problem = sessionIdProblem(input.sessionId);
  if (problem) throw new WorkspaceError('invalid_input', problem);
  if (input.baseRef !== undefined && (input.baseRef === '' || input.baseRef.startsWith('-'))) {
    throw new WorkspaceError('invalid_input', `base ref ${JSON.stringify(input.baseRef)} is not a valid ref`);
  }
  const repo = path.resolve(input.repo);
  const notRepository = await repositoryProblem(repo, { baseRef: input.baseRef, sessionId: input.sessionId });
  if (notRepository) throw notRepository;
  const git = gitIn(repo);

  const branch = sessionBranch(input.sessionId);
  const ref = `refs/heads/${branch}`;
  const worktreeRoot = path.resolve(input.worktreeRoot);
  const worktree = path.join(worktreeRoot, input.sessionId);
  const fallbackRef = input.baseRef ?? 'HEAD';
  await fs.mkdir(worktreeRoot, { recursive: true });
  await fs.mkdir(sessionHomeDir(worktree, input.sessionId), { recursive: true, mode: 0o700 });

  const findExisting = async (): Promise<PreparedWorktree | undefined> => {
    const entries = parseWorktreeList(await git(['worktree', 'list', '--porcelain', '-z']));
    let stale = false;
    for (const entry of entries) {
      const atPath = await samePath(entry.path, worktree);
      if (!atPath && entry.branch !== ref) continue;
      // The directory was deleted but git still has its admin entry: prune it and create the worktree again.
      if (entry.prunable) {
        stale = true;
        continue;
      }
      if (atPath && entry.branch === ref) {
        return { worktree, branch, baseCommit: await branchBase(git, ref, fallbackRef), created: false };
      }
      throw new WorkspaceError(
        'worktree_create_failed',
        atPath
          ? `${worktree} is already a worktree of ${entry.branch ?? 'a detached HEAD'}, not of ${branch}`
          : `${branch} is already checked out in another worktree (${entry.path})`,
      );
    }
    if (stale) await git(['worktree', 'prune']);
    return undefined;
  };

  // A session from before the confined layout is on `orchard/<id>`: move it (branch, reflog, worktree HEAD, marker).
  await migrateSessionBranch(repo, input.sessionId).catch((err: unknown) => {
    throw new WorkspaceError('worktree_create_failed', `could not move ${input.sessionId} to ${branch}: ${message(err)}`);
  });
  const existing = await findExisting();
  if (existing) return existing;

  // `--quiet` answers an empty string for a name that resolves to nothing; a thrown error is git failing (seen once
  // under load while a sibling session was being prepared in the same repository): retried, then reported as it
  // is — never read as "no commit", which would fail the session for good.
  const resolve = async (rev: string): Promise<string> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return (await git(['rev-parse', '--verify', '--quiet', rev])).trim();
      } catch (err) {
        if (attempt >= 3) throw new WorkspaceError('worktree_create_failed', `git rev-parse ${rev} failed in ${repo}: ${message(err)}`);
        await new Promise((r) => setTimeout(r, 250 * attempt));
      }
    }
  };
  const tip = await resolve(ref);
  let baseCommit: string;
  try {
    if (tip) {
      await git(['worktree', 'add', worktree, branch]);
      baseCommit = await branchBase(git, ref, fallbackRef);
    } else {
      baseCommit = await resolve(`${fallbackRef}^{commit}`);
      // The repository check above found a commit there moments ago: an empty answer now is git failing quietly
      // (`--quiet` exits 1 with no output; seen under load in CI), so it is asked again before it counts as missing.
      for (let attempt = 1; !baseCommit && attempt <= 3; attempt++) {
        await new Promise((r) => setTimeout(r, 250 * attempt));
        baseCommit = await resolve(`${fallbackRef}^{commit}`);
      }
      if (!baseCommit) {
        throw new WorkspaceError(
          input.baseRef === undefined ? 'worktree_create_failed' : 'invalid_input',
          input.baseRef === undefined
            ? `${repo} has no commit at HEAD to start a session branch from`
            : `base ref ${JSON.stringify(input.baseRef)} does not name a commit in ${repo}`,
        );
      }
      // From the resolved commit, not the ref name: a remote-tracking base must not become the upstream.
      await git(['worktree', 'add', '--no-track', '-b', branch, worktree, baseCommit]);
    }
  } catch (err) {
    if (err instanceof WorkspaceError) throw err;
    // An overlapping attempt (a retried activity racing the first) may have created it: that is success too.
    const raced = await findExisting().catch(() => undefined);
    if (raced) return raced;
    // Git tripping over another worktree of the repository being created or moved at the same moment is no verdict on
    // this one: thrown as it is, the preparation is tried again (a branch `-b` made is found as the tip then).
    if (SIBLING_FAULT.test(message(err))) throw new Error(`could not create ${worktree} on ${branch} (a sibling was being changed): ${message(err)}`);
    throw new WorkspaceError('worktree_create_failed', `could not create ${worktree} on ${branch}: ${message(err)}`);
  }
  return { worktree, branch, baseCommit, created: true };
}

/** A session's work as `orchard session diff` shows it. */
export interface SessionDiff {
  readonly branch: string;
  /** The commit the branch started from (its reflog's first entry; else where it meets the repository's HEAD). */
  readonly base: string;
  readonly head: string;
  /** `git diff <base> <head>`: what the branch's commits changed. */
  readonly committed: string;
  /** Changes in the worktree not committed yet (against the branch head), when the worktree exists. */
  readonly uncommitted?: string;
  /** Untracked files in the worktree (not in either diff). */
  readonly untracked: readonly string[];
}

/** The session's branch against its base, and what its worktree holds uncommitted; read on the host that has both. */
export async function sessionDiff(input: { repo: string; branch: string; worktree?: string }): Promise<SessionDiff> {
  const git = gitIn(input.repo);
  const ref = `refs/heads/${input.branch}`;
  const head = (await git(['rev-parse', '--quiet', '--verify', `${ref}^{commit}`]).catch(() => '')).trim();
  if (!head) throw new WorkspaceError('branch_not_found', `${input.repo} has no branch ${input.branch}`);
  const base = await branchBase(git, ref, 'HEAD');
  const diffArgs = ['diff', '--no-color', '--no-ext-diff', '--no-textconv'];
  const committed = await git([...diffArgs, base, head]);
  const worktreeExists = input.worktree !== undefined && (await fs.stat(input.worktree).catch(() => undefined))?.isDirectory() === true;
  if (!worktreeExists) return { branch: input.branch, base, head, committed, untracked: [] };
  const wt = gitIn(input.worktree!);
  const uncommitted = await wt([...diffArgs, 'HEAD']);
  const untracked = (await wt(['ls-files', '--others', '--exclude-standard', '-z'])).split('\0').filter(Boolean);
  return { branch: input.branch, base, head, committed, uncommitted, untracked };
}
