import { closeSync, openSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnerPid } from './spawner';

/**
 * Linux /proc helpers to tear a command down and prove that nothing of it is alive (ARCHITECTURE, "Proving
 * no process alive"). A command runs as its own process group; we signal the group and also every process
 * we have seen descend from it, because `setsid` (or `setpgid`) moves a process out of the group.
 *
 * Limit: descendants are found through ppid ancestry, so a process that detaches (double fork + setsid) and
 * is re-parented to init between two snapshots is invisible to the tree. The runner therefore also marks each
 * command (a tag fd, its stdout/stderr channels, a marker environment variable) and at teardown kills every
 * process carrying a mark. A detached process that closes all inherited fds AND replaces its environment
 * (`setsid env -i sh -c 'exec 3<&- …' >/dev/null 2>&1 &`, finishing within one snapshot interval) still
 * escapes. A cgroup per command is the real fix and needs privileges this worker does not assume.
 */

export interface ProcessInfo {
  pid: number;
  ppid: number;
  pgid: number;
  sid: number;
  /** R, S, D, T, t, Z, X, … as in /proc/<pid>/stat. */
  state: string;
  /** Clock ticks after boot: with pid, identifies a process across pid reuse. */
  startTime: number;
  comm: string;
}

/** A process recorded as part of a command's tree; `startTime` guards against signalling a reused pid. */
interface TrackedProcess {
  pid: number;
  startTime: number;
  pgid: number;
  sid: number;
}

/** pid → the process we saw with that pid. */
export type TrackedProcesses = Map<number, TrackedProcess>;

/** Parses /proc/<pid>/stat. comm may contain spaces and parentheses, so split at the last ')'. */
export function parseStat(text: string): ProcessInfo | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const pid = Number(text.slice(0, open).trim());
  const rest = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  // rest[0] is field 3 (state); starttime is field 22.
  if (rest.length < 20) return undefined;
  const info: ProcessInfo = {
    pid,
    comm: text.slice(open + 1, close),
    state: rest[0],
    ppid: Number(rest[1]),
    pgid: Number(rest[2]),
    sid: Number(rest[3]),
    startTime: Number(rest[19]),
  };
  return Number.isInteger(info.pid) && Number.isInteger(info.ppid) && Number.isInteger(info.pgid) ? info : undefined;
}

/** Zombies (Z) and dead tasks (X) have no code left to run: they count as gone. */
export function isLive(p: ProcessInfo): boolean {
  return p.state !== 'Z' && p.state !== 'X' && p.state !== 'x';
}

/** One process, or undefined when it is gone (or hidden from us). Synchronous: a /proc read never waits on disk. */
export function readProcessSync(pid: number): ProcessInfo | undefined {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined; // exited between readdir and read, or not ours to see
  }
}

let cachedBootId: string | undefined;
/**
 * This boot of the machine (/proc/sys/kernel/random/boot_id). Start times count clock ticks since boot, so a
 * recorded (pid, start time) identifies a process only within the boot it was recorded in; after a reboot every
 * recorded process is gone, whatever now runs under its pid.
 */
export function currentBootId(): string {
  cachedBootId ??= readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  return cachedBootId;
}

/** A process across pid reuse: its pid and its start time, within one boot. */
export interface ProcessIdentity {
  pid: number;
  startTime: number;
  bootId: string;
}

/** This worker process's identity: recorded as the supervisor of the commands it spawns. */
export function ownIdentity(): ProcessIdentity {
  const self = readProcessSync(process.pid);
  if (!self) throw new Error('cannot read /proc/self/stat');
  return { pid: process.pid, startTime: self.startTime, bootId: currentBootId() };
}

/** True while the process with that identity runs (not a zombie) on this boot. */
export function isAliveIdentity(id: ProcessIdentity, processes?: ProcessInfo[]): boolean {
  if (id.bootId !== currentBootId()) return false;
  const p = processes ? processes.find((q) => q.pid === id.pid) : readProcessSync(id.pid);
  return p !== undefined && p.startTime === id.startTime && isLive(p);
}

// Read synchronously in batches: /proc reads never wait on disk, while one async read per file costs about ten
// times as much in thread-pool round trips. Yielding between batches keeps the event loop responsive.
const SCAN_BATCH = 128;
const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

let fullScans = 0;
/** How many full /proc scans this process has made (listProcesses calls): what the shared scanner saves. */
export function fullScanCount(): number {
  return fullScans;
}

export async function listProcesses(): Promise<ProcessInfo[]> {
  fullScans++;
  const pids = readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map(Number);
  const out: ProcessInfo[] = [];
  for (let i = 0; i < pids.length; i++) {
    if (i > 0 && i % SCAN_BATCH === 0) await yieldToEventLoop();
    const info = readProcessSync(pids[i]);
    if (info) out.push(info);
  }
  return out;
}

/** Pids of the live (non-zombie) members of a process group. */
export async function aliveInGroup(pgid: number, processes?: ProcessInfo[]): Promise<number[]> {
  return (processes ?? (await listProcesses())).filter((p) => p.pgid === pgid && isLive(p)).map((p) => p.pid);
}

function childrenByParent(processes: ProcessInfo[]): Map<number, ProcessInfo[]> {
  const byParent = new Map<number, ProcessInfo[]>();
  for (const p of processes) {
    const siblings = byParent.get(p.ppid);
    if (siblings) siblings.push(p);
    else byParent.set(p.ppid, [p]);
  }
  return byParent;
}

/** The processes in `seeds` plus everything below them. */
function closure(processes: ProcessInfo[], seeds: Set<number>): ProcessInfo[] {
  const byPid = new Map(processes.map((p) => [p.pid, p]));
  const byParent = childrenByParent(processes);
  const seen = new Set<number>();
  const out: ProcessInfo[] = [];
  const queue = [...seeds];
  while (queue.length > 0) {
    const pid = queue.pop() as number;
    if (seen.has(pid)) continue;
    seen.add(pid);
    const p = byPid.get(pid);
    if (p) out.push(p);
    for (const child of byParent.get(pid) ?? []) queue.push(child.pid);
  }
  return out;
}

function sameProcess(t: TrackedProcess, p: ProcessInfo | undefined): p is ProcessInfo {
  return p !== undefined && p.startTime === t.startTime;
}

/**
 * Records into `tracked` the command's processes as they are in `processes` (one scan, normally the shared
 * scanner's): the root's process group and session, everything already tracked that is still alive, the groups
 * and sessions that tracked processes lead (a `setsid` child's own children), and all their descendants. Call
 * it on every scan while the command runs, so a process that escapes the group is recorded while its ancestry
 * still shows where it came from.
 */
export function recordTree(rootPid: number, tracked: TrackedProcesses, processes: ProcessInfo[]): void {
  updateTracked([rootPid], tracked, processes);
}

type ScanListener = (processes: ProcessInfo[]) => void;

/**
 * One /proc scan per interval for every running command of this worker, instead of one per command: each
 * runner subscribes while its command runs and is handed the same scan. The scanner runs only while someone
 * is subscribed, and the next scan is scheduled after the previous one finished, so scans never pile up.
 */
export class ProcessScanner {
  private readonly listeners = new Set<ScanListener>();
  private timer: NodeJS.Timeout | undefined;
  private scanning = false;

  constructor(readonly intervalMs: number) {}

  /** Calls `listener` with every scan from now on; the returned function unsubscribes. */
  subscribe(listener: ScanListener): () => void {
    this.listeners.add(listener);
    // A scan in flight schedules the next one itself when it ends.
    if (!this.timer && !this.scanning) this.schedule();
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0 && this.timer) {
        clearTimeout(this.timer);
        this.timer = undefined;
      }
    };
  }

  get subscribers(): number {
    return this.listeners.size;
  }

  private schedule(): void {
    this.timer = setTimeout(() => void this.scan(), this.intervalMs);
    this.timer.unref(); // subscribers (running commands) keep the process alive, not the scanner
  }

  private async scan(): Promise<void> {
    this.timer = undefined;
    this.scanning = true;
    let processes: ProcessInfo[] | undefined;
    try {
      processes = await listProcesses();
    } catch {
      // /proc unreadable for a moment: the next scan tries again
    }
    for (const listener of processes ? [...this.listeners] : []) {
      try {
        listener(processes as ProcessInfo[]);
      } catch {
        // one runner's bookkeeping must not stop the others' scans
      }
    }
    this.scanning = false;
    if (this.listeners.size > 0) this.schedule();
  }
}

/** How often the shared scanner records the trees of running commands. */
export const SHARED_SCAN_INTERVAL_MS = 200;
let sharedScanner: ProcessScanner | undefined;
/** The worker process's one scanner (see ProcessScanner). */
export function sharedProcessScanner(): ProcessScanner {
  sharedScanner ??= new ProcessScanner(SHARED_SCAN_INTERVAL_MS);
  return sharedScanner;
}

// The root is found through its group (and session, both numbered by the root's pid, since it was spawned
// detached): a pgid or sid cannot be reused while any process still carries it, whereas a bare pid can.
function updateTracked(pgids: Iterable<number>, tracked: TrackedProcesses, all: ProcessInfo[]): ProcessInfo[] {
  const byPid = new Map(all.map((p) => [p.pid, p]));
  const leaders = new Set<number>(pgids);
  const seeds = new Set<number>();
  for (const t of tracked.values()) {
    const current = byPid.get(t.pid);
    if (!sameProcess(t, current)) continue;
    seeds.add(t.pid);
    if (t.pid === t.pgid || t.pid === t.sid) leaders.add(t.pid);
  }
  for (const p of all) {
    if (leaders.has(p.pgid) || leaders.has(p.sid)) seeds.add(p.pid);
  }
  const members = closure(all, seeds).filter(isLive);
  for (const p of members) {
    const known = tracked.get(p.pid);
    if (!known || known.startTime !== p.startTime) {
      tracked.set(p.pid, { pid: p.pid, startTime: p.startTime, pgid: p.pgid, sid: p.sid });
    }
  }
  return members;
}

/**
 * The link targets (`socket:[n]`, `pipe:[n]`) of a process's file descriptors. Synchronous on purpose: called
 * right after spawn() returns, before the event loop runs. Best effort: a very short command may already have
 * exited (its fds are closed) by then, which is why the runner also passes a tag fd (openProcessTag).
 */
export function fdLinksSync(pid: number, fds: number[]): string[] {
  const out: string[] = [];
  for (const fd of fds) {
    try {
      const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      // Only anonymous channels identify the command; a file such as /dev/null is shared by everyone.
      if (/^(?:socket|pipe):\[\d+\]$/.test(link)) out.push(link);
    } catch {
      // gone already, or not ours to see
    }
  }
  return out;
}

export interface ProcessTag {
  /** Where the tag is until `unlink`: the spawn opens it read-only for the child (spawner.ts), and nothing else. */
  path: string;
  /** What /proc/<pid>/fd/<n> reads for a holder of the tag. */
  links: string[];
  /** Once the child holds it: the name goes, the file lives on in the descriptors. */
  unlink(): void;
  close(): void;
}

/**
 * A file descriptor that marks a command's processes: an empty, read-only temp file unique to the run, unlinked once
 * the child holds it. Known before the spawn, so unlike the stdout channel it cannot be missed when the leader exits
 * at once. The caller keeps it open until teardown is over (`close`), so the file (and its link text) cannot be reused
 * meanwhile.
 */
export function openProcessTag(id: string): ProcessTag | undefined {
  const file = path.join(os.tmpdir(), `orchard-run-${id}`);
  try {
    closeSync(openSync(file, 'wx', 0o400));
    const fd = openSync(file, 'r');
    let closed = false;
    let unlinked = false;
    const unlink = () => {
      if (!unlinked) rmSync(file, { force: true });
      unlinked = true;
    };
    return {
      path: file,
      links: [`${file} (deleted)`, file],
      unlink,
      close: () => {
        unlink();
        if (!closed) closeSync(fd);
        closed = true;
      },
    };
  } catch {
    rmSync(file, { force: true });
    return undefined; // no writable tmp: the other marks still apply
  }
}

export interface ProcessMarks {
  /** fd link targets (fdLinksSync, ProcessTag.links): a process holding any of them is marked. */
  fdLinks?: readonly string[];
  /** An environment entry the command was started with (the runner's per-run marker variable). */
  env?: { name: string; value: string };
  /**
   * The command's leader's start (clock ticks after boot, ProcessInfo.startTime): a process started before it cannot
   * carry its marks — fds and the environment pass only to processes created after it — so it is not read. Without
   * it every live process is read (each one's environment and every fd link: the costly part of a teardown).
   */
  startedSince?: number;
}

/**
 * Live processes (other than this worker) that carry any of the marks: an fd inherited from the command, or
 * its marker variable in their initial environment. Finds descendants that left both the process group and
 * the tree (re-parented to init before any snapshot), unless they closed those fds and replaced their
 * environment (`env -i`).
 */
export async function processesCarrying(marks: ProcessMarks, scan?: ProcessInfo[]): Promise<ProcessInfo[]> {
  const links = new Set(marks.fdLinks ?? []);
  const envEntry = marks.env ? Buffer.from(`${marks.env.name}=${marks.env.value}\0`) : undefined;
  if (links.size === 0 && !envEntry) return [];
  const found: ProcessInfo[] = [];
  let scanned = 0;
  const spawner = spawnerPid();
  for (const p of scan ?? (await listProcesses())) {
    // The spawner holds the worker's ends of the command's pipes: the same pipe inodes, not the command's.
    if (p.pid === process.pid || p.pid === spawner || !isLive(p)) continue;
    if (marks.startedSince !== undefined && p.startTime < marks.startedSince) continue;
    if (++scanned % 32 === 0) await yieldToEventLoop();
    if (envEntry && hasEnvEntry(p.pid, envEntry)) {
      found.push(p);
      continue;
    }
    if (links.size > 0 && holdsAny(p.pid, links)) found.push(p);
  }
  return found;
}

/**
 * For many marker values at once (the reaper's recorded runs): live processes, other than this worker, whose
 * initial environment has `name=<value>` for one of `values`, by value. One read of each environ, over the
 * given scan (or a new one).
 */
export async function markerCarriers(name: string, values: ReadonlySet<string>, processes?: ProcessInfo[]): Promise<Map<string, ProcessInfo[]>> {
  const found = new Map<string, ProcessInfo[]>();
  if (values.size === 0) return found;
  const prefix = Buffer.from(`${name}=`);
  let scanned = 0;
  for (const p of processes ?? (await listProcesses())) {
    if (p.pid === process.pid || !isLive(p)) continue;
    if (++scanned % 32 === 0) await yieldToEventLoop();
    const value = envValue(p.pid, prefix);
    if (value === undefined || !values.has(value)) continue;
    const list = found.get(value);
    if (list) list.push(p);
    else found.set(value, [p]);
  }
  return found;
}

function envValue(pid: number, prefix: Buffer): string | undefined {
  let environ: Buffer;
  try {
    environ = readFileSync(`/proc/${pid}/environ`);
  } catch {
    return undefined; // not ours to see, or gone
  }
  for (let at = environ.indexOf(prefix); at >= 0; at = environ.indexOf(prefix, at + 1)) {
    if (at > 0 && environ[at - 1] !== 0) continue; // the prefix inside another entry's value
    const end = environ.indexOf(0, at);
    return environ.subarray(at + prefix.length, end < 0 ? environ.length : end).toString('utf8');
  }
  return undefined;
}

function hasEnvEntry(pid: number, entry: Buffer): boolean {
  try {
    const environ = readFileSync(`/proc/${pid}/environ`);
    const at = environ.indexOf(entry);
    return at === 0 || (at > 0 && environ[at - 1] === 0);
  } catch {
    return false; // not ours to see, or gone
  }
}

function holdsAny(pid: number, links: ReadonlySet<string>): boolean {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds) {
    try {
      // readlink, not stat: stat would follow the link and could block (e.g. on a hung FUSE mount).
      if (links.has(readlinkSync(`/proc/${pid}/fd/${fd}`))) return true;
    } catch {
      // fd closed meanwhile
    }
  }
  return false;
}

/** Adds processes to `tracked` (e.g. holders of the command's output found at teardown). */
export function track(tracked: TrackedProcesses, processes: readonly ProcessInfo[]): void {
  for (const p of processes) tracked.set(p.pid, { pid: p.pid, startTime: p.startTime, pgid: p.pgid, sid: p.sid });
}

export interface KillOptions {
  /** Time between SIGTERM and SIGKILL for processes to exit cleanly. */
  graceMs: number;
  /** Interval between /proc scans. */
  pollMs: number;
  /** Give up after this long (from the call) and report what is still alive. */
  timeoutMs: number;
  /** Processes recorded by recordTree; those outside the group are signalled one by one. */
  tracked?: TrackedProcesses;
  /** How a signal is sent (process.kill by default); tests inject one that cannot kill. Never throws. */
  send?: (target: number, signal: NodeJS.Signals) => void;
  /** Called on every poll, so a caller can heartbeat through a long teardown. */
  onPoll?: () => void;
  /**
   * A scan the caller just took, for the first look instead of a new one: a target missing from it cannot appear
   * later, since only a live target can fork one, and every later look scans again.
   */
  scan?: ProcessInfo[];
}

let ownGroup: { pgid: number; sid: number } | undefined;
function ownGroupIds(): { pgid: number; sid: number } {
  if (!ownGroup) {
    const self = readProcessSync(process.pid);
    ownGroup = { pgid: self?.pgid ?? process.pid, sid: self?.sid ?? process.pid };
  }
  return ownGroup;
}

export function sendSignal(target: number, signal: NodeJS.Signals): void {
  try {
    process.kill(target, signal);
  } catch {
    // ESRCH: already gone; EPERM: not ours — it will show up in `remaining`
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * SIGTERM the group (and tracked escapees), wait up to graceMs, SIGKILL, then poll until no live process of
 * the group or of `tracked` remains, or timeoutMs passes. Returns the pids still alive (empty = proven gone).
 * Zombies count as gone: they run no code, and orphaned ones may never be reaped here (PID 1 does not reap).
 */
export async function killGroupAndWait(pgid: number, options: KillOptions): Promise<{ remaining: number[] }> {
  return killAndWait([pgid], options);
}

/**
 * killGroupAndWait for any number of process groups (possibly none: then only `tracked` and what descends
 * from it are targets), in one teardown with one /proc scan per poll.
 */
export async function killAndWait(pgids: readonly number[], options: KillOptions): Promise<{ remaining: number[] }> {
  const own = ownGroupIds();
  for (const pgid of pgids) {
    // process.kill(-0) or -own pgid would signal this worker.
    if (!Number.isInteger(pgid) || pgid <= 1 || pgid === process.pid || pgid === own.pgid || pgid === own.sid) {
      throw new Error(`killGroupAndWait: refusing to signal process group ${pgid}`);
    }
  }
  const groups = new Set(pgids);
  const send = options.send ?? sendSignal;
  const tracked = options.tracked ?? new Map<number, TrackedProcess>();
  const deadline = Date.now() + options.timeoutMs;
  const graceEnds = Date.now() + options.graceMs;

  let scan = options.scan;
  const liveTargets = async (): Promise<ProcessInfo[]> => {
    options.onPoll?.();
    const all = scan ?? (await listProcesses());
    scan = undefined;
    // Re-snapshot on every scan: a process forking during the grace period is caught too.
    const members = updateTracked(groups, tracked, all);
    const byPid = new Map(all.map((p) => [p.pid, p]));
    const targets = new Map<number, ProcessInfo>();
    for (const p of members) targets.set(p.pid, p);
    for (const p of all) if (groups.has(p.pgid) && isLive(p)) targets.set(p.pid, p);
    for (const t of tracked.values()) {
      const p = byPid.get(t.pid);
      if (sameProcess(t, p) && isLive(p)) targets.set(p.pid, p);
    }
    targets.delete(process.pid);
    return [...targets.values()].filter((p) => p.pgid !== own.pgid && p.pid > 1);
  };

  const signalAll = (targets: ProcessInfo[], signal: NodeJS.Signals) => {
    for (const pgid of groups) if (targets.some((p) => p.pgid === pgid)) send(-pgid, signal);
    for (const p of targets) {
      if (!groups.has(p.pgid)) send(p.pid, signal);
      // A stopped process would hold SIGTERM pending forever; SIGKILL works on stopped processes anyway.
      if (signal === 'SIGTERM' && (p.state === 'T' || p.state === 't')) send(p.pid, 'SIGCONT');
    }
  };

  let targets = await liveTargets();
  if (targets.length === 0) return { remaining: [] };
  if (options.graceMs > 0) {
    signalAll(targets, 'SIGTERM');
    const termed = new Set(targets.map((p) => p.pid));
    while (Date.now() < graceEnds && Date.now() < deadline) {
      await sleep(Math.min(options.pollMs, Math.max(0, graceEnds - Date.now())));
      targets = await liveTargets();
      if (targets.length === 0) return { remaining: [] };
      // Processes forked since the first SIGTERM get theirs too.
      for (const p of targets) if (!termed.has(p.pid)) send(p.pid, 'SIGTERM');
      for (const p of targets) termed.add(p.pid);
    }
  }
  for (;;) {
    signalAll(targets, 'SIGKILL');
    await sleep(options.pollMs);
    targets = await liveTargets();
    if (targets.length === 0) return { remaining: [] };
    if (Date.now() >= deadline) return { remaining: targets.map((p) => p.pid).sort((a, b) => a - b) };
  }
}
