import { runFile } from '../bash/spawner';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { parseWorktreeList } from './worktree';

/**
 * A team's code, from evidence to the protected branch (issue 9, deliverable 8). Git only, no store: the team
 * activities (activities/team.ts) decide when, and record what happened in PostgreSQL.
 *
 * - Evidence binds code: a Member's completed execution is bound to the head commit of its branch
 *   (`memberHead`). Only committed work is evidence; nothing is committed on a Member's behalf.
 * - The result of a delivered run is computed without any checkout (`buildResult`): starting from the protected
 *   branch, each evidence commit is fast-forwarded to or merged in with `git merge-tree --write-tree` and
 *   `git commit-tree`, so no worktree, index or hook of anyone is touched and no ref moves. A conflict is a
 *   refusal that names the task and the paths.
 * - `orchard team merge` (a user action) plans the protected branch's new head (`planMerge`: already contained,
 *   fast-forward, or one merge commit) and moves it (`moveProtectedBranch`): with `git merge --ff-only` inside
 *   the worktree that has it checked out, so that checkout stays consistent, refused when that checkout has
 *   uncommitted changes; with a compare-and-swap `update-ref` when no worktree has it checked out.
 *
 * Needs git ≥ 2.38 (`merge-tree --write-tree`).
 */

export type TeamGitCode = 'merge_conflict' | 'checkout_dirty' | 'branch_not_found' | 'repository_not_found' | 'git_command_failed';

/** An expected refusal: typed, and no ref was moved. */
export class TeamGitRefusal extends Error {
  constructor(
    readonly code: TeamGitCode,
    message: string,
  ) {
    super(message);
    this.name = 'TeamGitRefusal';
  }
}

/** The branch a team's delivered result is built on. */
export const resultBranchOf = (teamId: string): string => `orchard/team/${teamId}/result`;

/** Who Orchard's own commits (integration merges) are by. */
const ORCHARD_GIT_IDENTITY = { name: 'Orchard', email: 'orchard@localhost' } as const;

const GIT_TIMEOUT_MS = 120_000;
/** How much older than the longest a git here may run a ref lock must be to be called stale. */
const STALE_LOCK_MARGIN_MS = 60_000;

/**
 * The worker's git: no system or global config (the repository's own config is the operator's), none of the
 * variables that would redirect it to another repository, no `ORCHARD_ISOLATED_BRANCH` (this is not a child).
 */
function gitEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of ['GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE', 'GIT_COMMON_DIR', 'GIT_OBJECT_DIRECTORY', 'GIT_NAMESPACE', 'ORCHARD_ISOLATED_BRANCH'])
    delete env[key];
  return {
    ...env,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    LC_ALL: 'C',
    // A ref another git process holds locked (a member's commit, its gc, a concurrent update) is waited for, not
    // refused at once: seen once under a loaded full run, the result branch's `update-ref` found `result.lock`.
    GIT_CONFIG_COUNT: '1',
    GIT_CONFIG_KEY_0: 'core.filesRefLockTimeout',
    GIT_CONFIG_VALUE_0: '10000',
    GIT_AUTHOR_NAME: ORCHARD_GIT_IDENTITY.name,
    GIT_AUTHOR_EMAIL: ORCHARD_GIT_IDENTITY.email,
    GIT_COMMITTER_NAME: ORCHARD_GIT_IDENTITY.name,
    GIT_COMMITTER_EMAIL: ORCHARD_GIT_IDENTITY.email,
  };
}

interface GitOutput {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs git; resolves with its exit code (a spawn failure or a timeout rejects). */
function run(cwd: string, args: string[], timeoutMs = GIT_TIMEOUT_MS): Promise<GitOutput> {
  return runFile('git', args, { cwd, env: gitEnv(), timeoutMs, maxBuffer: 16 * 1024 * 1024 });
}

async function must(cwd: string, args: string[]): Promise<string> {
  const out = await run(cwd, args);
  if (out.code !== 0) throw new TeamGitRefusal('git_command_failed', `git ${args.join(' ')} failed in ${cwd}: ${(out.stderr || out.stdout).trim()}`);
  return out.stdout;
}

/** The repository at `repo`, or a typed refusal (checked before anything else). */
async function requireRepo(repo: string): Promise<string> {
  const dir = path.resolve(repo);
  const stat = await fs.stat(dir).catch(() => undefined);
  if (!stat?.isDirectory()) throw new TeamGitRefusal('repository_not_found', `${dir} is not a directory on this worker`);
  const out = await run(dir, ['rev-parse', '--git-dir']);
  if (out.code !== 0) throw new TeamGitRefusal('repository_not_found', `${dir} is not a git repository: ${out.stderr.trim()}`);
  return dir;
}

/** The commit `refs/heads/<branch>` points to, or undefined when there is no such branch. */
async function branchTip(repo: string, branch: string): Promise<string | undefined> {
  const out = await run(repo, ['rev-parse', '--verify', '--quiet', `refs/heads/${branch}^{commit}`]);
  return out.code === 0 ? out.stdout.trim() : undefined;
}

async function isCommit(repo: string, sha: string): Promise<boolean> {
  return (await run(repo, ['cat-file', '-e', `${sha}^{commit}`])).code === 0;
}

async function isAncestor(repo: string, ancestor: string, of: string): Promise<boolean> {
  const out = await run(repo, ['merge-base', '--is-ancestor', ancestor, of]);
  if (out.code > 1) throw new TeamGitRefusal('git_command_failed', `git merge-base --is-ancestor ${ancestor} ${of}: ${out.stderr.trim()}`);
  return out.code === 0;
}

/**
 * The tree of merging `theirs` into `ours`, or the conflicting paths. Objects only: no worktree, index or ref.
 */
async function mergeTree(repo: string, ours: string, theirs: string): Promise<{ tree: string } | { conflicts: string[] }> {
  const out = await run(repo, ['merge-tree', '--write-tree', '--name-only', '--no-messages', ours, theirs]);
  const lines = out.stdout.split('\n').filter((l) => l !== '');
  if (out.code === 0) return { tree: lines[0] };
  if (out.code === 1) return { conflicts: [...new Set(lines.slice(1))] };
  throw new TeamGitRefusal('git_command_failed', `git merge-tree ${ours} ${theirs} failed: ${out.stderr.trim() || out.stdout.trim()}`);
}

async function mergeCommit(repo: string, tree: string, parents: [string, string], message: string): Promise<string> {
  return (await must(repo, ['commit-tree', tree, '-p', parents[0], '-p', parents[1], '-m', message])).trim();
}

/**
 * The head of a Member's branch: the code its completed execution is bound to. Undefined when the repository has
 * no such branch. Uncommitted changes in the Member's worktree are not part of it.
 */
export async function memberHead(repo: string, branch: string): Promise<string | undefined> {
  return branchTip(await requireRepo(repo), branch);
}

export interface EvidenceCommit {
  readonly taskId: string;
  readonly outputId: string;
  /** The Member's branch head recorded with the output; undefined when none was recorded. */
  readonly commitSha?: string;
}

/** How one evidence commit entered the result. */
type IntegrationStep = EvidenceCommit & {
  readonly how: 'no_commit' | 'contained' | 'fast_forward' | 'merged';
};

export interface ResultBuild {
  /** The protected branch's commit the result starts from. */
  readonly base: string;
  /** The result commit (equal to `base` when no evidence brought a commit the branch does not have). */
  readonly head: string;
  readonly steps: readonly IntegrationStep[];
}

/**
 * Computes a team's result commit: the protected branch's head with every evidence commit integrated, in the order
 * given. Moves no ref and touches no checkout (the caller points the result branch at `head` once the certificate
 * that names it is stored). A conflict refuses with `merge_conflict`, naming the task and the paths.
 */
export async function buildResult(
  repoPath: string,
  input: { protectedBranch: string; evidence: readonly EvidenceCommit[]; teamId: string },
): Promise<ResultBuild> {
  const repo = await requireRepo(repoPath);
  const base = await branchTip(repo, input.protectedBranch);
  if (!base) throw new TeamGitRefusal('branch_not_found', `the protected branch ${input.protectedBranch} does not exist in ${repo}`);
  let head = base;
  const steps: IntegrationStep[] = [];
  for (const e of input.evidence) {
    if (!e.commitSha) {
      steps.push({ ...e, how: 'no_commit' });
      continue;
    }
    if (!(await isCommit(repo, e.commitSha))) {
      throw new TeamGitRefusal('branch_not_found', `the evidence commit ${e.commitSha} of task ${e.taskId} (output ${e.outputId}) is not in ${repo}`);
    }
    if (await isAncestor(repo, e.commitSha, head)) {
      steps.push({ ...e, how: 'contained' });
      continue;
    }
    if (await isAncestor(repo, head, e.commitSha)) {
      head = e.commitSha;
      steps.push({ ...e, how: 'fast_forward' });
      continue;
    }
    const merged = await mergeTree(repo, head, e.commitSha);
    if ('conflicts' in merged) {
      const integrated = steps.filter((s) => s.how === 'fast_forward' || s.how === 'merged').map((s) => s.taskId);
      throw new TeamGitRefusal(
        'merge_conflict',
        `task ${e.taskId}'s commit ${e.commitSha.slice(0, 12)} conflicts with ${input.protectedBranch}` +
          `${integrated.length > 0 ? ` and the work of ${integrated.join(', ')}` : ''} in ${merged.conflicts.join(', ')}`,
      );
    }
    head = await mergeCommit(repo, merged.tree, [head, e.commitSha], `orchard team ${input.teamId}: integrate task ${e.taskId} (output ${e.outputId})`);
    steps.push({ ...e, how: 'merged' });
  }
  return { base, head, steps };
}

/** Points `refs/heads/<branch>` at `sha` (creating it); a branch already there changes nothing. */
export async function setBranch(repoPath: string, branch: string, sha: string): Promise<void> {
  const repo = await requireRepo(repoPath);
  if ((await branchTip(repo, branch)) === sha) return;
  const args = [...NO_HOOKS, 'update-ref', '-m', 'orchard: team result', `refs/heads/${branch}`, sha];
  const out = await updateRef(repo, args);
  if (out.code === 0) return;
  // A lock left by a writer that was killed (every git here is cut at GIT_TIMEOUT_MS; seen once: an update-ref of
  // the result branch hung and was killed, and its lock then refused every later certification). A live writer's
  // lock is waited for (core.filesRefLockTimeout); one older than any writer may live is stale: removed, and the
  // update tried once more.
  const lock = /Unable to create '([^']+\.lock)': File exists/.exec(out.stderr)?.[1];
  const stat = lock ? await fs.stat(lock).catch(() => undefined) : undefined;
  let last = out;
  if (lock && stat && Date.now() - stat.mtimeMs > GIT_TIMEOUT_MS + STALE_LOCK_MARGIN_MS && lock.endsWith(`/refs/heads/${branch}.lock`)) {
    await fs.rm(lock, { force: true });
    last = await updateRef(repo, args);
    if (last.code === 0) return;
  }
  throw new TeamGitRefusal('git_command_failed', `git ${args.join(' ')} failed in ${repo}: ${(last.stderr || last.stdout).trim()}`);
}

/** Deletes `refs/heads/<branch>` if it still points at `sha` (a branch moved since is left alone). */
export async function deleteBranch(repoPath: string, branch: string, sha: string): Promise<void> {
  const repo = await requireRepo(repoPath);
  if ((await branchTip(repo, branch)) !== sha) return;
  await updateRef(repo, [...NO_HOOKS, 'update-ref', '-d', `refs/heads/${branch}`, sha]);
}

/**
 * The worker's own result ref is moved without hooks: the ref backstop (and any hook it chains) is there for the
 * agents' git, not for Orchard's, and the result branch is Orchard's alone. (A race in the backstop's install once
 * chained the hook to itself, and every ref update of the repository, this one included, hung until killed.)
 */
const NO_HOOKS = ['-c', 'core.hooksPath=/dev/null'];
/** An update-ref takes milliseconds, and waits at most core.filesRefLockTimeout (10 s) for a lock. */
const UPDATE_REF_TIMEOUT_MS = 30_000;

function updateRef(repo: string, args: string[]): Promise<GitOutput> {
  return run(repo, args, UPDATE_REF_TIMEOUT_MS);
}

type MergeMode = 'already_contained' | 'fast_forward' | 'merge_commit';

export interface MergePlan {
  /** The protected branch's head when the plan was made. */
  readonly before: string;
  /** Its head once merged. */
  readonly after: string;
  readonly mode: MergeMode;
}

/**
 * What merging `resultHead` into the protected branch makes of it, computed without moving anything: nothing
 * when the branch already contains it, a fast-forward when the branch is an ancestor of it, else one merge commit
 * (created as an object only, first parent the branch). A conflict refuses with `merge_conflict`.
 */
export async function planMerge(repoPath: string, input: { protectedBranch: string; resultHead: string; message: string }): Promise<MergePlan> {
  const repo = await requireRepo(repoPath);
  const before = await branchTip(repo, input.protectedBranch);
  if (!before) throw new TeamGitRefusal('branch_not_found', `the protected branch ${input.protectedBranch} does not exist in ${repo}`);
  if (!(await isCommit(repo, input.resultHead))) throw new TeamGitRefusal('branch_not_found', `the result commit ${input.resultHead} is not in ${repo}`);
  if (await isAncestor(repo, input.resultHead, before)) return { before, after: before, mode: 'already_contained' };
  if (await isAncestor(repo, before, input.resultHead)) return { before, after: input.resultHead, mode: 'fast_forward' };
  const merged = await mergeTree(repo, before, input.resultHead);
  if ('conflicts' in merged) {
    throw new TeamGitRefusal(
      'merge_conflict',
      `the result ${input.resultHead.slice(0, 12)} conflicts with ${input.protectedBranch} (moved since certification) in ${merged.conflicts.join(', ')}`,
    );
  }
  return { before, after: await mergeCommit(repo, merged.tree, [before, input.resultHead], input.message), mode: 'merge_commit' };
}

/** The worktree that has `branch` checked out, if any (a bare repository has none). */
async function checkoutOf(repo: string, branch: string): Promise<string | undefined> {
  const entries = parseWorktreeList(await must(repo, ['worktree', 'list', '--porcelain', '-z']));
  return entries.find((e) => !e.bare && !e.prunable && e.branch === `refs/heads/${branch}`)?.path;
}

/**
 * Moves the protected branch from `plan.before` to `plan.after`. Where it is checked out (the repository's main
 * checkout, usually), the move is `git merge --ff-only` in that worktree, so its index and files follow the ref;
 * refused with `checkout_dirty` — nothing moved — when that checkout has uncommitted changes to tracked files,
 * or untracked files the merge would overwrite. Elsewhere it is `update-ref <after> <before>`, a compare-and-swap.
 * Returns `already` when the branch already contains `after`, and `stale` — nothing moved — when the branch is
 * at neither (it moved since the plan was made: plan again).
 */
export async function moveProtectedBranch(repoPath: string, branch: string, plan: MergePlan): Promise<'moved' | 'already' | 'stale'> {
  const repo = await requireRepo(repoPath);
  const now = await branchTip(repo, branch);
  if (!now) throw new TeamGitRefusal('branch_not_found', `the protected branch ${branch} does not exist in ${repo}`);
  if (await isAncestor(repo, plan.after, now)) return 'already';
  if (now !== plan.before) return 'stale';
  const checkout = await checkoutOf(repo, branch);
  if (checkout === undefined) {
    const updated = await run(repo, ['update-ref', '-m', 'orchard: team merge', `refs/heads/${branch}`, plan.after, plan.before]);
    if (updated.code === 0) return 'moved';
    if ((await branchTip(repo, branch)) !== plan.before) return 'stale';
    throw new TeamGitRefusal('git_command_failed', `git update-ref refs/heads/${branch} failed: ${updated.stderr.trim()}`);
  }
  const dirty = await must(checkout, ['status', '--porcelain', '--untracked-files=no']);
  if (dirty.trim() !== '') {
    throw new TeamGitRefusal(
      'checkout_dirty',
      `${branch} is checked out in ${checkout}, which has uncommitted changes (${dirty.trim().split('\n').length} path(s)): ` +
        'commit or stash them there, then merge again; nothing was changed',
    );
  }
  const merged = await run(checkout, ['merge', '--ff-only', '--no-stat', plan.after]);
  if (merged.code !== 0) {
    const why = (merged.stderr || merged.stdout).trim();
    if (/would be overwritten|untracked working tree files/i.test(why)) {
      throw new TeamGitRefusal('checkout_dirty', `${branch} is checked out in ${checkout}, where the merge would overwrite files: ${why}; nothing was changed`);
    }
    throw new TeamGitRefusal('git_command_failed', `git merge --ff-only in ${checkout} failed: ${why}`);
  }
  return 'moved';
}
