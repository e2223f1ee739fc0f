import type { Pool } from 'pg';

/** One running worker process, as recorded against the host id it serves. */
export interface HostInstance {
  readonly hostId: string;
  /** Random per process start: what a compare-and-set on the row compares. */
  readonly instanceId: string;
  readonly hostname: string;
  /** /proc/sys/kernel/random/boot_id: pids are comparable only within one boot … */
  readonly bootId: string;
  /** … and one pid namespace (two containers on one machine share the boot id, not the pid space). */
  readonly pidNamespace: string;
  readonly pid: number;
}

export interface HostHolder extends HostInstance {
  readonly heartbeatAgeSeconds: number;
}

export type HostClaim =
  { readonly kind: 'claimed'; readonly tookOverFrom?: HostHolder; readonly reason?: string } | { readonly kind: 'refused'; readonly holder: HostHolder };

export interface HostClaimOptions {
  /** A holder whose heartbeat is older than this is presumed dead, wherever it ran. */
  readonly staleAfterSeconds: number;
  /** Whether a pid of this boot and pid namespace still runs. */
  readonly isProcessAlive: (pid: number) => boolean;
}

/** Values that cannot be compared (no /proc): never "the same boot". */
export const UNKNOWN = 'unknown';

interface Row {
  host_id: string;
  instance_id: string;
  hostname: string;
  boot_id: string;
  pid_namespace: string;
  pid: number;
  state: 'running' | 'released';
  age: string;
}

const holderOf = (row: Row): HostHolder => ({
  hostId: row.host_id,
  instanceId: row.instance_id,
  hostname: row.hostname,
  bootId: row.boot_id,
  pidNamespace: row.pid_namespace,
  pid: row.pid,
  heartbeatAgeSeconds: Math.round(Number(row.age)),
});

/**
 * Registers `me` as the one running instance of its host id, as a compare-and-set on the row's instance id:
 * of two workers starting at once with one id, one claims it and the other is refused. Ages are measured on
 * the database's clock, so the hosts' clocks do not matter.
 */
export async function claimHost(pool: Pool, me: HostInstance, options: HostClaimOptions): Promise<HostClaim> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const { rows } = await pool.query<Row>(
      `SELECT host_id, instance_id, hostname, boot_id, pid_namespace, pid, state,
              EXTRACT(EPOCH FROM now() - heartbeat_at) AS age
       FROM worker_hosts WHERE host_id = $1`,
      [me.hostId],
    );
    const row = rows[0];
    if (!row) {
      const inserted = await pool.query(
        `INSERT INTO worker_hosts (host_id, instance_id, hostname, boot_id, pid_namespace, pid, state)
         VALUES ($1, $2, $3, $4, $5, $6, 'running') ON CONFLICT (host_id) DO NOTHING`,
        [me.hostId, me.instanceId, me.hostname, me.bootId, me.pidNamespace, me.pid],
      );
      if (inserted.rowCount === 1) return { kind: 'claimed' };
      continue;
    }
    const holder = holderOf(row);
    const reason = takeoverReason(row, holder, me, options);
    if (reason === undefined) return { kind: 'refused', holder };
    const taken = await pool.query(
      `UPDATE worker_hosts SET instance_id = $3, hostname = $4, boot_id = $5, pid_namespace = $6, pid = $7,
              state = 'running', started_at = now(), heartbeat_at = now(), released_at = NULL
       WHERE host_id = $1 AND instance_id = $2`,
      [me.hostId, row.instance_id, me.instanceId, me.hostname, me.bootId, me.pidNamespace, me.pid],
    );
    if (taken.rowCount === 1) return row.state === 'released' ? { kind: 'claimed' } : { kind: 'claimed', tookOverFrom: holder, reason };
  }
  throw new Error(`host id ${me.hostId}: the registration kept changing while this worker claimed it`);
}

/** Why the recorded holder may be replaced, or undefined when it may still be running. */
function takeoverReason(row: Row, holder: HostHolder, me: HostInstance, options: HostClaimOptions): string | undefined {
  if (row.state === 'released' || row.instance_id === me.instanceId) return 'released';
  if (holder.heartbeatAgeSeconds > options.staleAfterSeconds) return `its last heartbeat is ${holder.heartbeatAgeSeconds}s old`;
  const comparable = row.boot_id !== UNKNOWN && row.pid_namespace !== UNKNOWN;
  if (comparable && row.boot_id === me.bootId && row.pid_namespace === me.pidNamespace) {
    // Our own pid: the recorded process cannot be running (a restarted container often gets the same pid).
    if (row.pid === me.pid) return `pid ${row.pid} is this process now`;
    if (!options.isProcessAlive(row.pid)) return `pid ${row.pid} is gone (same boot)`;
  }
  return undefined;
}

/** False when this instance no longer holds the host id (another one took it over): the caller must stop. */
export async function heartbeatHost(pool: Pool, hostId: string, instanceId: string): Promise<boolean> {
  const { rowCount } = await pool.query(`UPDATE worker_hosts SET heartbeat_at = now() WHERE host_id = $1 AND instance_id = $2 AND state = 'running'`, [
    hostId,
    instanceId,
  ]);
  return rowCount === 1;
}

/** Release-if-still-ours, on a graceful stop: the next worker with this id starts without waiting. */
export async function releaseHost(pool: Pool, hostId: string, instanceId: string): Promise<boolean> {
  const { rowCount } = await pool.query(
    `UPDATE worker_hosts SET state = 'released', released_at = now()
     WHERE host_id = $1 AND instance_id = $2 AND state = 'running'`,
    [hostId, instanceId],
  );
  return rowCount === 1;
}

/** A registered host whose heartbeat is older than this is presumed gone (the worker takes an id over after it too). */
export const HOST_STALE_AFTER_SECONDS = 45;

/**
 * Why the host that holds a worktree lease cannot be reached, or undefined when it can or nobody knows: its worker
 * released its id, or its heartbeat is older than HOST_STALE_AFTER_SECONDS. A host with no registration (workers
 * that do not register, as in tests) is not called unreachable.
 */
export async function leaseHostUnreachable(pool: Pool, worktree: string): Promise<string | undefined> {
  const { rows } = await pool.query(
    `SELECT h.host_id, h.state, EXTRACT(EPOCH FROM now() - h.heartbeat_at)::int AS age
     FROM worktree_leases l JOIN worker_hosts h ON h.host_id = l.host WHERE l.worktree = $1`,
    [worktree],
  );
  const host = rows[0];
  if (!host) return undefined;
  if (host.state === 'released') return `host ${host.host_id} has no worker (its id was released)`;
  if (Number(host.age) > HOST_STALE_AFTER_SECONDS) return `host ${host.host_id} cannot be reached (last heartbeat ${host.age} s ago)`;
  return undefined;
}
