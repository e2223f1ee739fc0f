import { randomUUID } from 'node:crypto';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { nativeConnectionOptions } from '../worker/runtime';
import { startFleet, type Fleet, type FleetOrchestrator } from './fleet-stack';
import { benchNoop, noopUpdate } from './noop-workflow';
import { knob, type Report } from './report';

/**
 * Route latency on the real stack with the stub model (bench/fleet-stack.ts): from a user message to the
 * orchestrator until the target child's turn starts (its first model request reaches the stub). Measured one at a
 * time, each after the previous one has settled (the child's turn end answered by the orchestrator's manifest turn),
 * so a sample never waits behind another. Beside it, in the same run and alternating with it, a bare Temporal update
 * round trip (a no-op update of a trivial workflow on a Worker of its own, same server, same client connection);
 * and two other ways into a child's turn: the orchestrator asked to create a child (its first turn), and a `send`
 * straight from the client to an idle child.
 */
export async function benchRoute(report: Report): Promise<void> {
  const messages = knob('ROUTE_MESSAGES', 200);
  const sends = knob('ROUTE_SENDS', 20);
  const creates = knob('ROUTE_CREATES', 5);
  const children = Math.max(1, knob('ROUTE_CHILDREN', 5));
  const warmup = knob('ROUTE_WARMUP', 5);
  const fleet = await startFleet();
  const bare = await startNoopWorker(fleet);
  try {
    const { client } = fleet.orchard;
    await spawn(fleet, 0, children);
    const ids = (await client.orchestratorStatus(fleet.orchestratorId)).children.map((c) => c.childId);
    let seq = 0;
    let runIndex = (await fleet.settled()).runIndex;
    const routeOnce = async () => {
      const token = `tok-route-${++seq}`;
      const childId = ids[seq % ids.length];
      const started = fleet.orchestratorTurnStart(token);
      const arrived = fleet.childTurnStart(token);
      const t0 = performance.now();
      await client.message(fleet.orchestratorId, { text: `route ${token} to ${childId}` });
      const accepted = performance.now();
      const [orchestrator, child] = [await started, await arrived];
      await fleet.manifestOf(token);
      const before = runIndex;
      runIndex = (await fleet.settled()).runIndex;
      // The orchestrator continues as new every `turnsPerRun` turns (a route is two: its own and the manifest's).
      const crossed = runIndex !== before;
      return { total: child - t0, accept: accepted - t0, toOrchestrator: orchestrator - t0, dispatch: child - orchestrator, crossed };
    };
    for (let i = 0; i < warmup; i++) {
      await routeOnce();
      await bare.once();
    }
    const route: ReturnType<typeof routeOnce> extends Promise<infer T> ? T[] : never = [];
    const updates: number[] = [];
    for (let i = 0; i < messages; i++) {
      // Alternating, so a change of the machine's load hits both.
      updates.push(await bare.once());
      route.push(await routeOnce());
    }
    const note = `${ids.length} idle children, round robin`;
    const baseline = report.samples('route', 'bare Temporal update round trip (no-op update, own worker)', updates);
    report.against(
      report.samples(
        'route',
        'route: user message → target child turn start',
        route.map((r) => r.total),
        'ms',
        { note },
      ),
      baseline,
    );
    report.samples(
      'route',
      '… message update accepted (stored)',
      route.map((r) => r.accept),
    );
    report.samples(
      'route',
      "… message → orchestrator's model request",
      route.map((r) => r.toOrchestrator),
    );
    report.samples(
      'route',
      "… orchestrator's model request → child's model request",
      route.map((r) => r.dispatch),
    );
    for (const [name, crossed] of [
      ['… samples within one run of the orchestrator', false],
      ['… samples during which it continued as new', true],
    ] as const) {
      const some = route.filter((r) => r.crossed === crossed).map((r) => r.total);
      if (some.length > 0) report.samples('route', name, some);
    }

    const direct: number[] = [];
    for (let i = 0; i < sends; i++) {
      const token = `tok-send-${i}`;
      const childId = ids[i % ids.length];
      const arrived = fleet.childTurnStart(token);
      const t0 = performance.now();
      await client.send(childId, { task: `${token}: sent by a client` });
      direct.push((await arrived) - t0);
      await fleet.manifestOf(token);
      await fleet.settled();
    }
    if (direct.length > 0) report.against(report.samples('route', '`session send` from the client → idle child turn start', direct), baseline);

    const created: number[] = [];
    for (let i = 0; i < creates; i++) {
      const token = `tok-create-${i}`;
      const arrived = fleet.childTurnStart(token);
      const t0 = performance.now();
      await client.message(fleet.orchestratorId, { text: `create ${token}` });
      created.push((await arrived) - t0);
      await fleet.manifestOf(token);
      await fleet.settled();
    }
    if (created.length > 0) {
      report.against(
        report.samples('route', 'create-then-route: user message → new child turn start', created, 'ms', { note: 'worktree prepared on the way' }),
        baseline,
      );
    }
  } finally {
    await bare.stop();
    await fleet.stop();
  }
}

/**
 * `spawn from to`: the orchestrator's model creates children [from, to) in one step; resolves when they are idle.
 * Child numbers are unique across the fleet's orchestrators (they name the children's tokens).
 */
export async function spawn(fleet: Fleet, from: number, to: number, orchestrator: FleetOrchestrator = fleet): Promise<void> {
  await fleet.orchard.client.message(orchestrator.orchestratorId, { text: `spawn ${from} ${to}` });
  for (let i = from; i < to; i++) await fleet.manifestOf(`tok-w-${i}`);
  await orchestrator.settled();
}

const quiet = { log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined, warn: console.warn, error: console.error };

/**
 * A Worker of its own, on a queue of its own, with a workflow bundled from bench/noop-workflow.ts, and one workflow
 * running there; its updates go through the fleet's client (the same connection as every Orchard call measured).
 */
async function startNoopWorker(fleet: Fleet): Promise<{ once(): Promise<number>; stop(): Promise<void> }> {
  const connection = await NativeConnection.connect(nativeConnectionOptions(fleet.orchard.target));
  const taskQueue = `bench-noop-${randomUUID().slice(0, 8)}`;
  const worker = await Worker.create({
    connection,
    namespace: fleet.orchard.target.namespace,
    taskQueue,
    workflowBundle: await bundleWorkflowCode({ workflowsPath: require.resolve('./noop-workflow'), logger: quiet }),
  });
  const running = worker.run();
  const handle = await fleet.orchard.client.temporal.workflow.start(benchNoop, { taskQueue, workflowId: `bench-noop/${randomUUID()}` });
  return {
    once: async () => {
      const t0 = performance.now();
      await handle.executeUpdate(noopUpdate);
      return performance.now() - t0;
    },
    stop: async () => {
      await handle.cancel().catch(() => undefined);
      await handle.result().catch(() => undefined);
      worker.shutdown();
      await running;
      await connection.close();
    },
  };
}
