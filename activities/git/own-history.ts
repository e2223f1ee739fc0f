import type { HistoryClaim } from '../bash/guard';
import { branchSessionId } from '../bash/sandbox';
import { git } from './repo-tools';

/**
 * What an isolated child's branch may become: its own history. A commit is the child's own when no ref outside its
 * namespace reaches it (not `main`, not another session's branch, not a tag); the commits such refs reach are shared.
 * A move of the branch from `from` to `to` keeps to its own history when it is a rewind (`to` an ancestor of
 * `from`), or when it gains no shared commit (a rebase onto another branch, a reset to it, a merge of it: integration,
 * the orchestrator's job) and drops none (rewriting commits the branch has in common with others: below its base,
 * or already integrated).
 *
 * The guard allows `git reset <commit>` and `git rebase` of the own commits on that condition (a HistoryClaim), which
 * `claimProblem` checks before the command runs; `moveProblem` checks the effect after any command, however it moved
 * the branch (an interpreter, an edited rebase todo list, a value planted in ORIG_HEAD). Git runs on the host with the
 * tools' safe settings, in a worktree no command is running in.
 */

export interface OwnScope {
  readonly worktree: string;
  /** The child's branch, `orchard/<sessionId>/<leaf>`. */
  readonly branch: string;
  /**
   * The child's object quarantine: read as an alternate, since a command's new commits wait there until it passed
   * verification (this check is part of it).
   */
  readonly quarantine?: string;
}

/** git in the child's worktree, with its quarantined objects readable. */
function run(scope: OwnScope, args: string[], exitOk: readonly number[] = [], stdin?: string): Promise<string> {
  return git(scope.worktree, args, exitOk, stdin, scope.quarantine ? { GIT_ALTERNATE_OBJECT_DIRECTORIES: scope.quarantine } : undefined);
}

/** Commits shown in a refusal; the count says how many more. */
const SHOWN = 3;

/** The commit a revision names in the worktree, or undefined (git will fail on it just the same, or read it as a path). */
async function commitOf(scope: OwnScope, rev: string): Promise<string | undefined> {
  if (rev.startsWith('-')) return undefined;
  const out = await run(scope, ['rev-parse', '--verify', '--quiet', '--end-of-options', `${rev}^{commit}`], [1, 128]);
  return out.trim() || undefined;
}

/**
 * Every ref outside the child's namespace, as rev-list arguments: branches, remote-tracking branches and tags but the
 * child's own (`refs/heads/orchard/<id>/…`, `refs/remotes/<remote>/orchard/<id>/…`). Another session's branch may name a
 * commit still in that session's quarantine (its command is being verified), which no other git can read yet:
 * rev-list skips such a ref (`--ignore-missing`).
 */
function sharedRefs(scope: OwnScope): string[] {
  const id = branchSessionId(scope.branch);
  return [`--exclude=orchard/${id}/*`, '--branches', `--exclude=*/orchard/${id}/*`, '--remotes', '--tags'];
}

/** The commits of `include` not reachable from `exclude` that a shared ref reaches (newest first); `all` is that range. */
async function sharedAmong(scope: OwnScope, all: readonly string[], include: string, exclude: readonly string[]): Promise<string[]> {
  if (all.length === 0) return [];
  const range = [include, ...exclude.map((e) => `^${e}`)];
  const own = new Set((await run(scope, ['rev-list', '--ignore-missing', ...range, '--not', ...sharedRefs(scope)])).split('\n').filter(Boolean));
  return all.filter((c) => !own.has(c));
}

/** The commits of `include` not reachable from `exclude` (newest first). */
async function range(scope: OwnScope, include: string, exclude: readonly string[]): Promise<string[]> {
  return (await run(scope, ['rev-list', include, ...exclude.map((e) => `^${e}`)])).split('\n').filter(Boolean);
}

/** `abc1234 subject` lines for a refusal, with where the first one is shared from. */
async function describe(scope: OwnScope, commits: readonly string[]): Promise<string> {
  const shown = commits.slice(0, SHOWN);
  const lines = await run(scope, ['log', '--no-walk=unsorted', '--format=%h %s', ...shown]);
  // Only to name where they are: a ref whose object cannot be read yet (see sharedTips) makes this fail, and says nothing.
  const holders = (await run(scope, ['for-each-ref', '--count=3', '--format=%(refname:short)', '--contains', shown[0]]).catch(() => ''))
    .split('\n')
    .filter((r) => r && !r.startsWith(`${scope.branch.split('/').slice(0, 2).join('/')}/`));
  const more = commits.length > shown.length ? ` (and ${commits.length - shown.length} more)` : '';
  const where = holders.length > 0 ? `; ${holders.join(', ')} ${holders.length === 1 ? 'has' : 'have'} ${shown.length === 1 ? 'it' : 'them'}` : '';
  return `${lines.trim().split('\n').join(', ')}${more}${where}`;
}

/**
 * Why moving the child's branch from `from` to `to` leaves its own history, or undefined when it does not: a rewind,
 * or a move that gains no shared commit and drops none.
 */
export async function moveProblem(scope: OwnScope, from: string, to: string): Promise<string | undefined> {
  if (from === to) return undefined;
  // One walk for both sides: `>` commits the move gains, `<` commits it drops. A plain commit gains one, drops none.
  const sides = (await run(scope, ['rev-list', '--left-right', `${from}...${to}`])).split('\n').filter(Boolean);
  const gainedAll = sides.filter((l) => l.startsWith('>')).map((l) => l.slice(1));
  const droppedAll = sides.filter((l) => l.startsWith('<')).map((l) => l.slice(1));
  if (gainedAll.length === 0) return undefined; // a rewind
  const gained = await sharedAmong(scope, gainedAll, to, [from]);
  if (gained.length > 0) {
    return `it brings ${gained.length} commit${gained.length === 1 ? '' : 's'} of other branches into ${scope.branch}: ${await describe(scope, gained)}`;
  }
  const dropped = await sharedAmong(scope, droppedAll, from, [to]);
  if (dropped.length > 0) {
    return `it rewrites ${dropped.length} commit${dropped.length === 1 ? '' : 's'} that ${scope.branch} shares with other branches: ${await describe(scope, dropped)}`;
  }
  return undefined;
}

/** Why a claim the guard made does not hold in this repository now, or undefined when it does. */
export async function claimProblem(scope: OwnScope, claim: HistoryClaim): Promise<string | undefined> {
  if (claim.kind === 'reattach') return undefined;
  const head = await commitOf(scope, 'HEAD');
  if (head === undefined) return undefined;
  if (claim.kind === 'move') {
    const target = claim.target === undefined ? undefined : await commitOf(scope, claim.target);
    if (target === undefined) return undefined; // a path, or a revision git rejects itself
    const problem = await moveProblem(scope, head, target);
    return problem && `\`${claim.construct}\` moves ${scope.branch} to ${claim.target} (${target.slice(0, 12)}): ${problem}`;
  }
  if (claim.upstream === undefined) return undefined; // --continue, --skip, --edit-todo: the effect is checked after
  const upstream = await commitOf(scope, claim.upstream);
  if (upstream === undefined) return undefined;
  const base = (await run(scope, ['merge-base', upstream, head], [1])).trim() || undefined;
  const replayed = base ? [base] : [];
  const rewritten = await sharedAmong(scope, await range(scope, head, replayed), head, replayed);
  if (rewritten.length > 0) {
    return (
      `\`${claim.construct}\` rewrites ${rewritten.length} commit${rewritten.length === 1 ? '' : 's'} that ${scope.branch} shares with other ` +
      `branches (below its base, or already integrated): ${await describe(scope, rewritten)}`
    );
  }
  const onto = claim.onto === undefined ? base : await commitOf(scope, claim.onto);
  if (onto === undefined) return undefined;
  const gained = await sharedAmong(scope, await range(scope, onto, [head]), onto, [head]);
  if (gained.length > 0) {
    return (
      `\`${claim.construct}\` replays ${scope.branch} onto ${claim.onto ?? claim.upstream}, bringing in ${gained.length} commit${gained.length === 1 ? '' : 's'} ` +
      `of other branches: ${await describe(scope, gained)}`
    );
  }
  return undefined;
}
