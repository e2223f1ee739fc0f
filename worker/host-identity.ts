import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { hostname } from 'node:os';
import type { Pool } from 'pg';
import { claimHost, heartbeatHost, HOST_STALE_AFTER_SECONDS, releaseHost, UNKNOWN, type HostHolder, type HostInstance } from '../activities/store/hosts';
import { isProcessAlive } from './pid';
import { metrics } from '../activities/metrics';

/** How often a running worker refreshes its registration. */
const HOST_HEARTBEAT_SECONDS = 10;
/** After this long without a heartbeat a holder is presumed dead, wherever it ran (a few missed heartbeats). */
/** Another live worker holds this host id: starting a second one would split the host's queue across two disks. */
class HostIdInUseError extends Error {
  readonly code = 'host_id_in_use';
  constructor(readonly holder: HostHolder) {
    super(
      `host id ${holder.hostId} is held by a running worker: instance ${holder.instanceId}, pid ${holder.pid} on ` +
        `${holder.hostname}, last heartbeat ${holder.heartbeatAgeSeconds}s ago. Stop that worker first, or give this ` +
        `one its own ORCHARD_HOST_ID (or ORCHARD_STATE_DIR); a holder that died is taken over once its heartbeat is ` +
        `${HOST_STALE_AFTER_SECONDS}s old`,
    );
    this.name = 'HostIdInUseError';
  }
}

/** This process, as the host registry records it. */
function currentInstance(hostId: string): HostInstance {
  return {
    hostId,
    instanceId: randomUUID(),
    hostname: hostname(),
    bootId: readOr('/proc/sys/kernel/random/boot_id', (text) => text.trim()),
    pidNamespace: readOr('/proc/self/ns/pid', undefined, true),
    pid: process.pid,
  };
}

function readOr(path: string, parse?: (text: string) => string, link = false): string {
  try {
    const value = link ? fs.readlinkSync(path) : fs.readFileSync(path, 'utf8');
    return (parse ? parse(value) : value) || UNKNOWN;
  } catch {
    return UNKNOWN;
  }
}

export interface HostRegistration {
  readonly instance: HostInstance;
  /** Stops the heartbeat and releases the host id (if still ours). */
  release(): Promise<void>;
}

/**
 * Claims the host id for this process (refusing with HostIdInUseError when a live worker holds it) and keeps the
 * claim fresh. `onLost` runs when another instance has taken the id over meanwhile (this one's heartbeats stopped
 * reaching the database for longer than the stale bound): the caller must stop its workers.
 */
export async function registerHost(pool: Pool, hostId: string, log: (line: string) => void, onLost: (message: string) => void): Promise<HostRegistration> {
  const instance = currentInstance(hostId);
  const claim = await claimHost(pool, instance, { staleAfterSeconds: HOST_STALE_AFTER_SECONDS, isProcessAlive });
  if (claim.kind === 'refused') throw new HostIdInUseError(claim.holder);
  if (claim.tookOverFrom) {
    log(
      `host id ${hostId}: took over from instance ${claim.tookOverFrom.instanceId} (pid ${claim.tookOverFrom.pid} on ${claim.tookOverFrom.hostname}): ${claim.reason}`,
    );
  }
  let lost = false;
  const timer = setInterval(() => {
    const heartbeat = metrics.withStoreOrigin('host_heartbeat', () => heartbeatHost(pool, hostId, instance.instanceId));
    heartbeat.then(
      (held) => {
        if (held || lost) return;
        lost = true;
        clearInterval(timer);
        onLost(`host id ${hostId} was taken over by another worker while this one could not reach the database`);
      },
      (err: unknown) => log(`host id ${hostId}: heartbeat failed (${err instanceof Error ? err.message : String(err)}); retrying`),
    );
  }, HOST_HEARTBEAT_SECONDS * 1000);
  // The heartbeat must not keep a stopping process alive.
  timer.unref();
  return {
    instance,
    release: async () => {
      clearInterval(timer);
      if (!lost) await releaseHost(pool, hostId, instance.instanceId).catch(() => undefined);
    },
  };
}
