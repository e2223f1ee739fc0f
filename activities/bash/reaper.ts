import type { Pool } from 'pg';
import { findOpenProcessGroups, markProcessGroupEnded, noteProcessGroupAlive, type OpenProcessGroup } from '../store/leases';
import {
  currentBootId,
  isAliveIdentity,
  isLive,
  killAndWait,
  listProcesses,
  markerCarriers,
  track,
  type ProcessInfo,
  type TrackedProcesses,
} from './process-tree';
import { RUN_MARKER_ENV } from './runner';

/**
 * Reaps recorded process groups that no live runner supervises any more: the commands of a worker that died
 * (kill -9, OOM, a host restart of the worker alone). Their rows in lease_process_groups say who they are
 * (process group, boot id, leader start time, marker; recorded before the command ran), so a later worker
 * can find exactly those processes, kill them, verify them gone and end the rows, and otherwise keep the
 * worktree blocked. It never signals a process it cannot show to be the command's (see identifyGroup).
 */

export interface ReapOptions {
  /** Teardown: SIGTERM → graceMs → SIGKILL, polling every pollMs, giving up after timeoutMs (the runner's defaults). */
  graceMs?: number;
  pollMs?: number;
  timeoutMs?: number;
  /** How signals are sent (process.kill by default); tests inject one that cannot kill. */
  send?: (target: number, signal: NodeJS.Signals) => void;
  /** Called while reaping (every poll), so an activity can heartbeat through it. */
  heartbeat?: () => void;
}

export interface ReapResult {
  /** True only when nothing of any of the groups is alive any more (proven, not assumed). */
  verified: boolean;
  /** Processes that were the commands' and are gone now. */
  killed: number[];
  /** Processes still alive that are (or, for rows without identity, may be) the commands'. */
  remaining: number[];
}

const DEFAULT_KILL = { graceMs: 1000, pollMs: 50, timeoutMs: 5000 };

/** What of one recorded group is alive, by the identity rules. */
export interface GroupLook {
  /** Live processes that are the command's. */
  ours: ProcessInfo[];
  /** Whether the group number is still the command's, so signalling the whole group hits only its processes. */
  groupIsOurs: boolean;
  /** Live group members that cannot be told apart (a row recorded without identity): never killed, never "gone". */
  unidentified: ProcessInfo[];
}

/**
 * Which live processes are a recorded command's. The rule, within the recorded boot:
 *  - a process carrying the command's marker (RUN_MARKER_ENV=<marker> in /proc/<pid>/environ) is the command's,
 *    wherever it is: the marker is a random UUID that only the command's processes inherit;
 *  - the group is the command's while its leader (pid = pgid) is alive with the recorded start time; then every
 *    member is the command's;
 *  - a live leader with another start time means the pid, and so the group number, was reused: Linux gives a
 *    pid out again only once no process has it as pid, pgid or sid, so none of the command's group is left and
 *    every member is a stranger;
 *  - with no process at pid = pgid (the leader exited), members count as the command's when each started no
 *    earlier than the recorded leader and is in the leader's session (sid = pgid: the runner starts every
 *    command with setsid, and a process cannot join a group of another session). A member that started
 *    earlier or sits in another session proves the number was reused: then none of them is the command's.
 * Limit: a reused group whose new leader called setsid and then exited, leaving members, passes the last rule;
 * that takes the pid space wrapping onto this exact number while the row is open. Rows recorded before the
 * identity existed (NULL start time) identify nothing: their live members are `unidentified`.
 */
export function identifyGroup(
  group: Pick<OpenProcessGroup, 'pgid' | 'startTime'>,
  processes: readonly ProcessInfo[],
  carriers: readonly ProcessInfo[] = [],
): GroupLook {
  const members = processes.filter((p) => p.pgid === group.pgid && isLive(p) && p.pid !== process.pid);
  const ours = new Map<number, ProcessInfo>(carriers.filter(isLive).map((p) => [p.pid, p]));
  if (group.startTime === null) {
    return { ours: [...ours.values()], groupIsOurs: false, unidentified: members.filter((p) => !ours.has(p.pid)) };
  }
  const recorded = group.startTime;
  const leader = processes.find((p) => p.pid === group.pgid);
  const groupIsOurs = leader ? leader.startTime === recorded : members.length > 0 && members.every((p) => p.startTime >= recorded && p.sid === group.pgid);
  if (groupIsOurs) for (const p of members) ours.set(p.pid, p);
  return { ours: [...ours.values()], groupIsOurs, unidentified: [] };
}

/** One /proc scan and one environ pass for all the groups: what of each is alive now. */
async function look(groups: readonly OpenProcessGroup[]): Promise<Map<OpenProcessGroup, GroupLook>> {
  const processes = await listProcesses();
  const markers = new Set(groups.map((g) => g.marker).filter((m): m is string => m !== null));
  const carriers = await markerCarriers(RUN_MARKER_ENV, markers, processes);
  return new Map(groups.map((g) => [g, identifyGroup(g, processes, g.marker ? carriers.get(g.marker) : [])]));
}

const sorted = (pids: Iterable<number>) => [...new Set(pids)].sort((a, b) => a - b);

/**
 * Kills what is alive of the groups (one teardown for all), verifies by a fresh look that nothing of them
 * lives, and ends the rows that are verified; the others stay open with the pids found alive. Fails closed:
 * anything that may be the commands' and is alive makes the result unverified.
 */
async function reapGroups(pool: Pool, groups: readonly OpenProcessGroup[], options: ReapOptions = {}): Promise<ReapResult> {
  options.heartbeat?.();
  const boot = currentBootId();
  const current: OpenProcessGroup[] = [];
  for (const g of groups) {
    // Recorded in another boot: the machine restarted since, and every process of that boot is gone.
    if (g.bootId !== null && g.bootId !== boot) await markProcessGroupEnded(pool, g, 'rebooted');
    else current.push(g);
  }
  if (current.length === 0) return { verified: true, killed: [], remaining: [] };

  const before = await look(current);
  const tracked: TrackedProcesses = new Map();
  const pgids: number[] = [];
  for (const [g, found] of before) {
    track(tracked, found.ours);
    if (found.groupIsOurs) pgids.push(g.pgid);
  }
  if (tracked.size > 0) {
    await killAndWait(pgids, {
      graceMs: options.graceMs ?? DEFAULT_KILL.graceMs,
      pollMs: options.pollMs ?? DEFAULT_KILL.pollMs,
      timeoutMs: options.timeoutMs ?? DEFAULT_KILL.timeoutMs,
      tracked,
      send: options.send,
      onPoll: options.heartbeat,
    });
  }

  const after = tracked.size > 0 ? await look(current) : before;
  const remaining: number[] = [];
  for (const g of current) {
    const alive = [...(after.get(g)?.ours ?? []), ...(after.get(g)?.unidentified ?? [])].map((p) => p.pid);
    if (alive.length === 0) {
      await markProcessGroupEnded(pool, g, (before.get(g)?.ours.length ?? 0) > 0 ? 'reaped' : 'gone');
    } else {
      await noteProcessGroupAlive(pool, g, sorted(alive));
      remaining.push(...alive);
    }
  }
  const stillAlive = new Set(remaining);
  return {
    verified: remaining.length === 0,
    killed: sorted([...tracked.keys()].filter((pid) => !stillAlive.has(pid))),
    remaining: sorted(remaining),
  };
}

/**
 * Reaps the groups recorded for one tool call on this host: what a retried attempt does when it finds the
 * call's claim but no result (the earlier attempt's worker died or was given up on), before it reports the
 * outcome as unknown.
 */
export async function reapCall(pool: Pool, hostId: string, callKey: string, options: ReapOptions = {}): Promise<ReapResult> {
  return reapGroups(pool, await findOpenProcessGroups(pool, hostId, { callKey }), options);
}

/** Reaps every open group of a worktree on this host, of every lease generation (except one call's, if given). */
export async function reapWorktree(pool: Pool, hostId: string, worktree: string, options: ReapOptions & { exceptCallKey?: string } = {}): Promise<ReapResult> {
  const groups = await findOpenProcessGroups(pool, hostId, { worktree });
  return reapGroups(
    pool,
    groups.filter((g) => g.callKey !== options.exceptCallKey),
    options,
  );
}

/**
 * Before a tool changes a worktree: undefined when no process recorded for it (any generation, any call but
 * `exceptCallKey`) is alive, after reaping whatever was; otherwise why the worktree is blocked, naming the pids.
 */
export async function liveGroupsBlocking(
  pool: Pool,
  hostId: string,
  worktree: string,
  exceptCallKey?: string,
  options: ReapOptions = {},
): Promise<string | undefined> {
  const reaped = await reapWorktree(pool, hostId, worktree, { ...options, exceptCallKey });
  if (reaped.verified) return undefined;
  return (
    `processes started in this worktree by earlier commands are still alive and could not be stopped ` +
    `(pids ${reaped.remaining.join(', ')}): nothing may change the worktree until they are gone, ` +
    `so this call changed nothing. An operator can inspect them on host ${hostId}.`
  );
}

export interface SweepSummary extends ReapResult {
  /** Open groups recorded on this host when the sweep started. */
  open: number;
  /** Left alone because the worker process that spawned them is still alive and supervises them. */
  supervised: number;
}

/**
 * At worker start, before it takes work: reaps every open group recorded on this host whose supervising worker
 * is gone (a worker that died leaves its commands running). Groups whose supervisor still runs are another
 * live worker's (two workers for one host, or one that is shutting down) and are left to it; a group that
 * cannot be verified dead stays open and keeps its worktree blocked.
 */
export async function sweepHost(pool: Pool, hostId: string, options: ReapOptions = {}): Promise<SweepSummary> {
  const open = await findOpenProcessGroups(pool, hostId, 'all');
  const processes = open.length > 0 ? await listProcesses() : [];
  const orphaned = open.filter((g) => !(g.supervisor && isAliveIdentity(g.supervisor, processes)));
  const reaped = await reapGroups(pool, orphaned, options);
  return { ...reaped, open: open.length, supervised: open.length - orphaned.length };
}

/** The one line a worker logs about its start-up sweep. */
export function describeSweep(hostId: string, s: SweepSummary): string {
  const parts = [`process sweep on host ${hostId}: ${s.open} open group(s)`];
  if (s.supervised > 0) parts.push(`${s.supervised} supervised by a live worker, left alone`);
  parts.push(`${s.killed.length} orphaned process(es) killed`);
  if (!s.verified) parts.push(`NOT verified gone: pids ${s.remaining.join(', ')} (their worktrees stay blocked)`);
  return parts.join('; ');
}
