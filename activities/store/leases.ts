import type { Pool } from 'pg';
import { ownIdentity, type ProcessIdentity } from '../bash/process-tree';
import type { Lease } from '../../contract/activities';

export type HolderLiveness = 'running' | 'closed' | 'unknown';

export type AcquireOutcome =
  /** No lease existed: this holder has it now. */
  | { kind: 'created'; lease: Lease }
  /** This holder already had it (a retried start, a continued run). */
  | { kind: 'reentered'; lease: Lease }
  /** The previous holder is provably gone (closed, no live process): taken over with a new generation. */
  | { kind: 'taken_over'; lease: Lease; previous: string }
  /** Another live holder has it: no second agent on one worktree. */
  | { kind: 'bound'; holder: string }
  /** Another holder has it and whether it is still alive cannot be told: refuse rather than guess. */
  | { kind: 'unknown'; holder: string; reason: string };

export interface LivenessProbe {
  /** Whether the holder's execution is still running (asked of Temporal). */
  holderLiveness(holder: string): Promise<HolderLiveness>;
  /** Live pids of the recorded process groups of that generation, on this host. */
  aliveProcesses(worktree: string, generation: number): Promise<number[]>;
}

interface LeaseRow {
  worktree: string;
  host: string;
  holder: string;
  generation: string;
  state: 'held' | 'released';
}

const lease = (row: { worktree: string; holder: string; generation: string | number }): Lease => ({
  worktree: row.worktree,
  holder: row.holder,
  generation: Number(row.generation),
});

/**
 * Acquire as compare-and-set. Every change is one `UPDATE … WHERE generation = $g` (or an insert that may
 * conflict): under READ COMMITTED it re-checks its predicate against the winner's committed row, so two
 * concurrent acquirers end with exactly one holder and the loser re-reads and binds to the winner.
 */
export async function acquireLease(pool: Pool, request: { worktree: string; host: string; holder: string }, probe: LivenessProbe): Promise<AcquireOutcome> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const { rows } = await pool.query<LeaseRow>('SELECT worktree, host, holder, generation, state FROM worktree_leases WHERE worktree = $1', [
      request.worktree,
    ]);
    const row = rows[0];
    if (!row) {
      const inserted = await pool.query(
        `INSERT INTO worktree_leases (worktree, host, holder, generation, state) VALUES ($1, $2, $3, 1, 'held')
         ON CONFLICT (worktree) DO NOTHING`,
        [request.worktree, request.host, request.holder],
      );
      if (inserted.rowCount === 1) return { kind: 'created', lease: lease({ ...request, generation: 1 }) };
      continue;
    }
    if (row.holder === request.holder && row.state === 'held') {
      const renewed = await renewLease(pool, lease(row));
      if (renewed) return { kind: 'reentered', lease: lease(row) };
      continue;
    }
    if (row.state === 'held') {
      const liveness = await probe.holderLiveness(row.holder);
      if (liveness === 'running') return { kind: 'bound', holder: row.holder };
      if (liveness === 'unknown') {
        return { kind: 'unknown', holder: row.holder, reason: `cannot tell whether ${row.holder} is still running` };
      }
      if (row.host !== request.host) {
        return { kind: 'unknown', holder: row.holder, reason: `its processes ran on host ${row.host}, not here` };
      }
      const alive = await probe.aliveProcesses(row.worktree, Number(row.generation));
      if (alive.length > 0) {
        return {
          kind: 'unknown',
          holder: row.holder,
          reason: `${row.holder} is closed but processes it started are still alive (pids ${alive.join(', ')})`,
        };
      }
    }
    const taken = await pool.query(
      `UPDATE worktree_leases SET holder = $3, host = $4, generation = generation + 1, state = 'held',
              acquired_at = now(), renewed_at = now(), released_at = NULL
       WHERE worktree = $1 AND generation = $2 RETURNING worktree, holder, generation`,
      [row.worktree, row.generation, request.holder, request.host],
    );
    if (taken.rowCount === 1) return { kind: 'taken_over', lease: lease(taken.rows[0]), previous: row.holder };
  }
  return { kind: 'unknown', holder: '(contended)', reason: 'the lease kept changing while it was being acquired' };
}

/** True while the lease is still this holder's at this generation. */
export async function leaseIsCurrent(pool: Pool, l: Lease): Promise<boolean> {
  const { rowCount } = await pool.query(`SELECT 1 FROM worktree_leases WHERE worktree = $1 AND holder = $2 AND generation = $3 AND state = 'held'`, [
    l.worktree,
    l.holder,
    l.generation,
  ]);
  return rowCount === 1;
}

/** Whether the lease is still held at this generation by whoever holds it (a fence moves it to the next one). */
export async function leaseHeldAt(pool: Pool, l: { worktree: string; generation: number }): Promise<boolean> {
  const { rowCount } = await pool.query(`SELECT 1 FROM worktree_leases WHERE worktree = $1 AND generation = $2 AND state = 'held'`, [l.worktree, l.generation]);
  return rowCount === 1;
}

/** Compare-and-set renewal: false when the lease moved (the caller is stale and must stop). */
export async function renewLease(pool: Pool, l: Lease): Promise<boolean> {
  const { rowCount } = await pool.query(
    `UPDATE worktree_leases SET renewed_at = now()
     WHERE worktree = $1 AND holder = $2 AND generation = $3 AND state = 'held'`,
    [l.worktree, l.holder, l.generation],
  );
  return rowCount === 1;
}

/** Release-if-current: a stale holder's release changes nothing. */
export async function releaseLease(pool: Pool, l: Lease): Promise<boolean> {
  const { rowCount } = await pool.query(
    `UPDATE worktree_leases SET state = 'released', released_at = now()
     WHERE worktree = $1 AND holder = $2 AND generation = $3 AND state = 'held'`,
    [l.worktree, l.holder, l.generation],
  );
  return rowCount === 1;
}

/** Releases whatever `holder` holds on `host` (a chain closing without knowing its lease's generation). */
export async function releaseHolder(pool: Pool, host: string, holder: string): Promise<boolean> {
  const { rowCount } = await pool.query(
    `UPDATE worktree_leases SET state = 'released', released_at = now() WHERE host = $1 AND holder = $2 AND state = 'held'`,
    [host, holder],
  );
  return (rowCount ?? 0) > 0;
}

/** What identifies a command's processes (the runner's SpawnInfo): recorded before the command's code runs. */
export interface ProcessGroupIdentity {
  pgid: number;
  bootId: string;
  startTime: number;
  marker: string;
}

/**
 * Records a command's process group against the lease generation, with its identity and the worker process that
 * supervises it (by default this one). Called from the runner's onSpawn, so it commits before the command runs.
 */
export async function recordProcessGroup(
  pool: Pool,
  l: Lease,
  host: string,
  group: ProcessGroupIdentity,
  callKey: string,
  supervisor: ProcessIdentity = ownIdentity(),
): Promise<void> {
  await pool.query(
    `INSERT INTO lease_process_groups
       (worktree, generation, host, pgid, call_key, boot_id, start_time, marker, supervisor_pid, supervisor_start_time)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
     ON CONFLICT DO NOTHING`,
    [l.worktree, l.generation, host, group.pgid, callKey, group.bootId, group.startTime, group.marker, supervisor.pid, supervisor.startTime],
  );
}

/** Marks the group ended once teardown verified that none of it is alive. */
export async function endProcessGroup(pool: Pool, l: Lease, pgid: number, callKey: string): Promise<void> {
  await pool.query(
    `UPDATE lease_process_groups SET ended_at = now(), end_reason = 'exited'
     WHERE worktree = $1 AND generation = $2 AND pgid = $3 AND call_key = $4 AND ended_at IS NULL`,
    [l.worktree, l.generation, pgid, callKey],
  );
}

/** A recorded group not verified ended, with what identifies its processes (NULLs: recorded before 004). */
export interface OpenProcessGroup {
  worktree: string;
  generation: number;
  host: string;
  pgid: number;
  callKey: string;
  bootId: string | null;
  startTime: number | null;
  marker: string | null;
  /** The worker process that spawned it, when recorded. */
  supervisor: ProcessIdentity | null;
}

export type GroupEndReason = 'reaped' | 'gone' | 'rebooted';

const OPEN_GROUP_COLUMNS = `worktree, generation, host, pgid, call_key, boot_id, start_time, marker, supervisor_pid,
  supervisor_start_time`;

interface OpenGroupRow {
  worktree: string;
  generation: string;
  host: string;
  pgid: number;
  call_key: string;
  boot_id: string | null;
  start_time: string | null;
  marker: string | null;
  supervisor_pid: number | null;
  supervisor_start_time: string | null;
}

const openGroup = (r: OpenGroupRow): OpenProcessGroup => ({
  worktree: r.worktree,
  generation: Number(r.generation),
  host: r.host,
  pgid: r.pgid,
  callKey: r.call_key,
  bootId: r.boot_id,
  startTime: r.start_time === null ? null : Number(r.start_time),
  marker: r.marker,
  supervisor:
    r.supervisor_pid === null || r.supervisor_start_time === null || r.boot_id === null
      ? null
      : { pid: r.supervisor_pid, startTime: Number(r.supervisor_start_time), bootId: r.boot_id },
});

/** Open groups on a host: of one call, of one worktree (every generation), or all of them. */
export async function findOpenProcessGroups(pool: Pool, host: string, scope: { callKey: string } | { worktree: string } | 'all'): Promise<OpenProcessGroup[]> {
  const [filter, params] =
    scope === 'all' ? ['', [host]] : 'callKey' in scope ? ['AND call_key = $2', [host, scope.callKey]] : ['AND worktree = $2', [host, scope.worktree]];
  const { rows } = await pool.query<OpenGroupRow>(
    `SELECT ${OPEN_GROUP_COLUMNS} FROM lease_process_groups WHERE host = $1 AND ended_at IS NULL ${filter}
     ORDER BY started_at, pgid`,
    params,
  );
  return rows.map(openGroup);
}

/** Ends a group the reaper verified gone. */
export async function markProcessGroupEnded(pool: Pool, g: OpenProcessGroup, reason: GroupEndReason): Promise<void> {
  await pool.query(
    `UPDATE lease_process_groups SET ended_at = now(), end_reason = $5, alive_pids = NULL
     WHERE worktree = $1 AND generation = $2 AND pgid = $3 AND call_key = $4 AND ended_at IS NULL`,
    [g.worktree, g.generation, g.pgid, g.callKey, reason],
  );
}

/** Notes that the reaper found processes of an open group alive (and could not stop them): it stays open. */
export async function noteProcessGroupAlive(pool: Pool, g: OpenProcessGroup, pids: readonly number[]): Promise<void> {
  await pool.query(
    `UPDATE lease_process_groups SET checked_at = now(), alive_pids = $5
     WHERE worktree = $1 AND generation = $2 AND pgid = $3 AND call_key = $4 AND ended_at IS NULL`,
    [g.worktree, g.generation, g.pgid, g.callKey, [...pids]],
  );
}
