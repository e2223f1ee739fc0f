import { existsSync, lstatSync, mkdirSync, promises as fs, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { SESSION_BRANCH_PREFIX, sessionBranch, sessionIdProblem } from '../../contract/ids';
import { isolatedBranch, markWorktreeIsolated } from '../git/backstop';
import { FileRunError, runFile, runFileText } from './spawner';

/**
 * Layer 2 of confinement (docs/confinement.md): an isolated child's command runs under bubblewrap in its own
 * mount namespace where only the child's allowance is writable. Not wired into the bash tool yet (issue 10).
 *
 * Why bubblewrap and not `unshare -rm`: under `unshare -rm` the command itself is root of its user namespace
 * with CAP_SYS_ADMIN, so it can `umount` the read-only binds it was given (observed: a ro bind undone and the
 * file behind it written). bwrap sets the mounts up, then drops every capability (`--cap-drop ALL`, which is
 * required when the worker runs as root: without it `mount -o remount,rw /` from inside succeeded) and forbids
 * further user namespaces (`--disable-userns`), so the command cannot undo or stack mounts. It is one argv, no
 * mount script to get wrong, and it is a Debian package (`bubblewrap`).
 */

/** The branch of a confined session: the session branch (`orchard/<id>/work`, see contract/ids.ts). */
export const confinedSessionBranch = sessionBranch;

/**
 * The layout is resolved before every command of every isolated child: some twenty metadata calls on local disk. Made
 * synchronously they take microseconds each; through the thread pool each waited ~90 µs (1.8 ms a command, measured).
 */
const realpath = (p: string): string => realpathSync.native(p);
const readText = (file: string): string | undefined => {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
};
const mkdirp = (dir: string, mode?: number): void => void mkdirSync(dir, { recursive: true, ...(mode === undefined ? {} : { mode }) });

/** `dir` created (private) if missing, as a real path. */
function realDir(dir: string): string {
  mkdirp(dir, 0o700);
  return realpath(dir);
}

/** The branch of a session before confinement (a plain file `refs/heads/orchard/<id>`). */
export function legacySessionBranch(sessionId: string): string {
  return `${SESSION_BRANCH_PREFIX}${sessionId}`;
}

export interface SandboxLayout {
  /** The shared repository's common dir (`git rev-parse --git-common-dir`), e.g. `<main checkout>/.git`. */
  commonDir: string;
  /** The child's worktree. */
  worktree: string;
  /** The worktree's own admin dir, `<commonDir>/worktrees/<name>`. */
  adminDir: string;
  /** The child's branch, `orchard/<sessionId>/<leaf>`: its directory `refs/heads/orchard/<sessionId>/` is writable. */
  branch: string;
  /** A private directory (host path) that the command sees as /tmp and /var/tmp, and as TMPDIR. */
  tmpDir: string;
  /** Remotes whose tracking refs for the session (`refs/remotes/<remote>/orchard/<sessionId>/`) are writable. */
  remotes?: readonly string[];
  /**
   * Bare repositories on this disk that are remotes (`remote.<name>.url` a local path): a push of the session's own
   * branch writes their object store and their `refs/heads/orchard/<sessionId>/`, which are made writable; every
   * other ref of theirs stays read-only.
   */
  localRemotes?: readonly string[];
  /**
   * The child's object quarantine (activities/git/quarantine.ts): with one, the shared object store is read-only and
   * git writes new objects here (GIT_OBJECT_DIRECTORY, the shared store its alternate); Orchard moves them into the
   * shared store after the command passed verification. Without one (the start-up probe) the store is writable.
   */
  quarantine?: string;
  /**
   * The child's HEAD (`<adminDir>/HEAD`) is bound read-only, so it stays a symbolic ref to its branch whatever the
   * command does; a commit, reset or cherry-pick on the branch moves the branch through it and writes no HEAD. False
   * only for a command that must detach or rewrite HEAD (a rebase of its own commits, one in progress, a checkout of
   * its own branch); after it, `pinHead` restores a HEAD that names anything else. Unset (the start-up probe): writable.
   */
  pinHead?: boolean;
  /** The session HOME, shown read-only (a `~/.gitconfig` or `~/.bashrc` cannot be planted). */
  home?: string;
  /** Host paths replaced by an empty directory (e.g. the worker's HOME with its credentials). */
  hide?: readonly string[];
}

export interface SandboxOptions {
  /** The bwrap binary; found on PATH (or /usr/bin/bwrap) by default. */
  bwrap?: string;
  /**
   * A descriptor the caller opens (the runner's NAMESPACE_INFO_FD), where bwrap reports the host pid of the namespace's
   * pid 1 (`--info-fd`): the runner then proves the command gone by that one process instead of a /proc scan. It must
   * be open: bwrap 0.8 dies on a failed write there and leaves its half-started child waiting forever.
   */
  infoFd?: number;
}

/**
 * Set in the sandbox. TMPDIR points at the private /tmp, and so do the caches of common tools. `gc.auto=0` and `maintenance.auto=false`: the automatic
 * gc after a commit would pack refs, expire every reflog and prune worktrees, all of which are read-only here
 * (it would fail noisily, never harm); gc belongs to the main checkout.
 */
const SANDBOX_ENV: Readonly<Record<string, string>> = {
  TMPDIR: '/tmp',
  // The session HOME is read-only in here: tool caches go to the private tmp instead.
  XDG_CACHE_HOME: '/tmp/.cache',
  npm_config_cache: '/tmp/.npm',
  GIT_CONFIG_COUNT: '2',
  GIT_CONFIG_KEY_0: 'gc.auto',
  GIT_CONFIG_VALUE_0: '0',
  GIT_CONFIG_KEY_1: 'maintenance.auto',
  GIT_CONFIG_VALUE_1: 'false',
};

const REMOTE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/** The session id a confined branch belongs to, or undefined when `branch` is not `orchard/<id>/<leaf>`. */
export function branchSessionId(branch: string): string | undefined {
  if (!branch.startsWith(SESSION_BRANCH_PREFIX)) return undefined;
  const parts = branch.slice(SESSION_BRANCH_PREFIX.length).split('/');
  if (parts.length !== 2 || sessionIdProblem(parts[0]) || sessionIdProblem(parts[1])) return undefined;
  return parts[0];
}

/** The ref directories (relative to the common dir) the child may write: its branch's and its tracking refs'. */
export function writableRefDirs(layout: Pick<SandboxLayout, 'branch' | 'remotes'>): string[] {
  const id = branchSessionId(layout.branch);
  if (id === undefined) throw new Error(`writableRefDirs: ${JSON.stringify(layout.branch)} is not orchard/<id>/<leaf>`);
  const own = `${SESSION_BRANCH_PREFIX}${id}`;
  const dirs = [`refs/heads/${own}`, `logs/refs/heads/${own}`];
  for (const remote of layout.remotes ?? []) {
    dirs.push(`refs/remotes/${remote}/${own}`, `logs/refs/remotes/${remote}/${own}`);
  }
  return dirs;
}

/** In a bare repository that is a local remote: its object store and the session's own branch directory. */
function writableRemoteDirs(layout: Pick<SandboxLayout, 'branch'>, remoteGitDir: string): string[] {
  const id = branchSessionId(layout.branch);
  if (id === undefined) throw new Error(`writableRemoteDirs: ${JSON.stringify(layout.branch)} is not orchard/<id>/<leaf>`);
  return [path.join(remoteGitDir, 'objects'), path.join(remoteGitDir, 'refs', 'heads', `${SESSION_BRANCH_PREFIX}${id}`)];
}

/** Why `layout` cannot be confined, or undefined when it can. Pure: checks shape, not the disk. */
export function sandboxLayoutProblem(layout: SandboxLayout): string | undefined {
  for (const key of ['commonDir', 'worktree', 'adminDir', 'tmpDir'] as const) {
    const value = layout[key];
    if (typeof value !== 'string' || !path.isAbsolute(value) || path.normalize(value) !== value || value === '/') {
      return `${key} must be a normalised absolute path other than /, got ${JSON.stringify(value)}`;
    }
  }
  if (layout.home !== undefined && (!path.isAbsolute(layout.home) || path.normalize(layout.home) !== layout.home)) {
    return `home must be a normalised absolute path, got ${JSON.stringify(layout.home)}`;
  }
  if (path.dirname(layout.adminDir) !== path.join(layout.commonDir, 'worktrees')) {
    return `adminDir ${layout.adminDir} is not a directory directly under ${path.join(layout.commonDir, 'worktrees')}`;
  }
  if (branchSessionId(layout.branch) === undefined) {
    return (
      `branch ${JSON.stringify(layout.branch)} is not ${SESSION_BRANCH_PREFIX}<sessionId>/<leaf>: ` +
      'only a branch in a ref directory of its own can be writable alone'
    );
  }
  for (const remote of layout.remotes ?? []) {
    if (!REMOTE_NAME.test(remote) || remote.includes('..') || remote.endsWith('.lock')) {
      return `remote name ${JSON.stringify(remote)} is not supported in a sandbox (letters, digits, . _ - only)`;
    }
  }
  const inside = (p: string, dir: string) => p === dir || p.startsWith(dir + path.sep);
  // A writable directory that contains the shared repository (or is inside it, other than the allowance) would
  // make the read-only binds under it pointless.
  for (const key of ['worktree', 'tmpDir'] as const) {
    if (inside(layout.commonDir, layout[key]) || inside(layout[key], layout.commonDir)) {
      return `${key} ${layout[key]} overlaps the shared repository ${layout.commonDir}`;
    }
  }
  if (inside(layout.worktree, layout.tmpDir) || inside(layout.tmpDir, layout.worktree)) {
    return `tmpDir ${layout.tmpDir} overlaps the worktree ${layout.worktree}`;
  }
  if (layout.quarantine !== undefined) {
    const q = layout.quarantine;
    if (!path.isAbsolute(q) || path.normalize(q) !== q || q === '/')
      return `quarantine must be a normalised absolute path other than /, got ${JSON.stringify(q)}`;
    for (const key of ['commonDir', 'worktree', 'tmpDir'] as const) {
      if (inside(q, layout[key]) || inside(layout[key], q)) return `quarantine ${q} overlaps ${key} ${layout[key]}`;
    }
  }
  return undefined;
}

/**
 * Creates the writable ref directories on the host. Call before every command: `git pack-refs` (gc in the main
 * checkout) deletes a ref directory once its loose refs are packed, and bwrap can only bind what exists.
 */
export async function prepareSandboxDirs(layout: SandboxLayout): Promise<void> {
  const problem = sandboxLayoutProblem(layout);
  if (problem) throw new Error(`prepareSandboxDirs: ${problem}`);
  for (const dir of writableRefDirs(layout)) mkdirp(path.join(layout.commonDir, dir));
  for (const remote of layout.localRemotes ?? []) {
    for (const dir of writableRemoteDirs(layout, remote)) mkdirp(dir);
  }
  mkdirp(layout.tmpDir, 0o700);
  if (layout.quarantine !== undefined) mkdirp(layout.quarantine, 0o700);
}

/**
 * The argv (bwrap first) that runs `bash -c <command>` confined to `layout`, in the worktree. Mount order is
 * the policy: everything read-only, a fresh /dev and /proc, the private tmp over /tmp and /var/tmp, hidden
 * paths emptied, the shared repository (and the session HOME) shown again read-only in case they sit under
 * one of those, then the allowance writable on top. The caller provides the environment (bwrap passes it on);
 * SANDBOX_ENV is set here and wins.
 */
export function buildSandboxArgv(layout: SandboxLayout, command: string, options: SandboxOptions = {}): string[] {
  const problem = sandboxLayoutProblem(layout);
  if (problem) throw new Error(`buildSandboxArgv: ${problem}`);
  const argv = sandboxPrelude(options, layout.tmpDir, layout.hide);
  argv.push('--ro-bind', layout.commonDir, layout.commonDir);
  // A local remote under /tmp would be hidden by the private /tmp like the repository: shown again, read-only.
  for (const remote of layout.localRemotes ?? []) argv.push('--ro-bind', remote, remote);
  if (layout.home !== undefined) argv.push('--ro-bind-try', layout.home, layout.home);
  const sharedObjects = path.join(layout.commonDir, 'objects');
  const rw = [
    layout.worktree,
    layout.adminDir,
    // With a quarantine the shared store stays read-only: deleting, rewriting or repacking it fails in the kernel.
    layout.quarantine ?? sharedObjects,
    ...writableRefDirs(layout).map((dir) => path.join(layout.commonDir, dir)),
  ];
  for (const remote of layout.localRemotes ?? []) rw.push(...writableRemoteDirs(layout, remote));
  for (const dir of rw) argv.push('--bind', dir, dir);
  // Over the writable admin dir: writing, renaming or removing HEAD then fails (EROFS / EBUSY on a mount point).
  if (layout.pinHead) argv.push('--ro-bind', path.join(layout.adminDir, 'HEAD'), path.join(layout.adminDir, 'HEAD'));
  for (const [name, value] of Object.entries(SANDBOX_ENV)) argv.push('--setenv', name, value);
  if (layout.quarantine !== undefined) {
    // New objects go to the quarantine; the shared store is read as its alternate (git's receive-pack quarantine).
    // Unset, git would write to the read-only store and fail: never to anyone else's objects.
    argv.push('--setenv', 'GIT_OBJECT_DIRECTORY', layout.quarantine, '--setenv', 'GIT_ALTERNATE_OBJECT_DIRECTORIES', sharedObjects);
  }
  return sandboxCommand(argv, layout.worktree, command);
}

/**
 * A scratch tree's allowance (a team's verification, activities/team-verify.ts): the tree and its HOME writable, its
 * private tmp as /tmp; everything else read-only, `readOnly` (the repository the tree borrows objects from) shown
 * again in case it sits under a hidden path or /tmp.
 */
export interface ScratchLayout {
  readonly tree: string;
  readonly home: string;
  readonly tmpDir: string;
  readonly readOnly: readonly string[];
  readonly hide?: readonly string[];
}

/** The argv (bwrap first) that runs `bash -c <command>` in `layout.tree`, confined to the scratch allowance. */
export function buildScratchSandboxArgv(layout: ScratchLayout, command: string, options: SandboxOptions = {}): string[] {
  for (const key of ['tree', 'home', 'tmpDir'] as const) {
    const value = layout[key];
    if (!path.isAbsolute(value) || path.normalize(value) !== value || value === '/') {
      throw new Error(`buildScratchSandboxArgv: ${key} must be a normalised absolute path other than /, got ${JSON.stringify(value)}`);
    }
  }
  const argv = sandboxPrelude(options, layout.tmpDir, layout.hide);
  for (const dir of layout.readOnly) argv.push('--ro-bind', dir, dir);
  for (const dir of [layout.tree, layout.home]) argv.push('--bind', dir, dir);
  for (const [name, value] of Object.entries(SANDBOX_ENV)) argv.push('--setenv', name, value);
  return sandboxCommand(argv, layout.tree, command);
}

/**
 * What every sandbox starts with (the policy's first half): everything read-only, a fresh /dev and /proc, the
 * private tmp over /tmp and /var/tmp, hidden paths emptied. The allowance is bound on top by the caller.
 */
function sandboxPrelude(options: SandboxOptions, tmpDir: string, hide: readonly string[] | undefined): string[] {
  const argv = [options.bwrap ?? findBwrap() ?? 'bwrap'];
  argv.push(
    '--unshare-user', // a user namespace, so that...
    '--disable-userns', // ...the command cannot make another one and get CAP_SYS_ADMIN back in it
    '--cap-drop',
    'ALL', // bwrap keeps capabilities when the worker is root; then `mount -o remount,rw /` works
    '--unshare-pid', // cannot see or signal the worker; all of it dies with the namespace's pid 1...
    '--as-pid-1', // ...which is the command itself: bwrap exits only after it (and so the whole namespace) is gone
    '--unshare-ipc',
    '--die-with-parent',
    '--new-session', // no TIOCSTI into a terminal the worker might hold
    ...(options.infoFd === undefined ? [] : ['--info-fd', String(options.infoFd)]),
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev', // fresh: the host /dev/shm is not shared
    '--proc',
    '/proc',
    '--bind',
    tmpDir,
    '/tmp',
  );
  if (existsSync('/var/tmp')) argv.push('--bind', tmpDir, '/var/tmp');
  for (const hidden of hide ?? []) argv.push('--tmpfs', hidden, '--remount-ro', hidden);
  return argv;
}

/** The policy's end: the working directory and `bash -c <command>`. */
function sandboxCommand(argv: string[], cwd: string, command: string): string[] {
  // --norc: Debian's bash sources ~/.bashrc for `bash -c` when stdin is a socket and SHLVL is unset (its "run by
  // sshd" check), and Node's stdio pipes are socketpairs: observed here, at 300 ms a command. The bash tool feeds
  // /dev/null, where nothing is sourced; the sandbox makes that hold for any caller.
  argv.push('--chdir', cwd, '--', 'bash', '--norc', '--noprofile', '-c', command);
  return argv;
}

/** The bwrap binary on PATH, else /usr/bin/bwrap, else undefined. */
function findBwrap(envPath = process.env.PATH ?? ''): string | undefined {
  for (const dir of [...envPath.split(':').filter(Boolean), '/usr/bin']) {
    const candidate = path.join(dir, 'bwrap');
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/**
 * Resolves a child's layout from trusted inputs. The worktree's `.git` file is the child's to write, so it is
 * only believed when the admin dir it names points back at this worktree (`<admin>/gitdir`, which the child can
 * write only in its own admin dir) and sits directly under `<commonDir>/worktrees/`. Remotes default to those in
 * the shared config (read with `--git-dir`, never from the child's worktree).
 */
export async function resolveSandboxLayout(input: {
  commonDir: string;
  worktree: string;
  branch: string;
  tmpDir: string;
  quarantine?: string;
  home?: string;
  remotes?: readonly string[];
  hide?: readonly string[];
}): Promise<SandboxLayout> {
  const commonDir = realpath(input.commonDir);
  const worktree = realpath(input.worktree);
  const match = readText(path.join(worktree, '.git'))?.match(/^gitdir: (.+)\n?$/);
  if (!match) throw new Error(`${worktree}/.git is not a linked worktree's gitdir file`);
  const adminDir = realpath(path.resolve(worktree, match[1]));
  const back = (readText(path.join(adminDir, 'gitdir')) ?? '').trim();
  let backDir = '';
  try {
    if (back) backDir = realpath(path.dirname(path.resolve(adminDir, back)));
  } catch {
    // a gitdir that names nothing: not this worktree's
  }
  if (path.dirname(adminDir) !== path.join(commonDir, 'worktrees') || backDir !== worktree) {
    throw new Error(`${worktree} is not a linked worktree of ${commonDir} (its .git names ${adminDir})`);
  }
  const listing = await remoteListing(commonDir);
  const remotes = input.remotes ?? listing.remotes.split('\n').filter((r) => REMOTE_NAME.test(r) && !r.includes('..'));
  const localRemotes = bareLocalRemotes(listing.urls, remotes, [commonDir, worktree], input.branch);
  const layout: SandboxLayout = {
    commonDir,
    worktree,
    adminDir,
    branch: input.branch,
    tmpDir: realDir(input.tmpDir),
    quarantine: input.quarantine === undefined ? undefined : realDir(input.quarantine),
    remotes,
    localRemotes,
    home: input.home === undefined ? undefined : path.resolve(input.home),
    hide: input.hide,
  };
  const problem = sandboxLayoutProblem(layout);
  if (problem) throw new Error(problem);
  return layout;
}

/** What git says about a repository's remotes: `git remote` and the `remote.*.url` entries, as git printed them. */
interface RemoteListing {
  readonly remotes: string;
  readonly urls: string;
}

/**
 * The listings by what they depend on: the repository's config files' text and its legacy remote files' names (git
 * reads nothing else for them here: no system or global config, and a config with an include is never cached).
 * Every command of every isolated child builds its layout, and asking git costs two process starts; the config
 * rarely changes, and when it does its text does, so the answer is git's own for that text.
 */
const remoteListings = new Map<string, RemoteListing>();
const REMOTE_LISTINGS_KEPT = 256;

async function remoteListing(commonDir: string): Promise<RemoteListing> {
  // `git remote` may also name the legacy remotes/ and branches/ files.
  const texts = ['config', 'config.worktree'].map((f) => readText(path.join(commonDir, f)) ?? '');
  const legacy = ['remotes', 'branches'].map((d) => {
    try {
      return readdirSync(path.join(commonDir, d));
    } catch {
      return [] as string[];
    }
  });
  const key = [commonDir, ...texts, ...legacy.map((names) => names.sort().join('/'))].join('\0');
  const cacheable = !texts.some((t) => /\[\s*include/i.test(t));
  const known = cacheable ? remoteListings.get(key) : undefined;
  if (known) return known;
  const env = { GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' };
  const [remotes, urls] = await Promise.all([
    run('git', ['--git-dir', commonDir, 'remote'], env),
    run('git', ['--git-dir', commonDir, 'config', '--get-regexp', '^remote\\..*\\.url$'], env).catch(() => ''),
  ]);
  const listing = { remotes, urls };
  if (cacheable) {
    if (remoteListings.size >= REMOTE_LISTINGS_KEPT) remoteListings.delete(remoteListings.keys().next().value as string);
    remoteListings.set(key, listing);
  }
  return listing;
}

/**
 * The remotes among `remotes` whose URL is a bare repository on this disk (an absolute path or `file://`), as real
 * paths; never one that contains or is inside `exclude` (the shared repository, the worktree), nor one that still
 * has the session's branch from before the confined layout (`refs/heads/orchard/<id>` a file, where the session's
 * directory must be: a push there fails either way, as docs/confinement.md says).
 */
function bareLocalRemotes(listed: string, remotes: readonly string[], exclude: readonly string[], branch: string): string[] {
  if (remotes.length === 0) return [];
  const inside = (p: string, dir: string) => p === dir || p.startsWith(dir + path.sep);
  const is = (p: string, kind: 'isDirectory' | 'isFile', stat = statSync) => stat(p, { throwIfNoEntry: false })?.[kind]() ?? false;
  const found: string[] = [];
  for (const line of listed.split('\n')) {
    const match = line.match(/^remote\.(.+)\.url (.+)$/);
    if (!match || !remotes.includes(match[1])) continue;
    const url = match[2].startsWith('file://') ? match[2].slice('file://'.length) : match[2];
    if (!path.isAbsolute(url)) continue;
    let dir: string;
    try {
      dir = realpath(url);
    } catch {
      continue;
    }
    if (exclude.some((e) => inside(dir, e) || inside(e, dir))) continue;
    const bare = is(path.join(dir, 'objects'), 'isDirectory') && is(path.join(dir, 'refs'), 'isDirectory') && is(path.join(dir, 'HEAD'), 'isFile');
    const sessionDir = writableRemoteDirs({ branch }, dir)[1];
    const legacy = lstatSync(sessionDir, { throwIfNoEntry: false })?.isDirectory() === false;
    if (bare && !legacy && !found.includes(dir)) found.push(dir);
  }
  return found;
}

export type SandboxProbe = { ok: true; bwrap: string; version: string } | { ok: false; reason: string };

/**
 * Builds a tiny sandbox with buildSandboxArgv (a fake repository layout in a temp dir) and checks its effect: the
 * worktree is writable, the shared repository is not, /tmp is private, and the command holds no capability.
 * Reports ok, or exactly why not. Failing closed on `ok: false` is the caller's job.
 */
export async function sandboxAvailable(options: SandboxOptions = {}): Promise<SandboxProbe> {
  const bwrap = options.bwrap ?? findBwrap();
  if (!bwrap) return { ok: false, reason: 'bwrap not found on PATH or at /usr/bin/bwrap (Debian package: bubblewrap)' };
  let version: string;
  try {
    version = (await run(bwrap, ['--version'], {})).trim();
  } catch (err) {
    return { ok: false, reason: `${bwrap} --version failed: ${message(err)}` };
  }
  const base = await fs.mkdtemp(path.join(tmpdir(), 'orchard-sandbox-probe-'));
  try {
    const commonDir = path.join(base, 'repo', '.git');
    const layout: SandboxLayout = {
      commonDir,
      worktree: path.join(base, 'wt'),
      adminDir: path.join(commonDir, 'worktrees', 'wt'),
      branch: confinedSessionBranch('probe'),
      tmpDir: path.join(base, 'tmp'),
    };
    for (const dir of [layout.worktree, layout.adminDir, path.join(commonDir, 'objects')]) {
      await fs.mkdir(dir, { recursive: true });
    }
    await fs.writeFile(path.join(commonDir, 'config'), 'probe\n');
    await prepareSandboxDirs(layout);
    const marker = `orchard-probe-${process.pid}-${Date.now()}`;
    const script = [
      'set -u',
      'echo ok > written || { echo "the worktree is not writable" >&2; exit 10; }',
      `if (echo x > ${quote(path.join(commonDir, 'config'))}) 2>/dev/null; then`,
      '  echo "the shared repository is writable" >&2; exit 11',
      'fi',
      `echo x > /tmp/${marker} || { echo "/tmp is not writable" >&2; exit 12; }`,
      'grep -q "^CapEff:[[:space:]]*0*$" /proc/self/status || { echo "the command holds capabilities" >&2; exit 13; }',
    ].join('\n');
    const argv = buildSandboxArgv(layout, script, { bwrap });
    // Killed or past its time, it rejects: a probe that did not end with an exit code did not confine either.
    const result = await runFile(argv[0], argv.slice(1), { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, timeoutMs: 10_000 }).catch(
      (err: FileRunError) => err,
    );
    if (result instanceof Error || result.code !== 0) {
      const detail = result.stderr.trim() || (result instanceof Error ? result.message : `exit ${result.code}`);
      return { ok: false, reason: `${bwrap} could not confine a command: ${detail}${hint(result.stderr)}` };
    }
    if ((await fs.readFile(path.join(layout.worktree, 'written'), 'utf8').catch(() => '')) !== 'ok\n') {
      return { ok: false, reason: 'the sandboxed write to the worktree did not reach the host' };
    }
    if ((await fs.readFile(path.join(commonDir, 'config'), 'utf8')) !== 'probe\n') {
      return { ok: false, reason: 'the shared repository was changed from inside the sandbox' };
    }
    if (existsSync(path.join('/tmp', marker)) || !existsSync(path.join(layout.tmpDir, marker))) {
      return { ok: false, reason: '/tmp inside the sandbox is not the private temp dir' };
    }
    return { ok: true, bwrap, version };
  } catch (err) {
    return { ok: false, reason: `sandbox probe failed: ${message(err)}` };
  } finally {
    await fs.rm(base, { recursive: true, force: true }).catch(() => undefined);
  }
}

function hint(stderr: string): string {
  if (/namespace|uid_map|Operation not permitted|Permission denied/i.test(stderr)) {
    return (
      ' (user namespaces look unavailable: check sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces, ' +
      "AppArmor's kernel.apparmor_restrict_unprivileged_userns, " +
      'or a container seccomp profile that blocks clone/unshare)'
    );
  }
  return '';
}

export interface BranchMigration {
  from: string;
  to: string;
  /** false when there was nothing to do (already migrated, or no such session branch). */
  migrated: boolean;
}

/**
 * Moves a session from `orchard/<id>` (a plain ref file, which cannot be writable alone) to
 * `orchard/<id>/work` in `repo`: `git branch -m` keeps the commits and the reflog, rewrites the HEAD of the
 * worktree that has it checked out and its `branch.<name>.*` config; then the isolation marker of that worktree
 * (docs/backstop.md) and the session's remote-tracking refs follow. Idempotent. Run it while no command of the
 * session runs. Remote branches are left as they are: a remote that has `orchard/<id>` refuses a push of
 * `orchard/<id>/work` until that old branch is deleted there.
 */
export async function migrateSessionBranch(repo: string, sessionId: string): Promise<BranchMigration> {
  const problem = sessionIdProblem(sessionId);
  if (problem) throw new Error(`migrateSessionBranch: ${problem}`);
  const from = legacySessionBranch(sessionId);
  const to = confinedSessionBranch(sessionId);
  const env = { GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' };
  const g = (args: string[]) => run('git', ['-C', repo, ...args], env);
  const exists = async (ref: string) =>
    g(['rev-parse', '--verify', '--quiet', ref]).then(
      () => true,
      () => false,
    );
  if (await exists(`refs/heads/${to}`)) return { from, to, migrated: false };
  if (!(await exists(`refs/heads/${from}`))) return { from, to, migrated: false };
  await g(['branch', '-m', from, to]);
  for (const line of (await g(['worktree', 'list', '--porcelain'])).split('\n\n')) {
    const wt = line.match(/^worktree (.+)$/m)?.[1];
    if (!wt || !line.includes(`\nbranch refs/heads/${to}`)) continue;
    if ((await isolatedBranch(wt).catch(() => undefined)) === from) await markWorktreeIsolated(wt, to);
  }
  // A tracking ref `refs/remotes/<r>/orchard/<id>` would block `…/orchard/<id>/work` (a file where a directory
  // must be): delete, then create, with the value read first.
  const tracking = await g(['for-each-ref', '--format=%(refname) %(objectname)', `refs/remotes/*/${from}`]);
  for (const row of tracking.split('\n').filter(Boolean)) {
    const [ref, sha] = row.split(' ');
    const remote = ref.slice('refs/remotes/'.length, ref.length - from.length - 1);
    if (remote.includes('/')) continue;
    await g(['update-ref', '-d', ref, sha]);
    await g(['update-ref', '-m', `orchard: migrated from ${ref}`, `refs/remotes/${remote}/${to}`, sha, '']);
  }
  return { from, to, migrated: true };
}

function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function message(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).trim();
}

function run(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return runFileText(file, args, { env: { PATH: process.env.PATH, ...env }, timeoutMs: 30_000 }).catch((err: FileRunError) => {
    throw new Error(`${file} ${args.join(' ')}: ${err.stderr.trim() || err.message}`);
  });
}
