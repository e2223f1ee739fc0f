import { readFileSync, realpathSync } from 'node:fs';
import * as path from 'node:path';
import { buildSandboxArgv, prepareSandboxDirs, resolveSandboxLayout, sandboxAvailable, type SandboxLayout } from './sandbox';
import { sessionQuarantineDir } from '../git/quarantine';
import { NAMESPACE_INFO_FD } from './runner';

/**
 * How this host runs an isolated child's commands (docs/confinement.md). Resolved once when the worker starts:
 * - `sandbox`: every command runs under bubblewrap, confined to the child's allowance (layer 2).
 * - `off`: the operator set ORCHARD_SANDBOX=off; the guard alone, and every isolated session is marked unconfined.
 * - `unavailable`: the sandbox could not be built here; isolated children are refused, saying why (fail closed).
 */
export type Confinement = { mode: 'sandbox'; bwrap: string; version: string } | { mode: 'off'; reason: string } | { mode: 'unavailable'; reason: string };

/** The environment variable that turns the sandbox off (`off`) or insists on it (`on`, the default). */
const SANDBOX_SETTING = 'ORCHARD_SANDBOX';

/** Reads ORCHARD_SANDBOX and, unless it is `off`, probes bubblewrap by effect (sandboxAvailable). */
export async function resolveConfinement(env: NodeJS.ProcessEnv = process.env): Promise<Confinement> {
  const setting = (env[SANDBOX_SETTING] ?? 'on').trim().toLowerCase();
  if (setting === 'off') return { mode: 'off', reason: `${SANDBOX_SETTING}=off: isolated children run with the guard alone` };
  if (setting !== 'on' && setting !== '') {
    throw new Error(`${SANDBOX_SETTING} must be "on" or "off", got ${JSON.stringify(env[SANDBOX_SETTING])}`);
  }
  const probe = await sandboxAvailable();
  if (!probe.ok) return { mode: 'unavailable', reason: probe.reason };
  return { mode: 'sandbox', bwrap: probe.bwrap, version: probe.version };
}

/** One line for the worker's start-up log and `orchard doctor`-style output. */
export function describeConfinement(c: Confinement): string {
  switch (c.mode) {
    case 'sandbox':
      return `isolated children run confined (${c.version} at ${c.bwrap})`;
    case 'off':
      return `isolated children run UNCONFINED: ${c.reason}`;
    case 'unavailable':
      return `isolated children are refused on this host: the sandbox is unavailable (${c.reason}); install bubblewrap, or set ${SANDBOX_SETTING}=off to run them with the guard alone`;
  }
}

/**
 * A session's private temp dir on the host, `<worktreeRoot>/.tmp/<sessionId>` (beside `.homes`): what its
 * commands see as /tmp, /var/tmp and TMPDIR. Never inside the worktree (it would show as untracked files).
 */
export function sessionTmpDir(worktree: string, sessionId: string): string {
  return path.join(path.dirname(path.resolve(worktree)), '.tmp', sessionId);
}

/**
 * The sandbox layout of an isolated child's worktree. The shared repository is found from the worktree's `.git`
 * file, which the child can write; resolveSandboxLayout believes it only when the admin dir it names points back
 * at this worktree, and refuses a "repository" inside the worktree or the private tmp. What is left for a child
 * to fake lies inside what it may already write (its admin dir, the object store, its ref directory), so the
 * allowance derived from a faked file is never larger than the real one; and verification after every command
 * (verify.ts) reports a changed `.git` file and stops the session before another command runs.
 */
export async function isolatedLayout(input: {
  worktree: string;
  branch: string;
  sessionId: string;
  home?: string;
  hide?: readonly string[];
}): Promise<SandboxLayout> {
  // Synchronous, as in resolveSandboxLayout: metadata calls on local disk, before every command.
  const worktree = realpathSync.native(input.worktree);
  let dotGit: string | undefined;
  try {
    dotGit = readFileSync(path.join(worktree, '.git'), 'utf8');
  } catch {
    dotGit = undefined;
  }
  const match = dotGit?.match(/^gitdir: (.+)\n?$/);
  if (!match) throw new Error(`${worktree}/.git is not a linked worktree's gitdir file`);
  const commonDir = path.dirname(path.dirname(path.resolve(worktree, match[1])));
  const tmpDir = sessionTmpDir(worktree, input.sessionId);
  // A hidden directory that holds the child's own paths would hide them too: such a one stays (read-only).
  const inside = (p: string, dir: string) => p === dir || p.startsWith(dir + path.sep);
  const hide = (input.hide ?? []).filter(
    (dir) =>
      path.isAbsolute(dir) &&
      dir !== '/' &&
      ![worktree, commonDir, tmpDir, sessionQuarantineDir(worktree, input.sessionId)].some((p) => inside(p, path.resolve(dir))),
  );
  const quarantine = sessionQuarantineDir(worktree, input.sessionId);
  const layout = await resolveSandboxLayout({ commonDir, worktree, branch: input.branch, tmpDir, quarantine, home: input.home, hide });
  await prepareSandboxDirs(layout);
  return layout;
}

/** The argv that runs `command` confined to `layout` (bwrap first). */
export function confinedArgv(confinement: Extract<Confinement, { mode: 'sandbox' }>, layout: SandboxLayout, command: string): string[] {
  return buildSandboxArgv(layout, command, { bwrap: confinement.bwrap, infoFd: NAMESPACE_INFO_FD });
}
