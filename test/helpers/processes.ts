import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { currentBootId, type ProcessIdentity } from '../../activities/bash/process-tree';
import { RUN_MARKER_ENV } from '../../activities/bash/runner';
import type { ProcessGroupIdentity } from '../../activities/store/leases';

type Teardown = { teardown(fn: () => unknown): void };

/** Read straight from /proc, not through the modules under test. */
export function procStat(pid: number): { live: boolean; pgid: number; sid: number; startTime: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { live: f[0] !== 'Z' && f[0] !== 'X', pgid: Number(f[2]), sid: Number(f[3]), startTime: Number(f[19]) };
  } catch {
    return undefined;
  }
}

export const isAlive = (pid: number) => procStat(pid)?.live === true;

/** Live processes whose command line contains `needle` (not zombies). */
export function pidsWithCommandLine(needle: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ').includes(needle) && isAlive(Number(entry))) {
        found.push(Number(entry));
      }
    } catch {
      // gone already
    }
  }
  return found;
}

/** SIGKILLs pids, ignoring those already gone (test cleanup). */
export function killAll(pids: Iterable<number>): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pidsIn = (text: string) => [...text.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));

/**
 * A command left behind by a dead worker: a detached bash (own session and group, as the runner starts it)
 * carrying a marker. `pids(n)` waits for n `pid=<n>` lines on its stdout; whatever is left is killed at teardown.
 */
export function orphan(t: Teardown, command: string, marker = randomUUID()) {
  const child = spawn('bash', ['-c', command], {
    detached: true,
    stdio: ['ignore', 'pipe', 'ignore'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', [RUN_MARKER_ENV]: marker },
  });
  const pgid = child.pid!;
  const startTime = procStat(pgid)!.startTime;
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  t.teardown(() => {
    killAll([pgid, ...pidsIn(out)]);
    killAll([-pgid]);
  });
  const identity: ProcessGroupIdentity = { pgid, bootId: currentBootId(), startTime, marker };
  // Exited and reaped: no process at the leader's pid any more, not even a zombie.
  const exited = once(child, 'exit').then(() => {
    if (procStat(pgid)) throw new Error(`pid ${pgid} is still in /proc`);
  });
  exited.catch(() => undefined);
  const pids = async (n: number) => {
    while (pidsIn(out).length < n) await sleep(20);
    return pidsIn(out);
  };
  return { identity, pids, exited };
}

/** The identity of a worker process that has exited: what a crashed worker's rows name as supervisor. */
export async function deadWorker(): Promise<ProcessIdentity> {
  const child = spawn('sleep', ['0.1'], { stdio: 'ignore' });
  const startTime = procStat(child.pid!)!.startTime;
  await once(child, 'exit');
  return { pid: child.pid!, startTime, bootId: currentBootId() };
}
