import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ISOLATION_MARKER } from '../git/backstop';
import { WorkspaceError } from '../workspace/paths';
import { branchSessionId } from './sandbox';

/**
 * Layer 3 of confinement (docs/confinement.md): a snapshot of what an isolated child must not change, taken before
 * and after each of its commands, and the exact difference. The sandbox (layer 2) should make every difference
 * impossible; this notices when it did not (a gap in the mounts, an unconfined worker) and says what to repair.
 *
 * Files are read with synchronous fs calls on purpose: this runs around every command, and on a repository with
 * 2,000 loose refs one `readFileSync` per ref measured 6-10x faster than `fs.promises` (whose every call is a
 * thread-pool round trip). A snapshot blocks the event loop for that long (bench/verify.ts prints it).
 *
 * Limits: another actor's change during the command (a sibling session's commit, a `git fetch` or `gc` in the main
 * checkout) is reported like the child's, since the files cannot say who wrote them. `*.lock` files in ref
 * directories are skipped (git's own transient locks). A `core.hooksPath` that is relative or comes from an `include` is not followed (the
 * config files that set it are covered). Files over 1 MiB are compared by size, mtime and inode, not content.
 */

export interface VerifyLayout {
  /** The shared repository's common dir, absolute and normalised (as resolveSandboxLayout gives it). */
  commonDir: string;
  /** The child's admin dir, `<commonDir>/worktrees/<name>`. */
  adminDir: string;
  /** The child's worktree. */
  worktree: string;
  /** The child's branch, `orchard/<sessionId>/<leaf>`: every ref under `refs/heads/orchard/<sessionId>/` is its own. */
  branch: string;
  /** Remotes whose `refs/remotes/<remote>/orchard/<sessionId>/` refs are the child's own (as in the sandbox). */
  remotes?: readonly string[];
}

type ProtectedKind = ProtectedChange['kind'];

/**
 * One protected thing's state: an object id bare (most refs, so the snapshot stays small), else `<type>:<payload>`:
 * `symref:<target>`, `text:<content>` (small text files), `file:<mode> <size> <sha256>` (hooks, larger files),
 * `large:<mode> <size> <mtime> <ino>`, `dir:`, `symlink:<target>`, `other:<file type>`, `malformed:<what>`,
 * `unreadable:<errno code>`. The type prefix keeps a text file from ever equalling the description of a directory or
 * a hash, and no typed state is bare hex.
 */
type EntryState = string;

/**
 * `own-value`: the child may change the value but the thing must stay (its HEAD, on its branch or detached: a
 * deleted HEAD breaks the worktree and lets `git worktree prune` remove it).
 */
type SnapshotEntry = readonly [kind: ProtectedKind, state: EntryState, own?: 'own-value'];

export interface ProtectedSnapshot {
  /** The layout it was taken of (it decides which refs are the child's): snapshots of different layouts are not compared. */
  layout: { commonDir: string; adminDir: string; worktree: string; branch: string; remotes: string[] };
  /**
   * Every ref by name, the child's own included (whether a ref is its own is decided when comparing): loose and
   * packed ones of the common dir (`refs/…`, loose winning), siblings' per-worktree ones (`worktrees/<name>/refs/…`).
   */
  refs: Record<string, EntryState>;
  /** Every other protected thing by absolute path. */
  files: Record<string, SnapshotEntry>;
}

export interface ProtectedChange {
  /** `history`: the child's own branch moved off its own history (own-history.ts); the rest: a file or ref changed. */
  kind: 'ref' | 'history' | 'head' | 'config' | 'hooks' | 'info' | 'stash' | 'worktrees' | 'repository';
  /** The ref name, or the absolute path of the file. */
  path: string;
  change: 'created' | 'deleted' | 'modified';
  /** The state before, rendered for reading (an object id, `ref: <target>`, a file's text…); absent when created. */
  before?: string;
  /** The state after; absent when deleted. */
  after?: string;
}

const KIND_ORDER: readonly ProtectedKind[] = ['ref', 'history', 'head', 'stash', 'config', 'hooks', 'info', 'worktrees', 'repository'];
/** Text files up to this size are kept verbatim, so a report can show the old content next to the new. */
const TEXT_LIMIT = 16 * 1024;
/** Larger files are hashed; beyond this, identified by size, mtime and inode (reading a planted 1 GB file per command would be the attack). */
const HASH_LIMIT = 1024 * 1024;
/** A hooks directory named by core.hooksPath may be anything (`/usr/bin`): its walk stops here, saying so. */
const HOOK_ENTRY_LIMIT = 1000;
const OID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;

/** Why `layout` cannot be verified, or undefined. Pure: checks shape, not the disk. */
function verifyLayoutProblem(layout: VerifyLayout): string | undefined {
  for (const key of ['commonDir', 'adminDir', 'worktree'] as const) {
    const value = layout?.[key];
    if (typeof value !== 'string' || !path.isAbsolute(value) || path.normalize(value) !== value || value === '/') {
      return `${key} must be a normalised absolute path other than /, got ${JSON.stringify(value)}`;
    }
  }
  if (path.dirname(layout.adminDir) !== path.join(layout.commonDir, 'worktrees')) {
    return `adminDir ${layout.adminDir} is not a directory directly under ${path.join(layout.commonDir, 'worktrees')}`;
  }
  if (typeof layout.branch !== 'string' || branchSessionId(layout.branch) === undefined) {
    return `branch ${JSON.stringify(layout.branch)} is not orchard/<sessionId>/<leaf>`;
  }
  for (const remote of layout.remotes ?? []) {
    if (typeof remote !== 'string' || remote === '' || remote.includes('/') || remote === '.' || remote === '..') {
      return `remote name ${JSON.stringify(remote)} is not a single ref path component`;
    }
  }
  return undefined;
}

/** The rebase-in-progress state dirs git keeps in a worktree's admin dir (merge backend, apply backend). */
export const REBASE_STATE_DIRS = ['rebase-merge', 'rebase-apply'] as const;

/** Whether a rebase of `branch` is in progress in the worktree of `adminDir` (its state names the branch). */
export function ownRebaseInProgress(adminDir: string, branch: string): boolean {
  return REBASE_STATE_DIRS.some((dir) => {
    try {
      return fs.readFileSync(path.join(adminDir, dir, 'head-name'), 'utf8').trim() === `refs/heads/${branch}`;
    } catch {
      return false;
    }
  });
}

/** Reads every protected thing of `layout` (see the module comment). Throws `invalid_input` for a bad layout. */
export async function snapshotProtected(layout: VerifyLayout): Promise<ProtectedSnapshot> {
  const problem = verifyLayoutProblem(layout);
  if (problem) throw new WorkspaceError('invalid_input', `snapshotProtected: ${problem}`);
  const { commonDir, adminDir, worktree, branch } = layout;
  const files: Record<string, SnapshotEntry> = {};
  const put = (key: string, kind: ProtectedKind, state: EntryState | undefined) => {
    if (state !== undefined) files[key] = [kind, state];
  };
  const at = (...parts: string[]) => path.join(commonDir, ...parts);

  // Refs: packed first, loose ones override them (git's own precedence), so packing changes no value.
  const refs: Record<string, EntryState> = {};
  put(at('packed-refs'), 'repository', readPackedRefs(at('packed-refs'), refs));
  readLooseRefs(commonDir, 'refs', refs, '');
  put(at('logs', 'refs', 'stash'), 'stash', fileState(at('logs', 'refs', 'stash'), 'text'));

  put(at('HEAD'), 'head', fileState(at('HEAD'), 'ref'));
  put(at('config'), 'config', fileState(at('config'), 'text'));
  put(at('config.worktree'), 'config', fileState(at('config.worktree'), 'text'));

  // Worktrees: each admin dir, the files that tie it to its checkout, its HEAD, its config and per-worktree refs.
  const worktrees = at('worktrees');
  const admins = entriesOf(worktrees);
  if (!Array.isArray(admins)) put(worktrees, 'worktrees', admins);
  for (const d of Array.isArray(admins) ? admins : []) {
    const dir = path.join(worktrees, d.name);
    const state = d.isDirectory() ? 'dir:' : fileState(dir, 'text');
    put(dir, 'worktrees', state);
    if (state !== 'dir:') continue;
    // The isolation marker sits in the child's writable admin dir: without it the ref backstop lets every ref through.
    for (const file of ['gitdir', 'commondir', 'locked', ISOLATION_MARKER]) {
      put(path.join(dir, file), 'worktrees', fileState(path.join(dir, file), 'text'));
    }
    put(path.join(dir, 'config.worktree'), 'config', fileState(path.join(dir, 'config.worktree'), 'text'));
    const head = fileState(path.join(dir, 'HEAD'), 'ref');
    if (dir === adminDir) {
      // Its HEAD names its branch, or a commit while a rebase of that branch is in progress; anything else is a change.
      const fine = head !== undefined && (head === `symref:refs/heads/${branch}` || (OID.test(head) && ownRebaseInProgress(adminDir, branch)));
      if (head !== undefined) files[path.join(dir, 'HEAD')] = fine ? ['head', head, 'own-value'] : ['head', head];
      continue; // its per-worktree refs (bisect) are its own
    }
    put(path.join(dir, 'HEAD'), 'head', head);
    readLooseRefs(dir, 'refs', refs, `worktrees/${d.name}/`);
  }
  put(path.join(worktree, '.git'), 'worktrees', fileState(path.join(worktree, '.git'), 'text'));

  // Hooks: the default directory and, when the shared config points elsewhere, that one too.
  const hookDirs = [at('hooks')];
  const hooksPath = configValue(configText(at('config'), files[at('config')]?.[1]), 'core', 'hookspath');
  if (hooksPath !== undefined && path.isAbsolute(hooksPath) && path.normalize(hooksPath) !== hookDirs[0]) {
    hookDirs.push(path.normalize(hooksPath));
  }
  for (const dir of hookDirs) {
    const budget = { left: HOOK_ENTRY_LIMIT };
    const rootState = fileState(dir, 'hash');
    walkFiles(dir, 'hooks', 'hash', budget, put);
    put(dir, 'hooks', rootState === 'dir:' && budget.left < 0 ? `dir:more than ${HOOK_ENTRY_LIMIT} entries, not all compared` : rootState);
  }
  walkFiles(at('info'), 'info', 'text', { left: Infinity }, put);
  for (const file of [at('objects', 'info', 'alternates'), at('objects', 'info', 'http-alternates'), at('shallow'), at('commondir')]) {
    put(file, 'repository', fileState(file, 'text'));
  }
  // objects/ is writable by the child: an objects/info replaced by a link would redirect the alternates read above.
  const objectsInfo = fileState(at('objects', 'info'), 'text');
  if (objectsInfo !== 'dir:') put(at('objects', 'info'), 'repository', objectsInfo);
  return { layout: { commonDir, adminDir, worktree, branch, remotes: [...(layout.remotes ?? [])] }, refs, files };
}

/** Changes from `before` to `after`, ordered by kind then path; `[]` when nothing protected changed. */
export function compareSnapshots(before: ProtectedSnapshot, after: ProtectedSnapshot): ProtectedChange[] {
  for (const [name, snapshot] of [
    ['before', before],
    ['after', after],
  ] as const) {
    const objects = [snapshot?.layout, snapshot?.refs, snapshot?.files];
    if (objects.some((o) => typeof o !== 'object' || o === null) || !Array.isArray(snapshot.layout.remotes)) {
      throw new WorkspaceError('invalid_input', `compareSnapshots: ${name} is not a ProtectedSnapshot`);
    }
  }
  for (const key of ['commonDir', 'adminDir', 'worktree', 'branch', 'remotes'] as const) {
    const [was, now] = [JSON.stringify(before.layout[key]), JSON.stringify(after.layout[key])];
    if (was !== now) {
      throw new WorkspaceError('invalid_input', `compareSnapshots: the snapshots are of different layouts (${key} ${was} vs ${now})`);
    }
  }
  const changes: ProtectedChange[] = [];
  const report = (kind: ProtectedKind, key: string, was: EntryState | undefined, now: EntryState | undefined) => {
    const change: ProtectedChange = { kind, path: key, change: was === undefined ? 'created' : now === undefined ? 'deleted' : 'modified' };
    if (was !== undefined) change.before = renderState(was);
    if (now !== undefined) change.after = renderState(now);
    changes.push(change);
  };

  // The child's own refs may hold any object id, or point at one another, and come and go; a symbolic ref out of them may not.
  const id = branchSessionId(before.layout.branch);
  const prefixes = [`refs/heads/orchard/${id}/`, ...before.layout.remotes.map((r) => `refs/remotes/${r}/orchard/${id}/`)];
  const own = (name: string, state: EntryState | undefined) =>
    state === undefined || (prefixes.some((p) => name.startsWith(p)) && (OID.test(state) || prefixes.some((p) => state.startsWith(`symref:${p}`))));
  const ref = (s: ProtectedSnapshot, key: string) => (Object.hasOwn(s.refs, key) ? s.refs[key] : undefined);
  for (const key of new Set([...Object.keys(before.refs), ...Object.keys(after.refs)])) {
    const [was, now] = [ref(before, key), ref(after, key)];
    if (was === now || (own(key, was) && own(key, now))) continue;
    report(key === 'refs/stash' ? 'stash' : 'ref', key, was, now);
  }

  const file = (s: ProtectedSnapshot, key: string) => (Object.hasOwn(s.files, key) ? s.files[key] : undefined);
  for (const key of new Set([...Object.keys(before.files), ...Object.keys(after.files)])) {
    const [was, now] = [file(before, key), file(after, key)];
    if (was?.[2] === 'own-value' && now?.[2] === 'own-value') continue; // the child's HEAD, still its own
    if (was !== undefined && now !== undefined && was[0] === now[0] && was[1] === now[1]) continue;
    report((now ?? was)![0], key, was?.[1], now?.[1]);
  }
  const rank = (c: ProtectedChange) => KIND_ORDER.indexOf(c.kind);
  return changes.sort((x, y) => rank(x) - rank(y) || (x.path < y.path ? -1 : x.path > y.path ? 1 : 0));
}

/**
 * One line per change, `<kind> <path>: <change>: <old> → <new>` (`(absent)` for a side that does not exist). A
 * multi-line value (a config, an exclude file) gets a header line ending in `:` and then only the lines it lost
 * (`  - `) and gained (`  + `); config lines carry their `[section]`.
 */
export function describeChanges(changes: readonly ProtectedChange[]): string {
  const out: string[] = [];
  for (const c of changes) {
    const was = c.before === undefined ? undefined : linesOf(c.before);
    const now = c.after === undefined ? undefined : linesOf(c.after);
    const head = `${c.kind} ${quoted(c.path)}: ${c.change}:`;
    if ((was?.length ?? 1) <= 1 && (now?.length ?? 1) <= 1) {
      const side = (lines: string[] | undefined) => (lines === undefined ? '(absent)' : quoted(lines[0] ?? ''));
      out.push(`${head} ${side(was)} → ${side(now)}`);
      continue;
    }
    out.push(head);
    const qualify = c.kind === 'config' ? withSections : (lines: string[]) => lines;
    const [lost, gained] = lineDifference(qualify(was ?? []), qualify(now ?? []));
    for (const line of lost) out.push(`  - ${quoted(line)}`);
    for (const line of gained) out.push(`  + ${quoted(line)}`);
    if (lost.length === 0 && gained.length === 0) out.push('  (the same lines, reordered or re-spaced)');
  }
  return out.join('\n');
}

/** A value as readers see it (the state's type prefix decides the wording). */
function renderState(state: EntryState): string {
  const colon = state.indexOf(':');
  if (colon < 0) return state; // an object id
  const type = state.slice(0, colon);
  const rest = state.slice(colon + 1);
  switch (type) {
    case 'text':
      return rest;
    case 'symref':
      return `ref: ${rest}`;
    case 'file': {
      const [mode, size, hash] = rest.split(' ');
      return `file mode ${mode}, ${size} bytes, sha256 ${hash.slice(0, 16)}`;
    }
    case 'large': {
      const [mode, size, mtime, ino] = rest.split(' ');
      return `file mode ${mode}, ${size} bytes (not hashed), mtime ${mtime}, inode ${ino}`;
    }
    case 'dir':
      return rest ? `directory (${rest})` : 'directory';
    case 'symlink':
      return `symlink to ${rest}`;
    case 'unreadable':
      return `unreadable (${rest})`;
    default:
      return `${type}: ${rest}`;
  }
}

function linesOf(value: string): string[] {
  const lines = value.split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** A value or path as one unambiguous token: JSON-quoted when empty, padded, or holding control characters or an arrow. */
function quoted(text: string): string {
  return text === '' || /^\s|\s$|[\u0000-\u001f\u007f]|→|^\(|^"/.test(text) ? JSON.stringify(text) : text;
}

/** Lines of `a` missing from `b` and lines of `b` missing from `a`, counting repeats (order is not compared). */
function lineDifference(a: readonly string[], b: readonly string[]): [string[], string[]] {
  const counts = new Map<string, number>();
  for (const line of b) counts.set(line, (counts.get(line) ?? 0) + 1);
  const lost: string[] = [];
  for (const line of a) {
    const n = counts.get(line) ?? 0;
    if (n > 0) counts.set(line, n - 1);
    else lost.push(line);
  }
  const back = new Map<string, number>();
  for (const line of a) back.set(line, (back.get(line) ?? 0) + 1);
  const gained: string[] = [];
  for (const line of b) {
    const n = back.get(line) ?? 0;
    if (n > 0) back.set(line, n - 1);
    else gained.push(line);
  }
  return [lost, gained];
}

/** Config lines prefixed with the section they sit in (`[core] hooksPath = /x`), so a lone key line says where it is. */
function withSections(lines: readonly string[]): string[] {
  let section = '';
  return lines.map((line) => {
    const header = line.match(/^\s*(\[[^\]]*\])/);
    if (header) {
      section = header[1];
      return line.trim();
    }
    return section ? `${section} ${line.trim()}` : line.trim();
  });
}

/**
 * What a regular file's last read said, by how and path, beside the identity that read saw (the descriptor's fstat):
 * a later snapshot takes it without opening the file when lstat shows the same identity and the file had settled
 * before that read began (its ctime SETTLED_MS older). Every write to a file sets its ctime from the kernel's clock,
 * which no unprivileged process can set (touch sets mtime, never ctime); so for a settled file an unchanged ctime,
 * with device, inode, mode, size and mtime, means unchanged content. A file changed shortly before a read is read
 * again every time: a write in the same clock tick as that change could leave its ctime as it was (git's "racy"
 * index entries, the same rule). With a hundred worktrees on one repository a snapshot reads several hundred files,
 * nearly all of them other sessions' and unchanged: one lstat each instead of open, fstat, read and close.
 */
const settledReads = new Map<string, { identity: string; state: EntryState }>();
/** Far beyond the kernel's coarse clock tick and the lag between it and Date.now(). */
const SETTLED_MS = 1000;
/** The kept reads' keys and states together (small text files are kept verbatim): past this, all are forgotten. */
const SETTLED_READS_MAX_CHARS = 32 * 1024 * 1024;
let settledChars = 0;

let openedFiles = 0;
/** How many files snapshots have opened in this process (tests: a kept read opens none). */
export function protectedFilesOpened(): number {
  return openedFiles;
}

const identityOf = (stat: fs.Stats): string => `${stat.dev}:${stat.ino}:${stat.mode}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;

/** A kept read still true of `file` (lstat alone); `absent` when nothing is there; undefined when it must be read. */
function keptState(file: string, how: 'ref' | 'text' | 'hash'): EntryState | 'absent' | undefined {
  let stat: fs.Stats | undefined;
  try {
    stat = fs.lstatSync(file, { throwIfNoEntry: false });
  } catch {
    return undefined; // ENOTDIR, EACCES…: the open says what it is
  }
  if (stat === undefined) return 'absent';
  const kept = settledReads.get(`${how}:${file}`);
  return kept && stat.isFile() && kept.identity === identityOf(stat) ? kept.state : undefined;
}

/** Keeps a regular file's read for the next snapshots when the file had settled before the read began. */
function keepRead(file: string, how: 'ref' | 'text' | 'hash', stat: fs.Stats, readBegan: number, state: EntryState): void {
  if (!(stat.ctimeMs < readBegan - SETTLED_MS)) return;
  const key = `${how}:${file}`;
  const kept = { identity: identityOf(stat), state };
  const size = (entry: { identity: string; state: string } | undefined) => (entry ? key.length + entry.identity.length + entry.state.length : 0);
  settledChars += size(kept) - size(settledReads.get(key));
  if (settledChars > SETTLED_READS_MAX_CHARS) {
    settledReads.clear();
    settledChars = size(kept);
  }
  settledReads.set(key, kept);
}

/** The state of one path, never following a symlink at its end; undefined when it does not exist. */
function fileState(file: string, how: 'ref' | 'text' | 'hash'): EntryState | undefined {
  const kept = keptState(file, how);
  if (kept === 'absent') return undefined;
  if (kept !== undefined) return kept;
  const readBegan = Date.now();
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    if (code(err) === 'ELOOP') return linkState(file);
    return absentOr(err);
  }
  openedFiles++;
  try {
    const stat = fs.fstatSync(fd);
    if (stat.isDirectory()) return 'dir:';
    if (!stat.isFile()) return `other:${fileType(stat)}`;
    const state = regularState(fd, stat, how);
    keepRead(file, how, stat, readBegan, state);
    return state;
  } catch (err) {
    return absentOr(err) ?? 'unreadable:ENOENT';
  } finally {
    fs.closeSync(fd);
  }
}

const buffer = Buffer.alloc(TEXT_LIMIT + 1);
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** A loose ref the directory listing says is a regular file: read at most TEXT_LIMIT bytes (or taken as kept). */
function refFileState(file: string): EntryState {
  const kept = keptState(file, 'ref');
  if (kept === 'absent') return 'unreadable:ENOENT'; // removed since the listing, as the open below would say
  if (kept !== undefined) return kept;
  const readBegan = Date.now();
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch {
    return fileState(file, 'ref') ?? 'unreadable:ENOENT'; // replaced since the listing: describe what is there now
  }
  openedFiles++;
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) return fileState(file, 'ref') ?? 'unreadable:ENOENT';
    const n = fs.readSync(fd, buffer, 0, buffer.length, 0);
    const text = n <= TEXT_LIMIT ? decode(buffer.subarray(0, n)) : undefined;
    const state = text !== undefined ? refState(text) : regularState(fd, stat, 'hash');
    keepRead(file, 'ref', stat, readBegan, state);
    return state;
  } catch (err) {
    return `unreadable:${code(err) ?? 'error'}`;
  } finally {
    fs.closeSync(fd);
  }
}

function regularState(fd: number, stat: fs.Stats, how: 'ref' | 'text' | 'hash'): EntryState {
  const mode = (stat.mode & 0o7777).toString(8);
  if (how !== 'hash' && stat.size <= TEXT_LIMIT) {
    const n = fs.readSync(fd, buffer, 0, buffer.length, 0);
    const text = n <= TEXT_LIMIT ? decode(buffer.subarray(0, n)) : undefined;
    if (text !== undefined) return how === 'ref' ? refState(text) : `text:${text}`;
  }
  if (stat.size > HASH_LIMIT) return `large:${mode} ${stat.size} ${stat.mtimeMs} ${stat.ino}`;
  const content = fs.readFileSync(fd);
  return `file:${mode} ${content.length} ${createHash('sha256').update(content).digest('hex')}`;
}

/** What git reads in a loose ref or HEAD: an object id or `ref: <target>`; anything else is kept as malformed. */
function refState(text: string): EntryState {
  const value = text.endsWith('\n') ? text.slice(0, -1) : text;
  if (OID.test(value)) return value;
  if (value.startsWith('ref: ')) return `symref:${value.slice('ref: '.length)}`;
  return `malformed:${JSON.stringify(value.slice(0, 200))}`;
}

function decode(bytes: Uint8Array): string | undefined {
  if (bytes.includes(0)) return undefined;
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

function linkState(file: string): EntryState {
  try {
    return `symlink:${fs.readlinkSync(file)}`;
  } catch (err) {
    return absentOr(err) ?? 'unreadable:ENOENT';
  }
}

function code(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException)?.code;
}

/** undefined when the error means "not there"; otherwise the typed marker that it could not be read. */
function absentOr(err: unknown): EntryState | undefined {
  const c = code(err);
  return c === 'ENOENT' || c === 'ENOTDIR' ? undefined : `unreadable:${c ?? 'error'}`;
}

function fileType(stat: fs.Stats): string {
  if (stat.isFIFO()) return 'fifo';
  if (stat.isSocket()) return 'socket';
  if (stat.isCharacterDevice()) return 'character device';
  if (stat.isBlockDevice()) return 'block device';
  return 'unknown';
}

/** The entries of `dir`, or the state to record instead when it is not a directory (undefined: absent). */
function entriesOf(dir: string): fs.Dirent[] | EntryState | undefined {
  const state = fileState(dir, 'text');
  if (state !== 'dir:') return state;
  try {
    return fs.readdirSync(dir, { withFileTypes: true });
  } catch (err) {
    return absentOr(err);
  }
}

/** Loose refs under `<base>/<rel>` into `into`, keyed `<keyPrefix><ref name>`; git's `*.lock` files are skipped. */
function readLooseRefs(base: string, rel: string, into: Record<string, EntryState>, keyPrefix: string): void {
  const list = entriesOf(path.join(base, rel));
  if (!Array.isArray(list)) {
    if (list !== undefined) into[keyPrefix + rel] = list;
    return;
  }
  for (const d of list) {
    if (d.name.endsWith('.lock')) continue;
    const name = `${rel}/${d.name}`;
    const file = path.join(base, name);
    if (d.isDirectory()) readLooseRefs(base, name, into, keyPrefix);
    else into[keyPrefix + name] = d.isFile() ? refFileState(file) : (fileState(file, 'ref') ?? 'unreadable:ENOENT');
  }
}

/**
 * Entries of `packed-refs` into `into` (peeled `^` lines and the header skipped). Returns a state for the file
 * itself only when it is not a plain readable file, or has lines git could not read.
 */
function readPackedRefs(file: string, into: Record<string, EntryState>): EntryState | undefined {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    return code(err) === 'ELOOP' ? linkState(file) : absentOr(err);
  }
  let text: string;
  try {
    const stat = fs.fstatSync(fd);
    if (stat.isDirectory()) return 'dir:';
    if (!stat.isFile()) return `other:${fileType(stat)}`;
    text = fs.readFileSync(fd, 'utf8');
  } catch (err) {
    return absentOr(err) ?? 'unreadable:ENOENT';
  } finally {
    fs.closeSync(fd);
  }
  let bad = 0;
  let first = '';
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#') || line.startsWith('^')) continue;
    const space = line.indexOf(' ');
    const oid = line.slice(0, space);
    if (space > 0 && OID.test(oid) && line.length > space + 1) into[line.slice(space + 1)] = oid;
    else if (bad++ === 0) first = line;
  }
  return bad === 0 ? undefined : `malformed:${bad} line(s) git cannot read, the first ${JSON.stringify(first.slice(0, 200))}`;
}

/** Files under `dir` (recursively, links not followed) as `kind`, until `budget` runs out. */
function walkFiles(
  dir: string,
  kind: ProtectedKind,
  how: 'text' | 'hash',
  budget: { left: number },
  put: (key: string, kind: ProtectedKind, state: EntryState | undefined) => void,
): void {
  const list = entriesOf(dir);
  if (!Array.isArray(list)) {
    if (list !== 'dir:') put(dir, kind, list);
    return;
  }
  for (const d of list) {
    if (--budget.left < 0) return;
    const file = path.join(dir, d.name);
    if (d.isDirectory()) {
      put(file, kind, 'dir:');
      walkFiles(file, kind, how, budget, put);
    } else {
      put(file, kind, fileState(file, how));
    }
  }
}

/** The text of a config file: from its state when kept verbatim, else read again (a config over TEXT_LIMIT). */
function configText(file: string, state: EntryState | undefined): string | undefined {
  if (state?.startsWith('text:')) return state.slice('text:'.length);
  if (!state?.startsWith('file:')) return undefined;
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The last value of `<section>.<key>` in a config file's text (names compared case-insensitively), or undefined.
 * Enough for `core.hooksPath`: `[section]` headers, `key = value` lines, quotes, escapes and comments; includes
 * are not followed.
 */
function configValue(text: string | undefined, section: string, key: string): string | undefined {
  if (text === undefined) return undefined;
  let current = '';
  let value: string | undefined;
  for (const raw of text.split('\n')) {
    let line = raw.trim();
    const header = line.match(/^\[\s*([A-Za-z0-9.-]+)(?:\s+"(?:[^"\\]|\\.)*")?\s*\]/);
    if (header) {
      current = header[1].toLowerCase();
      line = line.slice(header[0].length).trim();
    }
    if (current !== section.toLowerCase()) continue;
    const kv = line.match(/^([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$/);
    if (kv && kv[1].toLowerCase() === key.toLowerCase()) value = kv[2] === undefined ? 'true' : configScalar(kv[2]);
  }
  return value;
}

function configScalar(raw: string): string {
  let out = '';
  let quoted = false;
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i];
    if (ch === '\\' && i + 1 < raw.length) {
      const next = raw[++i];
      out += next === 'n' ? '\n' : next === 't' ? '\t' : next === 'b' ? '\b' : next;
    } else if (ch === '"') quoted = !quoted;
    else if (!quoted && (ch === '#' || ch === ';')) break;
    else out += ch;
  }
  return quoted ? out : out.trimEnd();
}
