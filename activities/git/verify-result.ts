import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { homedir } from 'node:os';
import * as path from 'node:path';
import { OrchardError } from '../../contract/errors';
import type { Confinement } from '../bash/confinement';
import { sessionTmpDir } from '../bash/confinement';
import type { CommandSlots } from '../bash/command-slots';
import { buildCommandEnv, sessionHomeDir } from '../bash/env';
import { NAMESPACE_INFO_FD, runBash } from '../bash/runner';
import { runFileText } from '../bash/spawner';
import { buildScratchSandboxArgv } from '../bash/sandbox';

/** What a verification ran, and what came of it (before it is stored: activities/store/team-verify.ts). */
export interface VerificationRun {
  readonly resultHead: string;
  readonly tree: string;
  readonly command: string;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly timedOut: boolean;
  readonly durationMs: number;
  readonly confined: boolean;
  readonly outputDigest: string;
  readonly stdout: string;
  readonly stderr: string;
  readonly outputTruncated: boolean;
}

export interface VerifierDeps {
  /** The host's worktree root: scratch trees go to `<root>/.verify/<id>`, never into a Member's worktree. */
  readonly worktreeRoot: string;
  readonly confinement?: Confinement;
  readonly slots?: CommandSlots;
  /** Kept per stream (head and tail); the digest covers what is kept. */
  readonly maxOutputBytes?: number;
}

export interface VerifyInput {
  /** The team's repository (its object store is borrowed read-only). */
  readonly repo: string;
  readonly head: string;
  /** Shown to the command as ORCHARD_BRANCH (the result branch the head is on). */
  readonly branch: string;
  readonly command: string;
  readonly timeoutMs: number;
  /** Names the scratch directory: one per verification id, so a retried attempt starts from a clean tree again. */
  readonly scratchId: string;
  readonly onTick?: (progress: { outputTail: string }) => void;
  readonly signal?: AbortSignal;
}

const GIT_ENV = { GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', GIT_TERMINAL_PROMPT: '0', LC_ALL: 'C' };
const git = async (args: string[]) =>
  (await runFileText('git', args, { env: { ...GIT_ENV, PATH: process.env.PATH ?? '/usr/bin:/bin' }, maxBuffer: 16 << 20 })).trim();
/** The session id the scratch tree's HOME and tmp are named by (`<scratch>/.homes/verify`, `<scratch>/.tmp/verify`). */
const SCRATCH_SESSION = 'verify';

/** sha256 of what a command wrote: stdout, a NUL, stderr. */
function outputDigest(stdout: string, stderr: string): string {
  return `sha256:${createHash('sha256').update(stdout).update('\0').update(stderr).digest('hex')}`;
}

/**
 * Runs a team's verify command on `head`: a clean checkout of its tree in a scratch directory of its own (a clone
 * that borrows the team repository's objects, read-only), under the same sandbox as a child's bash — the scratch tree,
 * its HOME and its private /tmp writable, everything else read-only, the worker's HOME hidden — with the same
 * environment allowlist, process-group teardown and host command cap. The scratch directory is removed afterwards.
 * A host that cannot confine commands refuses (`sandbox_unavailable`); one whose operator turned the sandbox off runs
 * it unconfined and says so (`confined: false`).
 */
export async function verifyResult(deps: VerifierDeps, input: VerifyInput): Promise<VerificationRun> {
  const confinement = deps.confinement;
  if (!confinement || confinement.mode === 'unavailable') {
    throw new OrchardError(
      'sandbox_unavailable',
      `this host cannot confine the verify command, so it did not run: ${confinement?.reason ?? 'no confinement was resolved'}`,
    );
  }
  const repo = path.resolve(input.repo);
  const tree = await git(['-C', repo, 'rev-parse', '--verify', '--end-of-options', `${input.head}^{tree}`]);
  const commonDir = await fs.realpath(path.resolve(repo, await git(['-C', repo, 'rev-parse', '--git-common-dir'])));
  const scratch = path.join(path.resolve(deps.worktreeRoot), '.verify', input.scratchId);
  await fs.rm(scratch, { recursive: true, force: true });
  await fs.mkdir(scratch, { recursive: true, mode: 0o700 });
  try {
    const dir = path.join(scratch, 'tree');
    // --shared: the objects are read through an alternate (nothing copied); the clone's own refs and index are its own.
    await git(['clone', '--quiet', '--no-checkout', '--shared', '--', repo, dir]);
    await git(['-C', dir, 'remote', 'remove', 'origin']);
    await git(['-C', dir, '-c', 'advice.detachedHead=false', 'checkout', '--quiet', '--detach', input.head]);
    const worktree = await fs.realpath(dir);
    const home = sessionHomeDir(worktree, SCRATCH_SESSION);
    const tmpDir = sessionTmpDir(worktree, SCRATCH_SESSION);
    await fs.mkdir(home, { recursive: true, mode: 0o700 });
    await fs.mkdir(tmpDir, { recursive: true, mode: 0o700 });
    const inside = (p: string, d: string) => p === d || p.startsWith(d + path.sep);
    // The worker's HOME may hold credentials: emptied, unless the scratch (or the repository) lives under it.
    const hide = [homedir()].filter((d) => d !== '/' && ![scratch, commonDir].some((p) => inside(p, d)));
    const argv =
      confinement.mode === 'sandbox'
        ? buildScratchSandboxArgv({ tree: worktree, home, tmpDir, readOnly: [commonDir], hide }, input.command, {
            bwrap: confinement.bwrap,
            infoFd: NAMESPACE_INFO_FD,
          })
        : undefined;
    const env = buildCommandEnv({ worktree, sessionId: SCRATCH_SESSION, branch: input.branch });
    const result = await runBash({
      command: input.command,
      argv,
      cwd: worktree,
      env: argv ? env : { ...env, TMPDIR: tmpDir },
      timeoutMs: input.timeoutMs,
      maxOutputBytes: deps.maxOutputBytes ?? 256 * 1024,
      slots: deps.slots,
      onTick: input.onTick,
      signal: input.signal,
    });
    if (result.notStarted) throw new Error(`the verify command did not start: ${result.notStartedReason ?? 'unknown'}`);
    if (result.cancelled) throw new Error('the verification was cancelled');
    // PostgreSQL text holds no NUL: replaced before the digest, so the digest is of what is stored.
    const [stdout, stderr] = [result.stdout, result.stderr].map((o) => o.replaceAll('\0', '\uFFFD'));
    return {
      resultHead: input.head,
      tree,
      command: input.command,
      exitCode: result.exitCode,
      signal: result.signal,
      timedOut: result.timedOut,
      durationMs: Math.round(result.durationMs),
      confined: argv !== undefined,
      outputDigest: outputDigest(stdout, stderr),
      stdout,
      stderr,
      outputTruncated: result.stdoutTruncated || result.stderrTruncated,
    };
  } finally {
    await fs.rm(scratch, { recursive: true, force: true }).catch(() => undefined);
  }
}
