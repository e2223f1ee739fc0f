import { homedir } from 'node:os';
import * as path from 'node:path';
import { ISOLATED_BRANCH_ENV } from '../git/backstop';
import { confinedArgv, isolatedLayout, type Confinement } from './confinement';
import { buildCommandEnv, sessionHomeDir } from './env';
import { formatRefusal, guardCommand, guardVerdict, type GuardDecision } from './guard';
import { branchSessionId, writableRefDirs, type SandboxLayout } from './sandbox';
import { SESSION_BRANCH_PREFIX } from '../../workflows/session/ids';
import { migrateQuarantine, type Migration } from '../git/quarantine';
import { compareSnapshots, snapshotProtected, type ProtectedChange, type ProtectedSnapshot } from './verify';

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
  const decision = guardVerdict(await guardCommand(input.command, { branch: input.branch, worktree: input.worktree, isolated: true }), {
    confined: input.confinement.mode === 'sandbox',
  });
  if (!decision.allowed) return { admitted: false, code: 'guard_refused', message: formatRefusal(decision), decision };
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
}): Promise<PreparedIsolated> {
  const layout = await isolatedLayout({
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

/** Layer 3 after the command: what changed that the child must not change (empty when nothing did). */
export async function verifyIsolated(prepared: PreparedIsolated): Promise<ProtectedChange[]> {
  const changes = compareSnapshots(prepared.before, await snapshotProtected(prepared.layout));
  return changes.filter((change) => attributable(change, prepared));
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
