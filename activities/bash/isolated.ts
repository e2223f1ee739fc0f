import { randomUUID } from 'node:crypto';
import { existsSync, promises as fs, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import * as path from 'node:path';
import { ISOLATED_BRANCH_ENV } from '../git/backstop';
import { confinedArgv, isolatedLayout, type Confinement } from './confinement';
import { buildCommandEnv, sessionHomeDir } from './env';
import { formatRefusal, guardCommand, guardVerdict, refusedDecision, type GuardDecision } from './guard';
import { branchSessionId, writableRefDirs, type SandboxLayout } from './sandbox';
import { SESSION_BRANCH_PREFIX } from '../../contract/ids';
import { migrateQuarantine, sessionQuarantineDir, type Migration } from '../git/quarantine';
import { claimProblem, moveProblem } from '../git/own-history';
import { compareSnapshots, ownRebaseInProgress, REBASE_STATE_DIRS, snapshotProtected, type ProtectedChange, type ProtectedSnapshot } from './verify';

/**
 * One isolated child's command through the three layers (docs/confinement.md), in the pieces both the bash tool
 * (activities/tools/run-tool.ts, which adds the lease fence and the verification hold) and `orchard exec` put
 * together in the same order: admit (confinement available, guard) → prepare (layout, sandbox argv, snapshot) →
 * run → verify (compare). The ref backstop is the repository's hook and runs inside the command itself.
 */

export type Admission =
  | { readonly admitted: true; readonly decision: GuardDecision }
  | { readonly admitted: false; readonly code: 'sandbox_unavailable' | 'guard_refused'; readonly message: string; readonly decision?: GuardDecision };

/** Layer 1, and fail closed: refused when the host cannot confine, or when the guard refuses the text. */
export async function admitIsolated(input: { command: string; worktree: string; branch: string; confinement?: Confinement }): Promise<Admission> {
  if (!input.confinement || input.confinement.mode === 'unavailable') {
    const why = input.confinement?.reason ?? 'no confinement was resolved';
    return { admitted: false, code: 'sandbox_unavailable', message: `this host cannot confine an isolated child's commands, so none run: ${why}` };
  }
  // Confined, what the guard cannot judge runs (with notes) and the sandbox decides; with the guard alone it is refused.
  const context = { branch: input.branch, worktree: input.worktree, isolated: true };
  const decision = guardVerdict(await guardCommand(input.command, context), { confined: input.confinement.mode === 'sandbox' });
  if (!decision.allowed) return { admitted: false, code: 'guard_refused', message: formatRefusal(decision), decision };
  // A reset or rebase the text allows on the condition that it stays on the child's own history: the repository says.
  for (const claim of decision.history ?? []) {
    const sessionId = branchSessionId(input.branch);
    const quarantine = sessionId === undefined ? undefined : sessionQuarantineDir(input.worktree, sessionId);
    const problem = await claimProblem({ worktree: input.worktree, branch: input.branch, quarantine }, claim);
    if (problem === undefined) continue;
    const refused = refusedDecision({ reason: 'integration_policy', refused: claim.construct, why: problem }, context);
    return { admitted: false, code: 'guard_refused', message: formatRefusal(refused), decision: refused };
  }
  return { admitted: true, decision };
}

export interface PreparedIsolated {
  readonly layout: SandboxLayout;
  /** The sandbox's argv (bwrap first), or undefined when the host runs with ORCHARD_SANDBOX=off. */
  readonly argv?: string[];
  /** The complete environment of the command. */
  readonly env: Record<string, string>;
  /** What the child must not change, before the command. */
  readonly before: ProtectedSnapshot;
}

/**
 * Layers 2 and 3 before the command: the layout (built before every command: a ref directory the sandbox binds may
 * have been packed away since the last one), the sandbox argv, the environment and the snapshot.
 */
export async function prepareIsolated(input: {
  command: string;
  worktree: string;
  branch: string;
  sessionId: string;
  confinement: Confinement;
  /** The admitted decision: a rebase or a checkout of the own branch among its claims leaves HEAD writable. */
  decision?: GuardDecision;
}): Promise<PreparedIsolated> {
  const base = await isolatedLayout({
    worktree: input.worktree,
    branch: input.branch,
    sessionId: input.sessionId,
    home: sessionHomeDir(input.worktree, input.sessionId),
    // The worker's own HOME may hold credentials (~/.git-credentials, ~/.npmrc): an empty directory in its place.
    hide: [homedir()],
  }).catch((err: unknown) => {
    const message = `the layout of this worktree cannot be confined or verified, so the command did not run: ${err instanceof Error ? err.message : String(err)}`;
    throw Object.assign(new Error(message), { code: 'sandbox_unavailable' });
  });
  // HEAD stays read-only unless the command must detach or rewrite it: a rebase (started here or in progress, whose
  // state dirs a command can also fake — pinHead checks HEAD after it either way) or a checkout of the own branch.
  const writesHead = (input.decision?.allowed && input.decision.history?.some((c) => c.kind !== 'move')) || rebaseStateExists(base.adminDir);
  const layout: SandboxLayout = { ...base, pinHead: !writesHead };
  const argv = input.confinement.mode === 'sandbox' ? confinedArgv(input.confinement, layout, input.command) : undefined;
  const env = buildCommandEnv({
    worktree: input.worktree,
    sessionId: input.sessionId,
    branch: input.branch,
    // Holds scripts that leave the worktree (`cd ../main && git …`) to the child's branch in the backstop hook.
    extra: { [ISOLATED_BRANCH_ENV]: input.branch },
  });
  // Objects a verified command left behind (a worker that died before moving them, or a hold a person resolved).
  if (argv) await settleIsolated({ layout });
  // A HEAD a command left off the branch was put back after it, unless the worker died first (or the worktree
  // predates the pin): put back now, so the snapshot and the command start from the branch.
  await pinHead(layout);
  return { layout, argv, env, before: await snapshotProtected(layout) };
}

/**
 * After a command that passed verification: its new objects leave the quarantine for the shared store, where every
 * other worktree, the team's result and merges can read them. Objects whose content does not match their name stay.
 */
export async function settleIsolated(prepared: Pick<PreparedIsolated, 'layout'>): Promise<Migration | undefined> {
  const { quarantine, commonDir } = prepared.layout;
  if (quarantine === undefined) return undefined;
  return migrateQuarantine(quarantine, path.join(commonDir, 'objects'));
}

/**
 * Layer 3 after the command: what changed that the child must not change (empty when nothing did). Two checks of its
 * own things besides: its branch must have stayed on its own history (own-history.ts: no commits of other branches
 * brought in, none it shares rewritten), and its HEAD must name its branch (or a commit mid-rebase of it) — a HEAD
 * that does not is put back here, from outside the sandbox, and reported.
 */
export async function verifyIsolated(prepared: PreparedIsolated): Promise<ProtectedChange[]> {
  const after = await snapshotProtected(prepared.layout);
  const changes = compareSnapshots(prepared.before, after).filter((change) => attributable(change, prepared));
  const { layout } = prepared;
  const ref = `refs/heads/${layout.branch}`;
  const [was, now] = [prepared.before.refs[ref], after.refs[ref]];
  if (was !== undefined && now !== undefined && was !== now && OBJECT_ID.test(was) && OBJECT_ID.test(now)) {
    // A git that fails (a loaded machine killing it, a transient lock) is tried again; one that keeps failing counts
    // as a problem: the worktree is held, not waved through.
    const scope = { worktree: layout.worktree, branch: layout.branch, quarantine: layout.quarantine };
    const problem = await retried(() => moveProblem(scope, was, now)).catch(
      (err: unknown) => `Orchard could not check where it moved (${err instanceof Error ? err.message : String(err)})`,
    );
    if (problem) changes.unshift({ kind: 'history', path: ref, change: 'modified', before: was, after: `${now}: ${problem}` });
  }
  const restored = await pinHead(layout);
  if (restored) {
    const seen = changes.findIndex((c) => c.path === restored.path);
    if (seen < 0) changes.push(restored);
    else changes[seen] = { ...changes[seen], after: `${changes[seen].after ?? '(absent)'}; ${restored.after}` };
  }
  return changes;
}

const OBJECT_ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/** `fn`, tried up to three times 250 ms apart; the last failure is thrown. */
async function retried<T>(fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (attempt >= 3) throw err;
      await new Promise((resolve) => setTimeout(resolve, 250 * attempt));
    }
  }
}

/** Whether a rebase's state dir is in the admin dir, whatever branch it names. */
function rebaseStateExists(adminDir: string): boolean {
  return REBASE_STATE_DIRS.some((dir) => existsSync(path.join(adminDir, dir)));
}

/**
 * Puts the child's HEAD back on its branch when it names anything else (another branch, a commit outside a rebase of
 * its own branch, garbage), writing a new file and renaming it over HEAD from outside the sandbox. Returns the change
 * it repaired, or undefined when HEAD was the child's own.
 */
async function pinHead(layout: Pick<SandboxLayout, 'adminDir' | 'branch'>): Promise<ProtectedChange | undefined> {
  const file = path.join(layout.adminDir, 'HEAD');
  const own = `ref: refs/heads/${layout.branch}`;
  let value: string | undefined;
  try {
    value = readFileSync(file, 'utf8').trim(); // before and after every command: synchronous, as the snapshot's reads
  } catch {
    value = undefined;
  }
  if (value === own || (value !== undefined && OBJECT_ID.test(value) && ownRebaseInProgress(layout.adminDir, layout.branch))) return undefined;
  const tmp = path.join(layout.adminDir, `HEAD.orchard-${randomUUID()}`);
  // `wx`: a name the child planted (a symlink out of the admin dir) is never written through.
  await fs.writeFile(tmp, `${own}\n`, { flag: 'wx', mode: 0o644 });
  await fs.rename(tmp, file);
  return { kind: 'head', path: file, change: 'modified', ...(value !== undefined ? { before: value } : {}), after: `put back by Orchard to ${own}` };
}

/**
 * Whether a change can be the command's doing, so that it holds the worktree. The files cannot say who wrote them,
 * and other actors work in the same repository meanwhile (team members commit on their branches, a result branch
 * is built, a user commits on main). Confined, the kernel made everything outside the allowance read-only to the
 * command: only changes inside what it may write count (its admin dir — HEAD, config.worktree, the backstop
 * marker, gitdir, commondir —, its `.git` file, the object store's alternates, its own refs). With the guard
 * alone everything counts except other sessions' branches (`orchard/…` refs), which their sessions move all the
 * time; the backstop refuses the child's own moves of them.
 */
function attributable(change: ProtectedChange, prepared: PreparedIsolated): boolean {
  const { layout } = prepared;
  if (prepared.argv) {
    if (change.kind === 'ref') return ownRef(change.path, layout);
    // Anything the sandbox lets it write: its worktree (the .git file), its admin dir, its object quarantine (the
    // shared store only where no quarantine is set up), its ref directories.
    const writable = [
      layout.worktree,
      layout.adminDir,
      layout.quarantine ?? path.join(layout.commonDir, 'objects'),
      ...writableRefDirs(layout).map((d) => path.join(layout.commonDir, d)),
    ];
    return writable.some((dir) => change.path === dir || change.path.startsWith(`${dir}/`));
  }
  if (change.kind === 'ref' && !ownRef(change.path, layout)) return !/^refs\/(heads|remotes\/[^/]+)\/orchard\//.test(change.path);
  return true;
}

/** A ref in the child's own namespace (`refs/heads/orchard/<id>/…`, `refs/remotes/<r>/orchard/<id>/…`). */
function ownRef(ref: string, layout: SandboxLayout): boolean {
  const own = `${SESSION_BRANCH_PREFIX}${branchSessionId(layout.branch)}/`;
  return ref.startsWith(`refs/heads/${own}`) || (/^refs\/remotes\/[^/]+\//.test(ref) && ref.split('/').slice(3).join('/').startsWith(own));
}
