import type { temporal } from '@temporalio/proto';
import { renderRoster } from '../workflows/orchestrator/roster';
import { DEFAULT_LIMITS, type OrchestratorStatusView } from '../contract/messages';
import { startFleet, type Fleet, type FleetOrchestrator } from './fleet-stack';
import { knob, type Figure, type Report } from './report';
import { spawn } from './route';

/**
 * One orchestrator grown to 10, 100 and 500 children (BENCH_SCALE_CHILDREN), created by its model in batches
 * (`spawn`: one model step with a `session create` per child), each child's first turn answered at once. At each
 * level, idle and then with 10% of the children busy in a turn (routed to by the orchestrator, their model's answer
 * held by the stub, so the roster lists them running): the route latency (as in the route section), the roster's
 * assembly, the orchestrator's carried state and its current run's history, and the process's RSS (the worker, the
 * client and the stub model share it).
 *
 * Route figures are measured against a reference: a second orchestrator on the same stack with the first level's
 * children (and as many of them busy, 10%), its routes alternating with the grown one's, so both see the same
 * minutes of the machine (a load that changes over the section's minutes hits both) and the ratio is the cost of the
 * fleet's size. At the first level the two are alike, and their ratio shows the measurement's own spread. The other
 * figures are recorded against the first level's.
 */
export async function benchScale(report: Report): Promise<void> {
  const levels = (process.env.BENCH_SCALE_CHILDREN ?? '10,100,500')
    .split(',')
    .map((x) => Number(x.trim()))
    .filter((n) => Number.isInteger(n) && n > 0)
    .sort((a, b) => a - b);
  const routes = Math.max(1, knob('SCALE_ROUTES', 10));
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
    // The reference's children are numbered apart from the grown orchestrator's (their numbers name their tokens).
    const referenceSize = levels[0];
    const reference = await fleet.addOrchestrator('bench reference');
    for (let n = 0; n < referenceSize; n = Math.min(referenceSize, n + batch)) {
      await spawn(fleet, REFERENCE_BASE + n, REFERENCE_BASE + Math.min(referenceSize, n + batch), reference);
    }
    const referenceIds = (await fleet.orchard.client.orchestratorStatus(reference.orchestratorId)).children.map((c) => c.childId);
    const paired = (level: number, when: string, grown: RouteSamples, ref: RouteSamples, note: string) => {
      const pair = (name: string, a: number[], b: number[], unit: Figure['unit'] = 'ms', extra = '') => {
        const referenceName = `${name}, reference (${referenceSize} children)`;
        const base = report.samples('scale', `${referenceName} @${level}`, b, unit, { note: `alternating with @${level}${extra}` });
        // Against its own first level: how the machine and the host's other workflows moved it between levels.
        againstFirst(referenceName, base);
        report.against(report.samples('scale', `${name} @${level}`, a, unit, { note: `${note}${extra}` }), base);
      };
      pair(`route, ${when}`, grown.latencies, ref.latencies);
      pair(`… ${when}: message → orchestrator's model request`, grown.toOrchestrator, ref.toOrchestrator);
      pair(`… ${when}: orchestrator's model request → child's model request`, grown.dispatch, ref.dispatch);
      pair(`orchestrator's model step, ${when}`, grown.modelSteps, ref.modelSteps, 'ms', '; activity started → completed');
      record(level, `orchestrator's model request, ${when}`, { unit: 'bytes', value: grown.requestBytes });
    };

    let children = 0;
    let seq = 0;
    for (const level of levels) {
      const spawnStarted = performance.now();
      for (; children < level; children = Math.min(level, children + batch)) await spawn(fleet, children, Math.min(level, children + batch));
      console.log(`scale: ${level} children created in ${((performance.now() - spawnStarted) / 1000).toFixed(1)} s`);
      // A fresh run of each orchestrator carries its ledger, and each level's runs then see the same turns.
      await rollOver(fleet, fleet, () => `tok-filler-${++seq}`);
      await rollOver(fleet, reference, () => `tok-filler-${++seq}`);
      const status = await fleet.orchard.client.orchestratorStatus(fleet.orchestratorId);
      const ids = status.children.map((c) => c.childId);
      const note = `run ${status.runIndex}`;
      const facts = await runFacts(fleet);
      record(level, 'carried state (input of a run continued-as-new)', { unit: 'bytes', value: facts.input, note });
      record(level, 'status view (JSON)', { unit: 'bytes', value: Buffer.byteLength(JSON.stringify(status)) });
      rosterFigures(level, status, record, distribution);

      const token = () => `tok-scale-${++seq}`;
      const idle = await pairedRouteSamples(fleet, { orchestrator: fleet, ids }, { orchestrator: reference, ids: referenceIds }, routes, token);
      paired(level, 'idle', idle.grown, idle.reference, `${routes} routes`);
      // The run the routes started in: one that continued as new during them is measured as it ended.
      const after = await runFacts(fleet, facts.runId);
      const routed = `${note}, after ${routes} routes${after.closed ? ' (continued as new during them)' : ''}`;
      record(level, "current run's history, events", { unit: 'count', value: after.events, note: routed });
      record(level, "current run's history, bytes", { unit: 'bytes', value: after.bytes, note: routed });
      const memory = process.memoryUsage();
      record(level, 'process RSS (worker, client, stub)', { unit: 'MiB', value: memory.rss / 2 ** 20 });
      record(level, 'process V8 heap used', { unit: 'MiB', value: memory.heapUsed / 2 ** 20 });

      // 10% busy: routed to by the orchestrator in one step (so its roster lists them running), their answers held.
      const busy = await makeBusy(fleet, fleet, ids, () => `tok-busy-${++seq}`);
      const referenceBusy = await makeBusy(fleet, reference, referenceIds, () => `tok-busy-${++seq}`);
      const active = await pairedRouteSamples(
        fleet,
        { orchestrator: fleet, ids: ids.filter((id) => !busy.ids.includes(id)) },
        { orchestrator: reference, ids: referenceIds.filter((id) => !referenceBusy.ids.includes(id)) },
        routes,
        token,
      );
      paired(level, '10% busy', active.grown, active.reference, `${busy.ids.length} busy, ${routes} routes`);
      rosterFigures(level, await fleet.orchard.client.orchestratorStatus(fleet.orchestratorId), record, distribution, '10% busy');
      await busy.release();
      await referenceBusy.release();
    }
  } finally {
    await fleet.stop();
  }
}

/** The reference orchestrator's first child number. */
const REFERENCE_BASE = 1_000_000;

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
type RecordValue = (level: number, name: string, figure: Omit<Figure, 'section' | 'name'>) => void;
type RecordSamples = (level: number, name: string, samples: number[], unit?: Figure['unit'], note?: string) => void;
interface RouteSamples {
  latencies: number[];
  toOrchestrator: number[];
  dispatch: number[];
  requestBytes: number;
  modelSteps: number[];
}
interface RouteTarget {
  orchestrator: FleetOrchestrator;
  ids: readonly string[];
}

/**
 * 10% of `ids` (at least one) busy: routed to by the orchestrator in one step, so its roster lists them running, their
 * model's answers held until `release`, which waits for their results to reach the orchestrator.
 */
async function makeBusy(fleet: Fleet, orchestrator: FleetOrchestrator, ids: readonly string[], token: () => string) {
  const busy = ids.slice(ids.length - Math.max(1, Math.round(ids.length / 10)));
  const tokens = busy.map(() => token());
  const held = fleet.hold((t) => tokens.includes(t));
  await fleet.orchard.client.message(orchestrator.orchestratorId, { text: `fanout ${busy.map((id, i) => `${tokens[i]}:${id}`).join(' ')}` });
  for (const t of tokens) await fleet.childTurnStart(t);
  await orchestrator.settled();
  return {
    ids: busy,
    release: async () => {
      held.release();
      for (const t of tokens) await fleet.manifestOf(t);
      await orchestrator.settled();
    },
  };
}

/**
 * Routes through the grown orchestrator and the reference in turn (which goes first alternates), to children spread
 * over each one's `ids`, one at a time, each after the previous one settled.
 */
async function pairedRouteSamples(
  fleet: Fleet,
  grown: RouteTarget,
  reference: RouteTarget,
  n: number,
  token: () => string,
): Promise<{ grown: RouteSamples; reference: RouteSamples }> {
  const since = Date.now();
  const samples = new Map<RouteTarget, RouteSamples>(
    [grown, reference].map((t) => [t, { latencies: [], toOrchestrator: [], dispatch: [], requestBytes: 0, modelSteps: [] }]),
  );
  for (let i = 0; i < n; i++) {
    for (const target of i % 2 === 0 ? [reference, grown] : [grown, reference]) {
      const into = samples.get(target)!;
      const t = token();
      const childId = target.ids[Math.floor(((i + 0.5) * target.ids.length) / n)];
      const arrived = fleet.childTurnStart(t);
      const started = fleet.orchestratorTurnStart(t);
      const t0 = performance.now();
      await fleet.orchard.client.message(target.orchestrator.orchestratorId, { text: `route ${t} to ${childId}` });
      const [orchestrator, child] = [await started, await arrived];
      into.latencies.push(child - t0);
      into.toOrchestrator.push(orchestrator - t0);
      into.dispatch.push(child - orchestrator);
      into.requestBytes = Math.max(into.requestBytes, fleet.lastOrchestratorRequestBytes());
      await fleet.manifestOf(t);
      await target.orchestrator.settled();
    }
  }
  for (const [target, into] of samples) into.modelSteps = await modelStepDurations(fleet, target.orchestrator.workflowId, since);
  return { grown: samples.get(grown)!, reference: samples.get(reference)! };
}

/**
 * The orchestrator's `modelStep` activities scheduled since `since` (wall ms), started → completed, from the histories of
 * its runs since then (the chain is followed back through continue-as-new): the part of a route that reads the
 * conversation, sends the request and records the answer, without the waits for the server's task queues around it.
 */
async function modelStepDurations(fleet: Fleet, workflowId: string, since: number): Promise<number[]> {
  const at = (e: { eventTime?: { seconds?: unknown; nanos?: number | null } | null }) =>
    Number(e.eventTime?.seconds ?? 0) * 1000 + (e.eventTime?.nanos ?? 0) / 1e6;
  const durations: number[] = [];
  for (let runId: string | undefined = undefined; ;) {
    const history: { events?: HistoryEvent[] | null } = await fleet.orchard.client.temporal.workflow.getHandle(workflowId, runId).fetchHistory();
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
async function rollOver(fleet: Fleet, orchestrator: FleetOrchestrator, token: () => string): Promise<void> {
  const { client } = fleet.orchard;
  const { orchestratorId } = orchestrator;
  const before = (await client.orchestratorStatus(orchestratorId)).runIndex;
  for (let i = 0; i <= 2 * DEFAULT_LIMITS.turnsPerRun; i++) {
    const t = token();
    await client.message(orchestratorId, { text: `acknowledge ${t}` });
    await fleet.orchestratorTurnStart(t);
    await orchestrator.settled();
    if ((await client.orchestratorStatus(orchestratorId)).runIndex > before) return;
  }
  throw new Error(`bench: orchestrator ${orchestratorId} did not continue as new after ${2 * DEFAULT_LIMITS.turnsPerRun + 1} turns`);
}

/** A run of the orchestrator (its current one by default): the input it started with (the carried state), its history's events and bytes. */
async function runFacts(fleet: Fleet, runId?: string): Promise<{ runId: string; closed: boolean; input: number; events: number; bytes: number }> {
  const { temporal } = fleet.orchard.client;
  const described = await temporal.workflow.getHandle(fleet.workflowId, runId).describe();
  const info = described.raw.workflowExecutionInfo;
  const history = await temporal.workflow.getHandle(fleet.workflowId, described.runId).fetchHistory();
  const input = (history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? []).reduce((n, p) => n + (p.data?.length ?? 0), 0);
  return {
    runId: described.runId,
    closed: described.status.name !== 'RUNNING',
    input,
    events: Number(info?.historyLength ?? 0),
    bytes: Number(info?.historySizeBytes ?? 0),
  };
}
