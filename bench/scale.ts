import type { temporal } from '@temporalio/proto';
import { renderRoster } from '../workflows/orchestrator/roster';
import { DEFAULT_LIMITS, type OrchestratorStatusView } from '../contract/messages';
import { startFleet, type Fleet } from './fleet-stack';
import { knob, type Figure, type Report } from './report';
import { spawn } from './route';

/**
 * One orchestrator grown to 10, 100 and 500 children (BENCH_SCALE_CHILDREN), created by its model in batches
 * (`spawn`: one model step with a `session create` per child), each child's first turn answered at once. At each
 * level, idle and then with 10% of the children busy in a turn (routed to by the orchestrator, their model's answer
 * held by the stub, so the roster lists them running): the route latency (as in the route section), the roster's
 * assembly, the orchestrator's carried state and its current run's history, and the process's RSS (the worker, the
 * client and the stub model share it). Each figure is recorded against the first level's.
 */
export async function benchScale(report: Report): Promise<void> {
  const levels = (process.env.BENCH_SCALE_CHILDREN ?? '10,100,500')
    .split(',')
    .map((x) => Number(x.trim()))
    .filter((n) => Number.isInteger(n) && n > 0)
    .sort((a, b) => a - b);
  const routes = Math.max(1, knob('SCALE_ROUTES', 5));
  const batch = Math.max(1, knob('SCALE_BATCH', 50));
  if (levels.length === 0) return report.skip('scale', 'BENCH_SCALE_CHILDREN names no level');
  const fleet = await startFleet();
  const first = new Map<string, Figure>();
  const againstFirst = (name: string, figure: Figure) => {
    const base = first.get(name);
    if (base === undefined) first.set(name, figure);
    else report.against(figure, base);
  };
  const record: RecordValue = (level, name, figure) => againstFirst(name, report.add({ section: 'scale', name: `${name} @${level}`, ...figure }));
  const distribution: RecordSamples = (level, name, samples, unit = 'ms', note) =>
    againstFirst(name, report.samples('scale', `${name} @${level}`, samples, unit, note === undefined ? {} : { note }));
  try {
    let children = 0;
    let seq = 0;
    for (const level of levels) {
      const spawnStarted = performance.now();
      for (; children < level; children = Math.min(level, children + batch)) await spawn(fleet, children, Math.min(level, children + batch));
      console.log(`scale: ${level} children created in ${((performance.now() - spawnStarted) / 1000).toFixed(1)} s`);
      // A fresh run of the orchestrator carries this level's ledger, and each level's run then sees the same turns.
      await rollOver(fleet, () => `tok-filler-${++seq}`);
      const status = await fleet.orchard.client.orchestratorStatus(fleet.orchestratorId);
      const ids = status.children.map((c) => c.childId);
      const note = `run ${status.runIndex}`;
      const facts = await runFacts(fleet);
      record(level, 'carried state (input of a run continued-as-new)', { unit: 'bytes', value: facts.input, note });
      record(level, 'status view (JSON)', { unit: 'bytes', value: Buffer.byteLength(JSON.stringify(status)) });
      rosterFigures(level, status, record, distribution);

      const idle = await routeSamples(fleet, ids, routes, () => `tok-scale-${++seq}`);
      distribution(level, 'route, idle', idle.latencies, 'ms', `${routes} routes`);
      distribution(level, "… idle: message → orchestrator's model request", idle.toOrchestrator);
      distribution(level, "… idle: orchestrator's model request → child's model request", idle.dispatch);
      record(level, "orchestrator's model request, idle", { unit: 'bytes', value: idle.requestBytes });
      distribution(level, "orchestrator's model step, idle", idle.modelSteps, 'ms', 'activity started → completed');
      const after = await runFacts(fleet);
      const routed = `${note}, after ${routes} routes`;
      record(level, "current run's history, events", { unit: 'count', value: after.events, note: routed });
      record(level, "current run's history, bytes", { unit: 'bytes', value: after.bytes, note: routed });
      const memory = process.memoryUsage();
      record(level, 'process RSS (worker, client, stub)', { unit: 'MiB', value: memory.rss / 2 ** 20 });
      record(level, 'process V8 heap used', { unit: 'MiB', value: memory.heapUsed / 2 ** 20 });

      // 10% busy: routed to by the orchestrator in one step (so its roster lists them running), their answers held.
      const busy = ids.slice(ids.length - Math.max(1, Math.round(level / 10)));
      const tokens = busy.map(() => `tok-busy-${++seq}`);
      const held = fleet.hold((token) => tokens.includes(token));
      await fleet.orchard.client.message(fleet.orchestratorId, { text: `fanout ${busy.map((id, i) => `${tokens[i]}:${id}`).join(' ')}` });
      for (const token of tokens) await fleet.childTurnStart(token);
      await fleet.settled();
      const idleIds = ids.filter((id) => !busy.includes(id));
      const active = await routeSamples(fleet, idleIds, routes, () => `tok-scale-${++seq}`);
      distribution(level, 'route, 10% busy', active.latencies, 'ms', `${busy.length} busy, ${routes} routes`);
      distribution(level, "… 10% busy: message → orchestrator's model request", active.toOrchestrator);
      distribution(level, "… 10% busy: orchestrator's model request → child's model request", active.dispatch);
      record(level, "orchestrator's model request, 10% busy", { unit: 'bytes', value: active.requestBytes });
      distribution(level, "orchestrator's model step, 10% busy", active.modelSteps, 'ms', 'activity started → completed');
      rosterFigures(level, await fleet.orchard.client.orchestratorStatus(fleet.orchestratorId), record, distribution, '10% busy');
      held.release();
      for (const token of tokens) await fleet.manifestOf(token);
      await fleet.settled();
    }
  } finally {
    await fleet.stop();
  }
}

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
type RecordValue = (level: number, name: string, figure: Omit<Figure, 'section' | 'name'>) => void;
type RecordSamples = (level: number, name: string, samples: number[], unit?: Figure['unit'], note?: string) => void;

/** Routes to children spread over the fleet, one at a time, each after the previous one settled. */
async function routeSamples(
  fleet: Fleet,
  ids: readonly string[],
  n: number,
  token: () => string,
): Promise<{ latencies: number[]; toOrchestrator: number[]; dispatch: number[]; requestBytes: number; modelSteps: number[] }> {
  const latencies: number[] = [];
  const toOrchestrator: number[] = [];
  const dispatch: number[] = [];
  let requestBytes = 0;
  const since = Date.now();
  for (let i = 0; i < n; i++) {
    const t = token();
    const childId = ids[Math.floor(((i + 0.5) * ids.length) / n)];
    const arrived = fleet.childTurnStart(t);
    const started = fleet.orchestratorTurnStart(t);
    const t0 = performance.now();
    await fleet.orchard.client.message(fleet.orchestratorId, { text: `route ${t} to ${childId}` });
    const [orchestrator, child] = [await started, await arrived];
    latencies.push(child - t0);
    toOrchestrator.push(orchestrator - t0);
    dispatch.push(child - orchestrator);
    requestBytes = Math.max(requestBytes, fleet.lastOrchestratorRequestBytes());
    await fleet.manifestOf(t);
    await fleet.settled();
  }
  return { latencies, toOrchestrator, dispatch, requestBytes, modelSteps: await modelStepDurations(fleet, since) };
}

/**
 * The orchestrator's `modelStep` activities scheduled since `since` (wall ms), started → completed, from the histories of
 * its runs since then (the chain is followed back through continue-as-new): the part of a route that reads the
 * conversation, sends the request and records the answer, without the waits for the server's task queues around it.
 */
async function modelStepDurations(fleet: Fleet, since: number): Promise<number[]> {
  const at = (e: { eventTime?: { seconds?: unknown; nanos?: number | null } | null }) =>
    Number(e.eventTime?.seconds ?? 0) * 1000 + (e.eventTime?.nanos ?? 0) / 1e6;
  const durations: number[] = [];
  for (let runId: string | undefined = undefined; ;) {
    const history: { events?: HistoryEvent[] | null } = await fleet.orchard.client.temporal.workflow.getHandle(fleet.workflowId, runId).fetchHistory();
    const events = history.events ?? [];
    const steps = new Set<string>();
    const started = new Map<string, number>();
    for (const e of events) {
      const scheduled = e.activityTaskScheduledEventAttributes;
      if (scheduled?.activityType?.name === 'modelStep' && at(e) >= since) steps.add(String(e.eventId));
      const start = e.activityTaskStartedEventAttributes;
      if (start && steps.has(String(start.scheduledEventId))) started.set(String(start.scheduledEventId), at(e));
      const done = e.activityTaskCompletedEventAttributes;
      const t0 = done ? started.get(String(done.scheduledEventId)) : undefined;
      if (t0 !== undefined) durations.push(at(e) - t0);
    }
    const previous: string | null | undefined = events[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId;
    if (!previous || events.length === 0 || at(events[0]) < since) return durations;
    runId = previous;
  }
}

/**
 * The roster is assembled inside the orchestrator's workflow, by `renderRoster` over its ledger, for every model
 * step (workflows/orchestrator/workflow.ts): timed here on the same ledger rows (the status view's children), and
 * the `roster` query's round trip from the client.
 */
function rosterFigures(level: number, status: OrchestratorStatusView, record: RecordValue, distribution: RecordSamples, when = 'idle'): void {
  const rounds = 500;
  const samples: number[] = [];
  let text = '';
  for (let i = 0; i < rounds + 50; i++) {
    const t0 = process.hrtime.bigint();
    text = renderRoster(status.children);
    // The first rounds warm the function up (the workflow's isolate calls it on every model step).
    if (i >= 50) samples.push(Number(process.hrtime.bigint() - t0) / 1e3);
  }
  distribution(level, `roster assembly (renderRoster over the ledger), ${when}`, samples, 'µs', `${text.split('\n').length - 2} rows`);
  record(level, `roster text, ${when}`, { unit: 'bytes', value: Buffer.byteLength(text) });
}

/**
 * Sends the orchestrator messages its model only acknowledges until it has continued as new (it does after
 * `turnsPerRun` turns of a run): the new run starts from the carried state, with none of the turns before.
 */
async function rollOver(fleet: Fleet, token: () => string): Promise<void> {
  const { client } = fleet.orchard;
  const before = (await client.orchestratorStatus(fleet.orchestratorId)).runIndex;
  for (let i = 0; i <= 2 * DEFAULT_LIMITS.turnsPerRun; i++) {
    const t = token();
    await client.message(fleet.orchestratorId, { text: `acknowledge ${t}` });
    await fleet.orchestratorTurnStart(t);
    await fleet.settled();
    if ((await client.orchestratorStatus(fleet.orchestratorId)).runIndex > before) return;
  }
  throw new Error(`bench: orchestrator ${fleet.orchestratorId} did not continue as new after ${2 * DEFAULT_LIMITS.turnsPerRun + 1} turns`);
}

/** The orchestrator's current run: the input it started with (the carried state), its history's events and bytes. */
async function runFacts(fleet: Fleet): Promise<{ input: number; events: number; bytes: number }> {
  const { temporal } = fleet.orchard.client;
  const described = await temporal.workflow.getHandle(fleet.workflowId).describe();
  const info = described.raw.workflowExecutionInfo;
  const history = await temporal.workflow.getHandle(fleet.workflowId, described.runId).fetchHistory();
  const input = (history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? []).reduce((n, p) => n + (p.data?.length ?? 0), 0);
  return { input, events: Number(info?.historyLength ?? 0), bytes: Number(info?.historySizeBytes ?? 0) };
}
