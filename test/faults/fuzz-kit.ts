import type { CuttableProxy } from '../helpers/toxiproxy';
import { OrchardError } from '../../client/errors';
import type { Client } from '@temporalio/client';
import fc from 'fast-check';

/** What the randomized schedule tests share: client calls retried like a service would, and what their checkers read. */

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A schedule test's knobs, read from `<prefix>_SEED` (replay), `_RUNS`, `_MAX_CUT_MS`, `_PATH` (with the seed: the one
 * failing case fast-check printed) and `_CASE_MS` (the bound on one case).
 */
export function fuzzKnobs(prefix: string, defaults: { runs: number; caseMs: number }) {
  const env = (name: string) => process.env[`${prefix}_${name}`] || undefined;
  return {
    seed: env('SEED') ? Number(env('SEED')) : (Date.now() ^ (Math.random() * 0x7fffffff)) | 0,
    runs: Number(env('RUNS') ?? defaults.runs),
    maxCutMs: Math.max(500, Number(env('MAX_CUT_MS') ?? 3_000)),
    path: env('PATH'),
    caseMs: Number(env('CASE_MS') ?? defaults.caseMs),
  };
}

/** How a call is repeated with the same request id: not, twice at once, or again after its answer (a lost response). */
export type Retry = 'none' | 'concurrent' | 'after';
export const retryArb = fc.constantFrom<Retry>('none', 'none', 'concurrent', 'after');

/**
 * Runs calls the way `retry` says, each until answered (`answered`), recording every outcome; the promises go to
 * `pending` for the schedule to await at its end.
 */
export function retrying(pending: Promise<unknown>[], deadline: number) {
  return <T>(retry: Retry, outcomes: Outcome<T>[], call: () => Promise<T>): void => {
    const once = () => answered(call, deadline).then((o) => void outcomes.push(o));
    if (retry === 'none') pending.push(once());
    else if (retry === 'concurrent') pending.push(once(), once());
    else pending.push(once().then(once));
  };
}

/** One client call's outcome: an answer, a typed refusal, or (after retrying infrastructure errors) none in time. */
export type Outcome<T> = { ok: T; errors: string[] } | { refused: string; errors: string[] } | { lost: true; errors: string[] };

/** Calls `fn` until it is answered or refused: infrastructure errors are retried with the same arguments (request id). */
export async function answered<T>(fn: () => Promise<T>, deadline: number): Promise<Outcome<T>> {
  const errors: string[] = [];
  for (;;) {
    try {
      return { ok: await fn(), errors };
    } catch (err) {
      if (err instanceof OrchardError) return { refused: err.code, errors };
      errors.push(String(err).slice(0, 200));
      if (Date.now() > deadline) return { lost: true, errors };
      await sleep(500);
    }
  }
}

/** Restores a cut proxy (its API may be slow to answer while the machine is busy). */
export async function restore(pg: CuttableProxy): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await pg.restore();
    } catch (err) {
      if (attempt >= 20) throw err;
      await sleep(250);
    }
  }
}

export const isOk = <T>(o: Outcome<T>): o is { ok: T; errors: string[] } => 'ok' in o;

export async function poll<T>(probe: () => Promise<T | undefined>, deadline: number): Promise<T | undefined> {
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) return undefined;
    await sleep(200);
  }
}

/** Workflow tasks that failed in the workflow's current run (a nondeterminism, a handler that threw, …). */
export async function failedWorkflowTasks(temporal: Client, workflowId: string): Promise<string[]> {
  const history = await temporal.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? [])
    .filter((e) => e.workflowTaskFailedEventAttributes)
    .map((e) => {
      const a = e.workflowTaskFailedEventAttributes!;
      return `event ${e.eventId}: cause ${a.cause}: ${a.failure?.message ?? ''}`.slice(0, 300);
    });
}

/** What a workflow waits on now: its pending activities (attempt, last failure) and pending workflow task. */
export async function diagnose(temporal: Client, workflowId: string): Promise<string> {
  const d = await temporal.workflow.getHandle(workflowId).describe();
  const raw = d.raw as any;
  const activities = (raw.pendingActivities ?? []).map(
    (a: any) =>
      `${a.activityType?.name} (state ${a.state}, attempt ${a.attempt}${a.lastFailure ? `, last failure: ${String(a.lastFailure.message).slice(0, 160)}` : ''})`,
  );
  const task = raw.pendingWorkflowTask ? `workflow task ${raw.pendingWorkflowTask.state} attempt ${raw.pendingWorkflowTask.attempt}` : 'no workflow task';
  return `${workflowId} ${d.status.name}; ${task}; pending activities: ${activities.join('; ') || 'none'}`;
}

/** `<mark> <phase> <ns>` lines: each mark (one command) starts once, and no two commands' spans overlap. */
export function overlaps(lines: string[]): { problems: string[]; commands: number } {
  const problems: string[] = [];
  const spans = new Map<string, { from: bigint; to: bigint; starts: number }>();
  for (const line of lines) {
    const [mark, phase, ns] = line.split(' ');
    if (!mark || !phase || !/^\d+$/.test(ns ?? '')) {
      problems.push(`writes.log: unreadable line ${JSON.stringify(line)}`);
      continue;
    }
    const at = BigInt(ns);
    const span = spans.get(mark) ?? { from: at, to: at, starts: 0 };
    if (at < span.from) span.from = at;
    if (at > span.to) span.to = at;
    if (phase === 'start') span.starts += 1;
    spans.set(mark, span);
  }
  for (const [mark, span] of spans) if (span.starts !== 1) problems.push(`command ${mark} started ${span.starts} times`);
  const sorted = [...spans.entries()].sort((a, b) => (a[1].from < b[1].from ? -1 : a[1].from > b[1].from ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    const [prevMark, prev] = sorted[i - 1];
    const [mark, span] = sorted[i];
    if (span.from <= prev.to) problems.push(`commands ${prevMark} and ${mark} wrote at the same time (${prev.from}..${prev.to} and ${span.from}..${span.to})`);
  }
  return { problems, commands: spans.size };
}
